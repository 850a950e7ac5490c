"""Simulator speed: replay the full Philly trace (82,247 jobs) on 512 GPUs (64 nodes x 8) with
each baseline policy and print wall seconds, jobs per second and events per second.

    make bench                      # or: .venv/bin/python benchmarks/sim_speed.py [--policies a,b]
    .venv/bin/python benchmarks/sim_speed.py --policies elastic-tiresias --elastic-fraction 0.5

Loading the trace (and giving each job a model) is timed apart: it is the same for every
policy. The whole process (``dlsched simulate`` with its workload cache, outputs and peak
memory) against a bare replay floor, per policy in one run, is ``benchmarks/whole_process.py``.
Job speeds come from the performance model, as in ``dlsched simulate``; ``--no-perf`` runs every
job at its trace speed.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from dlsched.admission import QuotaAdmission
from dlsched.inference import demand_cycle, load_curve
from dlsched.policies.catalog import make_policy
from dlsched.prepare import prepare
from dlsched.sim import SimConfig, simulate
from dlsched.tenant_quotas import load_tenants


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="philly")
    parser.add_argument("--cluster", default="64x8:V100")
    parser.add_argument("--policies", default="fifo,sjf,srtf,tiresias,sjf-ffs,sjf-bsbf")
    parser.add_argument("--repeat", type=int, default=1, help="runs per policy; the best is shown")
    parser.add_argument(
        "--calls",
        action="store_true",
        help="also count the function calls of one more run per policy under cProfile (a "
        "measure of work that this machine's timing noise does not blur)",
    )
    parser.add_argument("--no-perf", action="store_true", help="trace speeds, no performance model")
    parser.add_argument(
        "--elastic-fraction",
        type=float,
        default=0.0,
        help="share of jobs made elastic by the seeded rule (default 0)",
    )
    parser.add_argument(
        "--resize-mechanism", default="background", choices=["background", "stop-resume"]
    )
    parser.add_argument(
        "--deadlines", action="store_true", help="generated deadlines (for edf and genie)"
    )
    parser.add_argument(
        "--quotas", help="the quota stage before each policy: equal, philly-vc or a YAML file"
    )
    parser.add_argument(
        "--inference-demand",
        default="genai",
        help="demand of the cluster's inference pool, if it has one (genai, philly-nodes, a CSV)",
    )
    args = parser.parse_args()

    t0 = time.perf_counter()
    workload = prepare(
        args.trace,
        args.cluster,
        perf=not args.no_perf,
        elastic_fraction=args.elastic_fraction,
        deadlines=args.deadlines,
    )
    cluster, jobs = workload.cluster, workload.jobs
    load_s = time.perf_counter() - t0
    print(
        f"trace {args.trace}: {len(jobs):,} jobs loaded in {load_s:.2f} s; "
        f"cluster {cluster.describe()} ({cluster.num_gpus} GPUs); "
        f"{'trace speeds' if args.no_perf else 'performance model'}; elastic fraction "
        f"{args.elastic_fraction}"
    )
    servers = sum(1 for n in cluster.nodes if n.pool == "inference")
    demand = demand_cycle(load_curve(args.inference_demand), servers) if servers else None
    print(
        f"{'policy':<16} {'wall s':>8} {'jobs/s':>10} {'events/s':>10} {'passes':>9} "
        f"{'resizes':>8} {'mean JCT h':>11}" + (f" {'calls':>12}" if args.calls else "")
    )

    def admission():
        if not args.quotas:
            return None
        tenants = [j.tenant for j in jobs]
        return QuotaAdmission(load_tenants(args.quotas, tenants, cluster.pool_gpus("training")))

    def run(name: str):
        config = SimConfig(resize_mechanism=args.resize_mechanism, inference_demand=demand)
        return simulate(
            cluster,
            jobs,
            make_policy(name),
            config,
            workload=workload.model(),
            admission=admission(),
        )

    for name in args.policies.split(","):
        best = None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            result = run(name)
            wall = time.perf_counter() - t0
            if best is None or wall < best[0]:
                best = (wall, result)
        wall, result = best
        calls = ""
        if args.calls:
            profile = cProfile.Profile()
            profile.runcall(run, name)
            calls = f" {pstats.Stats(profile).total_calls:>12,}"
        done = [j for j in result.jobs if j.finish is not None]
        mean_jct_h = sum(j.finish - j.spec.submit_time_s for j in done) / len(done) / 3600
        resizes = sum(j.resizes for j in result.jobs)
        print(
            f"{name:<16} {wall:8.2f} {len(result.jobs) / wall:10,.0f} "
            f"{result.events / wall:10,.0f} "
            f"{result.schedule_calls:9,} {resizes:8,} {mean_jct_h:11.2f}{calls}"
        )


if __name__ == "__main__":
    main()
