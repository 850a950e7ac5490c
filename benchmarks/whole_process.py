"""Whole-process replays of full Philly against the bare replay floor (issue 26, goal 1).

    .venv/bin/python benchmarks/whole_process.py [--policies fifo,tiresias] [--repeat 1]

The floor is a bare strict-FIFO replay of the same trace written here with the standard library
only (read the gzipped CSV, a heap of finish times, a free-GPU count, the mean JCT), run in a
fresh interpreter. Each policy is ``dlsched simulate --trace philly --cluster 64x8:V100 --policy
P --out DIR --no-progress`` (with its usual options, below) as a new process, measured the same
way, once with an empty workload cache and once reading it. Prints each time and its ratio to
the floor, all measured in one run (compare ratios across machines, not seconds), and each run's
peak memory in MiB (its process's maximum resident set; goal 4: at most 150 MB).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "src/dlsched/data/traces/philly/philly_jobs.csv.gz"
DLSCHED = Path(sys.executable).parent / "dlsched"

CLUSTER = ["--cluster", "64x8:V100"]
# the policy and the options it is usually run with (issue 26's table; the cluster above unless
# the run names its own)
RUNS = {
    "fifo": ["--policy", "fifo"],
    "sjf-bsbf": ["--policy", "sjf-bsbf"],
    "edf": ["--policy", "edf", "--deadlines"],
    "tiresias": ["--policy", "tiresias"],
    "elastic-tiresias": ["--policy", "elastic-tiresias", "--elastic-fraction", "0.5"],
    "genie": ["--policy", "genie", "--deadlines"],
    "tiresias --quotas philly-vc": ["--policy", "tiresias", "--quotas", "philly-vc"],
    "aryl": [
        "--policy",
        "aryl",
        "--cluster",
        "64x8:V100,16x8:V100@inference",
        "--elastic-fraction",
        "0.5",
    ],
    "srtf": ["--policy", "srtf"],
}

FLOOR = r"""
import csv, gzip, heapq, sys
from datetime import datetime
rows = []
with gzip.open(sys.argv[1], "rt", newline="") as f:
    for r in csv.DictReader(f):
        rows.append((datetime.fromisoformat(r["timestamp"]).timestamp(), float(r["duration"]),
                     int(r["num_gpus"])))
rows.sort()
free, now, running, jct = 512, 0.0, [], 0.0
for submit, duration, gpus in rows:  # strict FIFO: a job starts when every earlier one has
    now = max(now, submit)
    while free < gpus:
        end, g = heapq.heappop(running)
        now, free = max(now, end), free + g
    while running and running[0][0] <= now:
        free += heapq.heappop(running)[1]
    heapq.heappush(running, (now + duration, gpus))
    free -= gpus
    jct += now + duration - submit
print(f"floor: {len(rows)} jobs, mean JCT {jct / len(rows) / 3600:.2f} h")
"""


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak resident MiB of a process running ``argv``."""
    t0 = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - t0
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, argv)
    return seconds, usage.ru_maxrss / 1024  # KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default=",".join(RUNS), help="of: " + ", ".join(RUNS))
    parser.add_argument("--repeat", type=int, default=1, help="runs of each; the best is shown")
    args = parser.parse_args()
    names = args.policies.split(",")
    if unknown := [n for n in names if n not in RUNS]:
        parser.error(f"unknown: {', '.join(unknown)}")
    floor, floor_mb = min(
        timed([sys.executable, "-c", FLOOR, str(TRACE)]) for _ in range(args.repeat)
    )
    print(
        f"{'run':32} {'cold s':>8} {'x floor':>8} {'cached s':>9} {'x floor':>8} "
        f"{'cold MiB':>8} {'cached MiB':>10}"
    )
    print(
        f"{'floor (bare strict FIFO)':32} {floor:8.2f} {1.0:8.1f} {'':>9} {'':>8} {floor_mb:8.0f}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            cold = cached = (float("inf"), 0.0)
            for k in range(args.repeat):
                cache = Path(tmp) / f"cache-{name}-{k}"
                argv = [str(DLSCHED), "simulate", "--trace", "philly", *RUNS[name]]
                argv += [] if "--cluster" in RUNS[name] else CLUSTER
                argv += ["--out", str(Path(tmp) / "out"), "--no-progress"]
                argv += ["--cache-dir", str(cache)]
                cold = min(cold, timed(argv))  # prepares and keeps the workload
                cached = min(cached, timed(argv))  # reads it
            print(
                f"{name:32} {cold[0]:8.2f} {cold[0] / floor:8.1f} {cached[0]:9.2f} "
                f"{cached[0] / floor:8.1f} {cold[1]:8.0f} {cached[1]:10.0f}"
            )


if __name__ == "__main__":
    main()
