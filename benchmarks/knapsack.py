"""One Aryl scheduling pass that hands spare GPUs to elastic jobs (PAPERS.md s. 3).

2,000 elastic Philly jobs (sizes from the trace, models and speeds from the performance model,
each may double its request) run at their base size, and 1,000 GPUs are spare. Prints the time
of Aryl's whole pass, of its knapsack solve, and of three solvers on the same instance: the
exact dynamic program, the exact fast path for concave options (what ``knapsack.solve`` takes
when it applies) and HiGHS (``pip install highspy``; skipped when missing), with their values.

    .venv/bin/python benchmarks/knapsack.py [--jobs 2000] [--spare 1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import time

from dlsched.cluster import parse_cluster_spec
from dlsched.policies import knapsack
from dlsched.policies.catalog import make_policy
from dlsched.prepare import prepare
from dlsched.state.cluster_state import ClusterState
from dlsched.view import Plan


def highs_solve(groups, capacity):
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    index = []
    for g, options in enumerate(groups):
        for k, (w, v) in enumerate(options):
            h.addVar(0, 1)
            h.changeColIntegrality(len(index), highspy.HighsVarType.kInteger)
            h.changeColCost(len(index), -v)
            index.append((g, k, w))
    weights = [w for _, _, w in index]
    h.addRow(0, capacity, len(index), list(range(len(index))), weights)
    start = 0
    for options in groups:
        h.addRow(0, 1, len(options), list(range(start, start + len(options))), [1.0] * len(options))
        start += len(options)
    h.run()
    x = h.getSolution().col_value
    chosen = [-1] * len(groups)
    for (g, k, _), value in zip(index, x):
        if value > 0.5:
            chosen[g] = k
    return chosen


def timed(fn, repeat):
    best, out = None, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        wall = time.perf_counter() - t0
        best = wall if best is None or wall < best else best
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--spare", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    probe = prepare(
        "philly", "1x8:V100", elastic_fraction=1.0, limit=args.jobs * 3, skip_invalid=True
    )
    specs = [s for s in probe.jobs if s.num_gpus <= 8][: args.jobs]
    base = sum(s.gpu_range[0] for s in specs)
    nodes = -(-(base + args.spare) // 8)
    cluster = parse_cluster_spec(f"{nodes}x8:V100")
    workload = prepare(
        "philly", cluster, elastic_fraction=1.0, limit=args.jobs * 3, skip_invalid=True
    )
    specs = [s for s in workload.jobs if s.num_gpus <= 8][: args.jobs]

    def fresh_state():
        state = ClusterState(cluster, make_policy("aryl"), workload=workload.model())
        policy = state.policy
        free = state.free
        plan = Plan()
        for spec in specs:  # every job at its base size, packed
            job = state.submit(spec)
            gpus = policy.place(free, spec.gpu_range[0], None)
            free.take(gpus)
            plan.start.append((job, gpus))
        free.release([g for _, gpus in plan.start for g in gpus])
        state.apply(plan)  # the policy reads its running jobs from the state
        return state

    solves = []
    original = knapsack.solve

    def spy(groups, capacity):
        t0 = time.perf_counter()
        out = original(groups, capacity)
        solves.append((time.perf_counter() - t0, groups, capacity))
        return out

    knapsack.solve = spy
    passes = []
    for _ in range(args.repeat):
        state = fresh_state()
        t0 = time.perf_counter()
        plan = state.policy.schedule(state)
        passes.append(time.perf_counter() - t0)
    knapsack.solve = original
    solve_s, groups, capacity = min(solves, key=lambda s: s[0])
    grown = sum(len(g) - len(j.gpus) for j, g in plan.resize)
    print(
        f"{len(specs):,} elastic jobs at base size, {capacity:,} spare GPUs, "
        f"{sum(len(o) for o in groups):,} options in {len(groups):,} groups"
    )
    print(
        f"aryl pass: {min(passes) * 1000:8.1f} ms  (knapsack solve {solve_s * 1000:.1f} ms; "
        f"{len(plan.resize):,} jobs grow by {grown:,} GPUs)"
    )
    concave = knapsack._concave_marginals(groups) is not None
    rows = [("dynamic program", lambda: knapsack.solve_dp(groups, capacity))]
    if concave:
        rows.append(("concave fast path", lambda: knapsack.solve(groups, capacity)))
    try:
        import highspy  # noqa: F401

        rows.append(("HiGHS (MILP)", lambda: highs_solve(groups, capacity)))
    except ImportError:
        print("HiGHS: not installed (pip install highspy)")
    print(f"options concave in every group: {concave}")
    for name, fn in rows:
        wall, chosen = timed(fn, args.repeat)
        print(
            f"{name:<18} {wall * 1000:9.1f} ms   value "
            f"{knapsack.total_value(groups, chosen):,.1f} s of JCT"
        )


if __name__ == "__main__":
    main()
