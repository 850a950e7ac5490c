"""How simulation time grows with the number of jobs and the size of the cluster: seconds for
synthetic workloads of 10k/20k/40k/80k jobs on 64x8, 256x8 and 2048x8 GPUs, the offered load
held constant (the generator's rate follows the cluster), under each policy, with the ratios
that tell whether a hot path scales (doubling the jobs should cost about 2x; a 32x larger
cluster with the same jobs should cost little more). Each cell runs in a process of its own,
which also reports its whole time (the workload generated, then simulated) and its peak memory.

    .venv/bin/python benchmarks/scaling.py                      # the full grid (several minutes)
    .venv/bin/python benchmarks/scaling.py --jobs 10000,20000 --clusters 64x8,256x8
    # a million jobs at a realized offered load of 0.9 (issue 26, goal 3)
    .venv/bin/python benchmarks/scaling.py --jobs 500000,1000000 --clusters 64x8,2048x8 \
        --policies fifo,tiresias,sjf-bsbf --realized
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from dlsched.policies.catalog import make_policy
from dlsched.prepare import prepare
from dlsched.sim import SimConfig, simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="10000,20000,40000,80000")
    parser.add_argument("--clusters", default="64x8,256x8,2048x8")
    parser.add_argument("--policies", default="tiresias,sjf-bsbf")
    parser.add_argument(
        "--load", type=float, default=0.9, help="offered load (default %(default)s)"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per cell; the best is shown (this VM's timings vary by 20-50%% between runs)",
    )
    parser.add_argument(
        "--realized",
        action="store_true",
        help="--load is the realized offered load (the generator's realized_load), not nominal",
    )
    parser.add_argument("--cell", help=argparse.SUPPRESS)  # one cell, in a process of its own
    args = parser.parse_args()
    if args.cell:
        print(json.dumps(_cell(*json.loads(args.cell))))
        return
    sizes = [int(n) for n in args.jobs.split(",")]
    clusters = args.clusters.split(",")
    print(
        f"synthetic workloads (Philly's size and duration mix), offered load {args.load} "
        f"({'realized' if args.realized else 'nominal'}), performance model on"
    )
    print(
        f"{'policy':<10} {'cluster':<8} "
        + " ".join(f"{n:>9,}" for n in sizes)
        + "   x per doubling"
    )
    seconds: dict[tuple[str, str, int], float] = {}
    for policy in args.policies.split(","):
        for cluster in clusters:
            row, whole = [], []
            for n in sizes:
                cell = _run_cell(policy, cluster, n, args.load, args.realized, args.repeat)
                seconds[policy, cluster, n] = cell["simulate_s"]
                row.append(cell["simulate_s"])
                whole.append(f"{cell['whole_s']:.0f} s, {cell['peak_mib']:,} MiB")
            growth = [b / a for a, b in zip(row, row[1:])]
            print(
                f"{policy:<10} {cluster:<8} "
                + " ".join(f"{w:>8.1f}s" for w in row)
                + "   "
                + ", ".join(f"{g:.2f}" for g in growth)
                + f"   (whole: {'; '.join(whole)})",
                flush=True,
            )
        first = clusters[0]
        for cluster in clusters[1:]:
            ratios = [seconds[policy, cluster, n] / seconds[policy, first, n] for n in sizes]
            print(f"{policy:<10} {cluster} / {first}: " + ", ".join(f"{r:.2f}x" for r in ratios))


def _run_cell(policy: str, cluster: str, n: int, load: float, realized: bool, repeat: int) -> dict:
    """One cell in a fresh process: its peak memory is the cell's own."""
    cell = json.dumps([policy, cluster, n, load, realized, repeat])
    out = subprocess.run(
        [sys.executable, __file__, "--cell", cell], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.splitlines()[-1])


def _cell(policy: str, cluster: str, n: int, load: float, realized: bool, repeat: int) -> dict:
    t0 = time.perf_counter()
    params = {"num_jobs": n, "realized_load" if realized else "load": load}
    workload = prepare("synthetic", cluster, trace_params=params)
    simulate_s = float("inf")
    for _ in range(repeat):
        t1 = time.perf_counter()
        simulate(
            workload.cluster,
            workload.jobs,
            make_policy(policy),
            SimConfig(timeseries=False),
            workload=workload.model(),
        )
        simulate_s = min(simulate_s, time.perf_counter() - t1)
    return {
        "simulate_s": simulate_s,
        "whole_s": time.perf_counter() - t0,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }


if __name__ == "__main__":
    main()
