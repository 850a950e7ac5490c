"""Calibration: does the simulator, replaying the server's own history under the policy the
server ran, predict the JCTs the server measured? (docs/experiments/calibration.md)

For each policy and seed it starts ``dlsched server`` on an embedded Ray cluster (2 emulated
nodes x 4 GPUs), submits the seed's workload of real PyTorch jobs (1, 2 and 4 GPUs, arrivals
spread over a few minutes, two tenants) through the API, waits for all of them and exports the
history (``GET /v1/export``). The replays are one sweep per policy (``dlsched.sweep``, cached
in ``OUT/POLICY/replays``): each seed's history under the server's policy, as exported (each
job's measured start-up and restart pauses), with every job's pauses set to the cluster's
median ones (a model, not each job's own measurement), and without pauses (what the simulator
charges by default), to show what modelling them from measurement is worth. Each replay's
calibration (its JCTs against the measured ones, as ``dlsched whatif`` reports it) is
tabulated as means with 95% intervals across the seeds: ``OUT/summary.md``,
``OUT/calibration.json``.

    .venv/bin/python experiments/calibration.py [--jobs 36] [--seeds 0,1,2] \\
        [--policies tiresias,sjf-bsbf] [--out out/calibration] [--replay-only]

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

from dlsched.stats import format_ci

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


def run_policy(policy: str, jobs, folder: Path) -> dict:
    """One server run of ``jobs`` under ``policy``: its exported history (kept in ``folder``)."""
    data_dir = folder / "server"
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
    (folder / "history.json").write_text(json.dumps(history, indent=1))
    return history


PAUSES = ("own", "median", "none")  # each job's measured pauses, the cluster's median, none
FIELDS = {  # calibration field: (label, scale, digits)
    "mean_jct_measured_s": ("measured mean JCT (s)", 1, 1),
    "mean_jct_simulated_s": ("simulated (s)", 1, 1),
    "mean_jct_error": ("mean JCT error (%)", 100, 1),
    "job_error_median": ("per-job error median (%)", 100, 1),
    "job_error_p90": ("p90 (%)", 100, 1),
    "job_error_max": ("max (%)", 100, 0),
}


def replay_trace(history: dict, pauses: str, path: Path) -> Path:
    """The exported history as a trace whose jobs pause as long as they did on the server
    (``own``), as the cluster's median pause (``median``), or not at all (``none``)."""
    from dlsched.runtime.export import history_csv

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
    return path


def replay_sweep(policy: str, histories: dict[int, dict], out: Path) -> dict:
    """Each seed's history replayed under the server's policy, with each kind of pauses, as
    one sweep (``dlsched.sweep``: cached in ``out/policy/replays``): seed -> pauses -> the
    replay's calibration against the JCTs the server measured."""
    from dlsched.sweep import run_sweep

    traces = {}
    for seed, history in histories.items():
        for pauses in PAUSES:
            path = out / policy / f"seed{seed}" / f"replay-{pauses}-pauses.csv"
            traces[str(replay_trace(history, pauses, path))] = (seed, pauses)
    first = next(iter(histories.values()))
    spec = {
        "name": f"calibration replays: {policy}",
        "runs": {"format": "history", "cluster": first["cluster"]},
        "axes": {"trace": list(traces), "policy": [{"name": policy, "params": first["params"]}]},
    }
    result = run_sweep(spec, out / policy / "replays", sequential=True)
    if not result.ok:
        raise RuntimeError(f"replays failed: see {out / policy / 'replays' / 'failures.json'}")
    fits: dict[int, dict] = {}
    for row in result.rows:
        seed, pauses = traces[row["trace"]]
        fits.setdefault(seed, {})[pauses] = {field: row[f"calibration.{field}"] for field in FIELDS}
    return fits


def table(results: dict) -> str:
    """Per policy and pauses: each calibration field's mean ± 95% interval across seeds."""
    lines = [
        "| policy | pauses in the replay | seeds | "
        + " | ".join(v[0] for v in FIELDS.values())
        + " |",
        "|---|---|---|" + "---|" * len(FIELDS),
    ]
    for policy, result in results.items():
        fits = result["replays"]
        for pauses in PAUSES:
            cells = [
                format_ci([fits[seed][pauses][field] for seed in fits], digits, scale)
                for field, (_, scale, digits) in FIELDS.items()
            ]
            lines.append(f"| {policy} | {pauses} | {len(fits)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--jobs", type=int, default=36, help="jobs per server run (default %(default)s)"
    )
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated: one server run each")
    parser.add_argument(
        "--policies",
        default="tiresias,sjf-bsbf",
        help="comma-separated: the servers' policies (default %(default)s)",
    )
    parser.add_argument(
        "--out",
        default=str(ROOT / "out" / "calibration"),
        help="the folder of the results (default %(default)s)",
    )
    parser.add_argument(
        "--replay-only", action="store_true", help="replay the histories of an earlier run"
    )
    args = parser.parse_args()
    out = Path(args.out)
    seeds = [int(s) for s in args.seeds.split(",")]
    results = {}
    for policy in args.policies.split(","):
        histories, runs = {}, {}
        for seed in seeds:
            folder = out / policy / f"seed{seed}"
            if not args.replay_only:
                t0 = time.time()
                history = run_policy(policy, workload(args.jobs, seed), folder)
                jobs = history["jobs"]
                record = {  # kept beside the history: --replay-only reads it again
                    "wall_s": round(time.time() - t0),
                    "jobs": len(jobs),
                    "preemptions": sum(j["preemptions"] for j in jobs),
                    "shared": sum(1 for j in jobs if j["slowdown"]),
                    "typical_pauses": history["typical"],
                }
                (folder / "run.json").write_text(json.dumps(record, indent=1))
            histories[seed] = json.loads((folder / "history.json").read_text())
            runs[seed] = json.loads((folder / "run.json").read_text())
            print(json.dumps({policy: {seed: runs[seed]}}))
        results[policy] = {"runs": runs, "replays": replay_sweep(policy, histories, out)}
    (out / "calibration.json").write_text(json.dumps(results, indent=1))
    text = table(results)
    (out / "summary.md").write_text(text)
    print(text + f"wrote {out / 'calibration.json'} and summary.md")


if __name__ == "__main__":
    main()
