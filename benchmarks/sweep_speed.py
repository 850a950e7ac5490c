"""A sweep on Ray against the same runs one after another: 40 short runs (4 policies x 10 seeds
of a synthetic trace), each side from nothing (its own output folder and workload cache), the
Ray side including starting and stopping its embedded cluster. Prints both wall times and the
speed-up (issue 27 asks for at least 1.7x on a 2-core machine) of each round (the two sides in
turn, in alternating order), their geometric mean with its 95% interval, and what Ray's start
and stop cost alone. With ``--ceiling``, each round also times the same runs as two
``--sequential`` sweeps of half the seeds each at once, without Ray: what two processes gain on
this machine, the most a sweep on Ray could.

    .venv/bin/python benchmarks/sweep_speed.py [--jobs 12000] [--seeds 10] [--rounds 1] [--ceiling]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dlsched.stats import geometric_mean_ci


def sweep_process(spec: Path, out: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "DLSCHED_CACHE_DIR": str(out / "cache")}
    cmd = [sys.executable, "-c", "from dlsched.cli import console_main; console_main()"]
    cmd += ["sweep", str(spec), "--out", str(out), "--no-progress", *extra]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)


def timed(*sweeps: tuple) -> float:
    """The wall time of the sweeps ``(spec, out, *extra)``, run at once."""
    started = time.perf_counter()
    processes = [sweep_process(*sweep) for sweep in sweeps]
    for process in processes:
        if process.wait() != 0:
            raise SystemExit(f"a sweep failed: {process.args}")
    return time.perf_counter() - started


def ray_start_and_stop() -> float:
    """What an empty sweep on Ray costs: importing Ray, starting an embedded cluster on every
    core as the sweep does, one task per core, stopping it (a process of its own)."""
    code = (
        "import os, ray\n"
        "from dlsched.sweep.execute import start_embedded_head\n"
        "ray.init(address=start_embedded_head(os.cpu_count()), logging_level='ERROR')\n"
        "ray.get([ray.remote(num_cpus=1)(lambda i: i).remote(i) for i in range(os.cpu_count())])\n"
    )
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=12000, help="jobs in each run's trace")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--ceiling", action="store_true", help="also two halves at once, no Ray")
    args = parser.parse_args()
    runs = {"trace": "synthetic", "cluster": "8x8:V100", "trace_params": {"num_jobs": args.jobs}}
    policies = ["fifo", "sjf", "srtf", "tiresias"]
    data = {"name": "sweep speed", "runs": runs, "axes": {"policy": policies}}
    data["seeds"] = list(range(args.seeds))
    print(f"{4 * args.seeds} runs of {args.jobs:,} jobs on {os.cpu_count()} cores")
    header = "round  one after another  on Ray (started and stopped)  speed-up"
    print(header + ("  two halves at once  speed-up" if args.ceiling else ""))
    speedups, ceilings = [], []
    for n in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="dlsched-sweep-bench-") as tmp:
            root = Path(tmp)
            specs = {}
            seeds = data["seeds"]
            for name, some in (("all", seeds), ("a", seeds[::2]), ("b", seeds[1::2])):
                specs[name] = root / f"{name}.yaml"  # (JSON is YAML)
                specs[name].write_text(json.dumps({**data, "seeds": some}))
            sides = {
                "sequential": [(specs["all"], root / "sequential", "--sequential")],
                "ray": [(specs["all"], root / "ray")],
            }
            if args.ceiling:
                sides["halves"] = [(specs[h], root / h, "--sequential") for h in ("a", "b")]
            order = list(sides) if n % 2 == 0 else list(reversed(sides))
            times = {side: timed(*sides[side]) for side in order}
        speedups.append(times["sequential"] / times["ray"])
        line = (
            f"{n + 1:5}  {times['sequential']:15.1f} s  {times['ray']:26.1f} s"
            f"  {speedups[-1]:7.2f}x"
        )
        if args.ceiling:
            ceilings.append(times["sequential"] / times["halves"])
            line += f"  {times['halves']:16.1f} s  {ceilings[-1]:7.2f}x"
        print(line)
    for name, ratios in (("speed-up", speedups), ("two halves at once, no Ray", ceilings)):
        if ratios:
            mean, low, high = geometric_mean_ci(ratios)
            interval = "" if math.isnan(low) else f" (95%: {low:.2f}-{high:.2f})"
            print(f"{name}: {mean:.2f}x{interval}, geometric mean of {len(ratios)} rounds")
    print(f"Ray alone: {ray_start_and_stop():.1f} s (import, start, one task per core, stop)")


if __name__ == "__main__":
    main()
