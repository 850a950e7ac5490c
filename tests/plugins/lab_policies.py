"""Plug-in policies for tests/test_plugins.py and tests/test_service.py, importable as
``lab_policies:...``."""

from __future__ import annotations

from collections.abc import Iterable

from dlsched.jobs import JobView
from dlsched.policies.base import Plan, Policy, PolicyView
from dlsched.policies.queued import QueuedPolicy
from dlsched.state.free import FreeGpus


def fewest_gpus_first(job: JobView) -> tuple:
    return (job.num_gpus, job.spec.submit_time_s)


class SmallestFirst(QueuedPolicy):
    """The job asking for the fewest GPUs first, then the earliest; later jobs backfill."""

    description = "fewest GPUs first, with backfill"

    def __init__(self, placement: str = "best-fit", scan: str = "backfill") -> None:
        super().__init__(fewest_gpus_first, placement, scan)


class StartsOnAMissingGpu(Policy):
    """Returns a plan the state must refuse: the first pending job on GPU 999."""

    def schedule(self, view: PolicyView) -> Plan:
        plan = Plan()
        for job in view.pending.values():
            plan.start.append((job, (999,)))
            break
        return plan


class FailsToStart(Policy):
    def __init__(self, placement: str = "best-fit", scan: str = "strict") -> None:
        raise RuntimeError("no licence for this policy")


NOT_A_POLICY = object


class InvalidOnce(Policy):
    """Reads the queue from the view and keeps nothing of its own; its second pass (the first
    with two jobs waiting while one runs) preempts the running job, starts the oldest waiting
    job on its GPUs and the next one on GPU 999, which the books must refuse as a whole."""

    def __init__(self, placement: str = "best-fit", scan: str = "strict") -> None:
        super().__init__(placement, scan)
        self.misbehaved = False

    def schedule(self, view: PolicyView) -> Plan:
        waiting = list(view.pending.values())
        if len(waiting) >= 2 and view.running and not self.misbehaved:
            self.misbehaved = True
            victim = next(iter(view.running.values()))
            first, second = waiting[0], waiting[1]
            return Plan(
                preempt=[victim],
                start=[(first, victim.gpus[: first.num_gpus]), (second, (999,))],
            )
        plan = Plan()
        _start_in_order(self, waiting, view.free.copy(), plan)
        return plan


class Malformed(Policy):
    """Returns what a plug-in's bug may return instead of a plan (``shape``): a tracebacks each
    before they were refused as a policy error."""

    def __init__(self, shape: str = "none") -> None:
        super().__init__()
        self.shape = shape

    def schedule(self, view: PolicyView):  # type: ignore[override]
        job = next(iter(view.pending.values()), None)
        if job is None:
            return Plan()
        malformed = {
            "none": None,  # a schedule that forgot its return
            "number": 42,
            "triple": Plan(start=[(job, (0,), 1)]),  # type: ignore[list-item]
            "not-a-job": Plan(start=[("j", (0,))]),  # type: ignore[list-item]
            "gpus-not-a-list": Plan(start=[(job, 0)]),  # type: ignore[list-item]
            "preempt-a-name": Plan(preempt=["j"]),  # type: ignore[list-item]
            "wakeup-a-word": Plan(wakeup_at="soon"),  # type: ignore[arg-type]
        }
        return malformed[self.shape]


class RaisesEveryPass(Policy):
    """A bug at every pass: the server keeps serving and logs it, bounded."""

    def schedule(self, view: PolicyView) -> Plan:
        raise ZeroDivisionError("a plug-in's bug")


class MovesAJobOnce(Policy):
    """Starts waiting jobs in arrival order where they fit; once, moves the first running
    elastic job to as many free GPUs of the nodes it does not use (a move: in the background,
    its old workers hold their GPUs until its switch)."""

    resizes_elastic = True

    def __init__(self, placement: str = "best-fit", scan: str = "strict") -> None:
        super().__init__(placement, scan)
        self.moved = False

    def schedule(self, view: PolicyView) -> Plan:
        plan = Plan()
        free = view.free.copy()
        for job in view.running.values():
            if self.moved or job.spec.gpu_range[0] == job.spec.gpu_range[1]:
                continue
            nodes = {view.cluster.gpu_node[g] for g in job.gpus}
            elsewhere = [g for n in sorted(free.usable) if n not in nodes for g in free.free[n]]
            if len(elsewhere) >= len(job.gpus):
                gpus = tuple(elsewhere[: len(job.gpus)])
                free.take(gpus)
                plan.resize.append((job, gpus))
                self.moved = True
        _start_in_order(self, view.pending.values(), free, plan)
        return plan


def _start_in_order(policy: Policy, jobs: Iterable[JobView], free: FreeGpus, plan: Plan) -> None:
    """Start ``jobs`` in their order on ``free`` (taken as they start) until one does not fit."""
    for job in jobs:
        gpus = policy.place(free, job.num_gpus, job.spec.gpu_types)
        if gpus is None:
            break
        free.take(gpus)
        plan.start.append((job, gpus))
