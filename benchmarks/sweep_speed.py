"""A sweep on Ray against the same runs one after another: 40 short runs (4 policies x 10 seeds
of a synthetic trace), each side from nothing (its own output folder and workload cache), the
Ray side including starting and stopping its embedded cluster. Prints both wall times and the
speed-up (issue 27 asks for at least 1.7x on a 2-core machine), and what Ray's start and stop
cost alone (the part a sweep of short runs cannot win back):

    .venv/bin/python benchmarks/sweep_speed.py [--jobs 12000] [--seeds 10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed_sweep(spec: Path, out: Path, *extra: str) -> float:
    env = {**os.environ, "DLSCHED_CACHE_DIR": str(out / "cache")}
    cmd = [sys.executable, "-c", "import sys; from dlsched.cli import main; sys.exit(main())"]
    cmd += ["sweep", str(spec), "--out", str(out), "--no-progress", *extra]
    started = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def ray_start_and_stop() -> float:
    """What an empty sweep on Ray costs: importing Ray, starting an embedded cluster on every
    core, one task per core, stopping it (a process of its own, as the sweep's)."""
    code = (
        "import os, ray\n"
        "ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level='ERROR')\n"
        "ray.get([ray.remote(num_cpus=1)(lambda i: i).remote(i) for i in range(os.cpu_count())])\n"
        "ray.shutdown()\n"
    )
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=12000, help="jobs in each run's trace")
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dlsched-sweep-bench-") as tmp:
        root = Path(tmp)
        spec = root / "spec.yaml"  # (JSON is YAML)
        runs = {"trace": "synthetic", "cluster": "8x8:V100"}
        runs["trace_params"] = {"num_jobs": args.jobs}
        policies = ["fifo", "sjf", "srtf", "tiresias"]
        data = {"name": "sweep speed", "runs": runs, "axes": {"policy": policies}}
        spec.write_text(json.dumps({**data, "seeds": list(range(args.seeds))}))
        runs = 4 * args.seeds
        sequential = timed_sweep(spec, root / "sequential", "--sequential")
        on_ray = timed_sweep(spec, root / "ray")
    fixed = ray_start_and_stop()
    print(f"{runs} runs of {args.jobs:,} jobs on {os.cpu_count()} cores")
    print(f"one after another: {sequential:7.1f} s")
    print(f"on Ray:            {on_ray:7.1f} s (embedded cluster started and stopped)")
    print(f"speed-up:          {sequential / on_ray:7.2f}x")
    print(f"Ray alone:         {fixed:7.1f} s (import, start, one task per core, stop)")


if __name__ == "__main__":
    main()
