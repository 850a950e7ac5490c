"""How simulation time grows with the number of jobs and the size of the cluster: seconds for
synthetic workloads of 10k/20k/40k/80k jobs on 64x8, 256x8 and 2048x8 GPUs, the offered load
held constant (the generator's rate follows the cluster), under each policy, with the ratios
that tell whether a hot path scales (doubling the jobs should cost about 2x; a 32x larger
cluster with the same jobs should cost little more).

    .venv/bin/python benchmarks/scaling.py                      # the full grid (several minutes)
    .venv/bin/python benchmarks/scaling.py --jobs 10000,20000 --clusters 64x8,256x8
"""

from __future__ import annotations

import argparse
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
    args = parser.parse_args()
    sizes = [int(n) for n in args.jobs.split(",")]
    clusters = args.clusters.split(",")
    print(
        f"synthetic workloads (Philly's size and duration mix), offered load {args.load}, "
        f"performance model on"
    )
    print(
        f"{'policy':<10} {'cluster':<8} "
        + " ".join(f"{n:>9,}" for n in sizes)
        + "   x per doubling"
    )
    seconds: dict[tuple[str, str, int], float] = {}
    for policy in args.policies.split(","):
        for cluster in clusters:
            row = []
            for n in sizes:
                workload = prepare(
                    "synthetic", cluster, trace_params={"num_jobs": n, "load": args.load}
                )
                wall = float("inf")
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    simulate(
                        workload.cluster,
                        workload.jobs,
                        make_policy(policy),
                        SimConfig(timeseries=False),
                        workload=workload.model(),
                    )
                    wall = min(wall, time.perf_counter() - t0)
                seconds[policy, cluster, n] = wall
                row.append(wall)
            growth = [b / a for a, b in zip(row, row[1:])]
            print(
                f"{policy:<10} {cluster:<8} "
                + " ".join(f"{w:>8.1f}s" for w in row)
                + "   "
                + ", ".join(f"{g:.2f}" for g in growth),
                flush=True,
            )
        first = clusters[0]
        for cluster in clusters[1:]:
            ratios = [seconds[policy, cluster, n] / seconds[policy, first, n] for n in sizes]
            print(f"{policy:<10} {cluster} / {first}: " + ", ".join(f"{r:.2f}x" for r in ratios))


if __name__ == "__main__":
    main()
