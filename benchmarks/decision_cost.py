"""How much of a replay is a policy deciding, and how much is carrying out its decisions? An
ablation for issue 25, item 13 (SRTF's cost against Tiresias').

Replays a trace under each policy once, recording every pass's plan (the jobs it starts and on
which GPUs, preempts and resizes, and when it asked to be called again). Then, in rounds, times
the policy's replay and the replay of its recorded plans alone: a policy that hands back the
next recorded plan (no queue, no index, no ranking), so the engine and the cluster state do the
same work (the same passes at the same times, the same starts, preemptions and finishes: the
jobs' finish times are checked equal) while the policy does almost none. The difference is the
policy's own cost, its indexes included (the state keeps an index only for a policy that asks
for one). Prints per policy both times and the difference, means with 95% intervals over the
rounds (the same replay's time moves by 20-45% within an hour on this machine).

    .venv/bin/python benchmarks/decision_cost.py [--policies srtf,tiresias] [--rounds 3]
"""

from __future__ import annotations

import argparse
import time

from dlsched.policies.base import Plan, Policy, PolicyView
from dlsched.policies.catalog import make_policy
from dlsched.prepare import prepare
from dlsched.sim import SimConfig, simulate
from dlsched.stats import format_ci

# a pass's plan by job id: starts (id, GPUs), preemptions, resizes (id, GPUs), sub-batches,
# the time it asked to be called again
Recorded = tuple[list, list, list, dict, float | None]


def record(policy: Policy) -> list[Recorded]:
    """Make ``policy`` keep every plan it returns (in the list returned)."""
    plans: list[Recorded] = []
    decide = policy.schedule

    def schedule(view: PolicyView) -> Plan:
        plan = decide(view)
        plans.append(
            (
                [(j.job_id, tuple(g)) for j, g in plan.start],
                [j.job_id for j in plan.preempt],
                [(j.job_id, tuple(g)) for j, g in plan.resize],
                dict(plan.accumulation),
                plan.wakeup_at,
            )
        )
        return plan

    policy.schedule = schedule  # type: ignore[method-assign]
    return plans


class Replayed(Policy):
    """Hands back the recorded plans in order, the view's own jobs in them."""

    name = "replayed"

    def __init__(self, plans: list[Recorded], like: Policy) -> None:
        super().__init__()
        self._plans = iter(plans)
        # what the state asks of a policy beside its plans (sharing, molding, loans)
        self.shares_gpus, self.moldable = like.shares_gpus, like.moldable
        self.loans_servers = like.loans_servers

    def schedule(self, view: PolicyView) -> Plan:
        starts, preempts, resizes, accumulation, wakeup = next(self._plans)
        pending, running = view.pending, view.running
        return Plan(
            [(pending[j], g) for j, g in starts],
            [running[j] for j in preempts],
            [(running[j], g) for j, g in resizes],
            wakeup,
            accumulation,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="philly")
    parser.add_argument("--cluster", default="64x8:V100")
    parser.add_argument("--policies", default="srtf,tiresias")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=int, help="the trace's first N jobs")
    args = parser.parse_args()
    workload = prepare(args.trace, args.cluster, limit=args.limit)
    names = args.policies.split(",")

    def run(policy: Policy):
        return simulate(
            workload.cluster, workload.jobs, policy, SimConfig(), workload=workload.model()
        )

    recorded, finishes, counts = {}, {}, {}
    for name in names:
        policy = make_policy(name)
        recorded[name] = record(policy)
        result = run(policy)
        finishes[name] = [j.finish for j in result.jobs]
        counts[name] = (
            result.schedule_calls,
            sum(j.preemptions for j in result.jobs),
            sum(1 for p in recorded[name] for _ in p[0]),
        )
    times: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in names}
    for _ in range(args.rounds):
        for name in names:  # interleaved: a drift in the machine's speed touches all alike
            t0 = time.perf_counter()
            run(make_policy(name))
            times[name][0].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            result = run(Replayed(recorded[name], make_policy(name)))
            times[name][1].append(time.perf_counter() - t0)
            if [j.finish for j in result.jobs] != finishes[name]:
                raise SystemExit(f"{name}: the replay of its plans did not finish as it did")
    print(f"{args.trace} on {workload.cluster.describe()}, {len(workload.jobs):,} jobs, ", end="")
    print(f"{args.rounds} rounds (seconds: mean ± 95% interval)")
    print(
        f"{'policy':<12} {'passes':>8} {'starts':>8} {'preempt.':>8} {'replay s':>14} "
        f"{'its plans s':>14} {'deciding s':>14}"
    )
    for name in names:
        full, plans = times[name]
        passes, preemptions, starts = counts[name]
        print(
            f"{name:<12} {passes:8,} {starts:8,} {preemptions:8,} {format_ci(full, 2):>14} "
            f"{format_ci(plans, 2):>14} {format_ci([f - p for f, p in zip(full, plans)], 2):>14}"
        )


if __name__ == "__main__":
    main()
