"""Whole-process replays of full Philly against the bare replay floor (issue 26, goal 1).

    .venv/bin/python benchmarks/whole_process.py [--policies fifo,tiresias] [--repeat 1]
    .venv/bin/python benchmarks/whole_process.py --pair srtf,tiresias --rounds 10

The floor is a bare strict-FIFO replay of the same trace written here with the standard library
only (read the gzipped CSV, a heap of finish times, a free-GPU count, the mean JCT), run in a
fresh interpreter. Each policy is ``dlsched simulate --trace philly --cluster 64x8:V100 --policy
P --out DIR --no-progress`` (with its usual options, below) as a new process, measured the same
way, once with an empty workload cache and once reading it. Prints each time and its ratio to
the floor, all measured in one run (compare ratios across machines, not seconds), and each run's
peak memory in MiB (its process's maximum resident set; goal 4: at most 150 MB).

``--pair A,B`` compares two runs instead (issue 25, 13: SRTF's cost against Tiresias'): both
read the same cached workload, in ``--rounds`` rounds that alternate which goes first (a run's
time here moves by 20% and more between minutes, so one pair says little); prints each round's
times and A/B, then the geometric mean of A/B with its 95% interval.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dlsched.stats import geometric_mean_ci

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


def simulate_argv(name: str, tmp: str, cache: Path) -> list[str]:
    """``dlsched simulate`` of the run ``name`` (of RUNS), its workload cached in ``cache``."""
    argv = [str(DLSCHED), "simulate", "--trace", "philly", *RUNS[name]]
    argv += [] if "--cluster" in RUNS[name] else CLUSTER
    return argv + ["--out", str(Path(tmp) / "out"), "--no-progress", "--cache-dir", str(cache)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default=",".join(RUNS), help="of: " + ", ".join(RUNS))
    parser.add_argument("--repeat", type=int, default=1, help="runs of each; the best is shown")
    parser.add_argument("--pair", help="A,B: A's time over B's instead, both cached (see above)")
    parser.add_argument("--rounds", type=int, default=10, help="with --pair (default 10)")
    args = parser.parse_args()
    names = args.pair.split(",") if args.pair else args.policies.split(",")
    if unknown := [n for n in names if n not in RUNS]:
        parser.error(f"unknown: {', '.join(unknown)}")
    if args.pair:
        if len(names) != 2 or args.rounds < 2:
            parser.error("--pair takes two runs, and --rounds at least 2")
        compare_pair(*names, args.rounds)
        return
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
                argv = simulate_argv(name, tmp, Path(tmp) / f"cache-{name}-{k}")
                cold = min(cold, timed(argv))  # prepares and keeps the workload
                cached = min(cached, timed(argv))  # reads it
            print(
                f"{name:32} {cold[0]:8.2f} {cold[0] / floor:8.1f} {cached[0]:9.2f} "
                f"{cached[0] / floor:8.1f} {cold[1]:8.0f} {cached[1]:10.0f}"
            )


def compare_pair(a: str, b: str, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        argv = {name: simulate_argv(name, tmp, cache) for name in (a, b)}
        for name in (a, b):  # each run's workload prepared and kept, untimed
            timed(argv[name])
        print(f"{'round':>5} {'first':>16} {a + ' s':>14} {b + ' s':>14} {'ratio':>7}")
        ratios = []
        for k in range(rounds):
            order = (a, b) if k % 2 == 0 else (b, a)
            seconds = {name: timed(argv[name])[0] for name in order}
            ratios.append(seconds[a] / seconds[b])
            print(
                f"{k + 1:5} {order[0]:>16} {seconds[a]:14.2f} {seconds[b]:14.2f} {ratios[-1]:7.3f}"
            )
    mean, low, high = geometric_mean_ci(ratios)
    print(f"{a}/{b}: {mean:.3f}x (95% {low:.3f}-{high:.3f}), geometric mean of {rounds} rounds")


if __name__ == "__main__":
    main()
