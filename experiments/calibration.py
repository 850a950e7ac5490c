"""Calibration: does the simulator, replaying the server's own history under the policy the
server ran, predict the JCTs the server measured? (docs/experiments/calibration.md)

For each policy it starts ``dlsched server`` on an embedded Ray cluster (2 emulated nodes x 4
GPUs), submits a seeded workload of real PyTorch jobs (1, 2 and 4 GPUs, arrivals spread over a
few minutes, two tenants) through the API, waits for all of them, exports the history
(``GET /v1/export``) and replays it with ``dlsched whatif``: once as exported, and once without
the measured start-up and restart pauses (what the simulator charges by default), and once with
every job's pauses set to the cluster's median ones (a model, not each job's own measurement),
to show what modelling them from measurement is worth.

    .venv/bin/python experiments/calibration.py [--jobs 36] [--policies tiresias,sjf-bsbf] \\
        [--out out/calibration]

The jobs' accelerator time is emulated (dlsched.workloads.emulated): two CPU cores cannot stand
in for eight GPUs' compute.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
DLSCHED = [sys.executable, "-m", "dlsched.cli"]
# per policy: its parameters. Tiresias' thresholds are scaled from its 1 h default to a workload
# of minutes, so that jobs are demoted and preempted within the run.
POLICY_PARAMS = {"tiresias": {"thresholds_gpu_s": "60"}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def workload(n: int, seed: int) -> list[tuple[float, str, dict]]:
    """(arrival offset s, tenant, spec): sizes 1/2/4 GPUs, 20-80 s alone, Poisson arrivals."""
    rng = random.Random(seed)
    t, jobs = 0.0, []
    for i in range(n):
        t += rng.expovariate(1 / 7.0)
        gpus = rng.choice([1, 1, 1, 2, 2, 4])
        batch = 32
        per_iteration_s = (5.0 + 2.0 * batch / gpus) / 1000  # the emulated device's time
        iterations = int(rng.uniform(20, 80) / per_iteration_s)
        jobs.append(
            (
                t,
                rng.choice(["alice", "bob"]),
                {
                    "entrypoint": "dlsched.workloads.emulated:build",
                    "gpus": gpus,
                    "batch_size": batch,
                    "iterations": iterations,
                    "name": f"cal-{i}",
                    "log_every": 200,
                    "checkpoint_every": 0,
                    "args": {"per_sample_ms": 2.0, "fixed_ms": 5.0, "seed": i},
                },
            )
        )
    return jobs


class Server:
    def __init__(self, policy: str, data_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        token_file = data_dir / "admin.token"
        data_dir.mkdir(parents=True, exist_ok=True)
        token_file.write_text("calibration-admin-token-0123456789")
        self.admin = {"Authorization": "Bearer calibration-admin-token-0123456789"}
        isolate = os.geteuid() == 0 and shutil.which("bwrap") is not None
        params = [
            a for k, v in POLICY_PARAMS.get(policy, {}).items() for a in ("--param", f"{k}={v}")
        ]
        env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "disabled",
        }
        self.log = open(data_dir / "server.log", "w")
        self.proc = subprocess.Popen(
            DLSCHED
            + [
                "server",
                "--policy",
                policy,
                *params,
                "--port",
                str(self.port),
                "--data-dir",
                str(data_dir),
                "--admin-token-file",
                str(token_file),
                "--nodes",
                "2",
                "--gpus-per-node",
                "4",
            ]
            + ([] if isolate else ["--trust-tenants"]),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        deadline = time.time() + 180
        while time.time() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: see {data_dir / 'server.log'}")
            time.sleep(1)
        raise RuntimeError("the server did not come up in 180 s")

    def call(self, method: str, path: str, auth: dict, **kw):
        r = httpx.request(method, self.url + path, headers=auth, timeout=60, **kw)
        r.raise_for_status()
        return r.json()

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)  # only the processes this script started
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


def run_policy(policy: str, jobs, out: Path) -> dict:
    data_dir = out / policy / "server"
    shutil.rmtree(data_dir, ignore_errors=True)
    server = Server(policy, data_dir)
    try:
        tokens = {
            t: {
                "Authorization": "Bearer "
                + server.call("POST", "/v1/tenants", server.admin, json={"name": t})["token"]
            }
            for t in ("alice", "bob")
        }
        start, ids = time.time(), []
        for offset, tenant, spec in jobs:
            time.sleep(max(0.0, start + offset - time.time()))
            ids.append(server.call("POST", "/v1/jobs", tokens[tenant], json=spec)["id"])
        while True:
            rows = server.call("GET", "/v1/jobs", server.admin)
            left = [r for r in rows if r["status"] not in ("done", "failed", "cancelled")]
            print(
                f"\r{policy}: {len(rows) - len(left)}/{len(rows)} finished after "
                f"{time.time() - start:.0f} s",
                end="",
                flush=True,
            )
            if not left:
                break
            time.sleep(5)
        print()
        failed = [r["id"] for r in rows if r["status"] != "done"]
        if failed:
            raise RuntimeError(f"jobs did not finish: {failed} (see {data_dir})")
        history = server.call("GET", "/v1/export", server.admin)
    finally:
        server.stop()
    (out / policy / "history.json").write_text(json.dumps(history, indent=1))
    return history


def replay(policy: str, history: dict, out: Path, pauses: str) -> dict:
    """``dlsched whatif`` on the exported history, each job's pauses its own measured ones
    (``own``), the cluster's median ones (``median``) or none; its calibration against the
    measured JCTs."""
    from dlsched.runtime.export import history_csv

    name = f"replay-{pauses}-pauses"
    path = out / policy / f"{name}.csv"
    rows = list(csv.DictReader(history_csv(history).splitlines()))
    for row in rows:
        for column in ("startup_s", "restart_s"):
            if pauses == "median":
                row[column] = history["typical"][column]
            elif pauses == "none":
                row[column] = 0.0
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, rows[0].keys(), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    params = [a for k, v in history["params"].items() for a in ("--param", f"{k}={v}")]
    subprocess.run(
        DLSCHED
        + [
            "whatif",
            "--trace",
            str(path),
            "--cluster",
            history["cluster"],
            "--server-policy",
            policy,
            *params,
            "--out",
            str(out / policy / name),
            "--no-progress",
        ],
        check=True,
    )
    return json.loads((out / policy / name / "whatif.json").read_text())["policies"][policy][
        "calibration"
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=36)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policies", default="tiresias,sjf-bsbf")
    parser.add_argument("--out", default=str(ROOT / "out" / "calibration"))
    parser.add_argument(
        "--replay-only", action="store_true", help="replay the histories of an earlier run"
    )
    args = parser.parse_args()
    out = Path(args.out)
    results = {}
    for policy in args.policies.split(","):
        t0 = time.time()
        history = (
            json.loads((out / policy / "history.json").read_text())
            if args.replay_only
            else run_policy(policy, workload(args.jobs, args.seed), out)
        )
        jobs = history["jobs"]
        results[policy] = {
            "wall_s": round(time.time() - t0),
            "jobs": len(jobs),
            "preemptions": sum(j["preemptions"] for j in jobs),
            "shared": sum(1 for j in jobs if j["slowdown"]),
            "sizes": sorted({j["gpus"] for j in jobs}),
            "typical_pauses": history["typical"],
            **{f"{p}_pauses": replay(policy, history, out, p) for p in ("own", "median", "none")},
        }
        print(json.dumps(results[policy], indent=1))
    (out / "calibration.json").write_text(json.dumps(results, indent=1))
    print(f"wrote {out / 'calibration.json'}")


if __name__ == "__main__":
    main()
