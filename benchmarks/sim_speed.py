"""Simulator speed: replay the full Philly trace (82,247 jobs) on 512 GPUs (64 nodes x 8) with
each baseline policy and print wall seconds, jobs per second and events per second.

    make bench                      # or: .venv/bin/python benchmarks/sim_speed.py [--policies a,b]
    .venv/bin/python benchmarks/sim_speed.py --policies elastic-tiresias --elastic-fraction 0.5

Loading the trace (and giving each job a model) is timed apart: it is the same for every
policy. Job speeds come from the performance model, as in ``dlsched simulate``; ``--no-perf``
runs every job at its trace speed.
"""

from __future__ import annotations

import argparse
import time

from dlsched.cluster import parse_cluster_spec
from dlsched.elastic import make_elastic
from dlsched.perf.assign import assign_models
from dlsched.perf.model import PerfModel
from dlsched.perf.speed import PerfSpeed
from dlsched.policies.base import make_policy
from dlsched.sim import SimConfig, simulate
from dlsched.workload import TRACE_MODEL
from dlsched.traces import load_trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="philly")
    parser.add_argument("--cluster", default="64x8:V100")
    parser.add_argument("--policies", default="fifo,sjf,srtf,tiresias,sjf-ffs,sjf-bsbf")
    parser.add_argument("--repeat", type=int, default=1, help="runs per policy; the best is shown")
    parser.add_argument("--no-perf", action="store_true", help="trace speeds, no performance model")
    parser.add_argument("--elastic-fraction", type=float, default=0.0,
                        help="share of jobs made elastic by the seeded rule (default 0)")
    parser.add_argument("--resize-mechanism", default="background", choices=["background", "stop-resume"])
    args = parser.parse_args()

    t0 = time.perf_counter()
    trace = load_trace(args.trace)
    cluster = parse_cluster_spec(args.cluster)
    jobs = trace.jobs
    if not args.no_perf:
        jobs = assign_models(jobs, PerfModel(), cluster)
    if args.elastic_fraction:
        jobs = make_elastic(jobs, args.elastic_fraction, cluster.num_gpus)
    load_s = time.perf_counter() - t0
    print(f"trace {args.trace}: {len(jobs):,} jobs loaded in {load_s:.2f} s; "
          f"cluster {cluster.describe()} ({cluster.num_gpus} GPUs); "
          f"{'trace speeds' if args.no_perf else 'performance model'}; elastic fraction {args.elastic_fraction}")
    print(f"{'policy':<16} {'wall s':>8} {'jobs/s':>10} {'events/s':>10} {'passes':>9} {'resizes':>8} {'mean JCT h':>11}")
    for name in args.policies.split(","):
        best = None
        for _ in range(args.repeat):
            policy = make_policy(name)
            t0 = time.perf_counter()
            speed = TRACE_MODEL if args.no_perf else PerfSpeed(PerfModel(), cluster)
            result = simulate(cluster, jobs, policy, SimConfig(resize_mechanism=args.resize_mechanism), workload=speed)
            wall = time.perf_counter() - t0
            if best is None or wall < best[0]:
                best = (wall, result)
        wall, result = best
        done = [j for j in result.jobs if j.finish is not None]
        mean_jct_h = sum(j.finish - j.spec.submit_time_s for j in done) / len(done) / 3600
        resizes = sum(j.resizes for j in result.jobs)
        print(f"{name:<16} {wall:8.2f} {len(result.jobs) / wall:10,.0f} {result.events / wall:10,.0f} "
              f"{result.schedule_calls:9,} {resizes:8,} {mean_jct_h:11.2f}")


if __name__ == "__main__":
    main()
