"""Plug-in policies for tests/test_plugins.py, importable as ``smallest_first:...``."""

from __future__ import annotations

from dlsched.jobs import JobState
from dlsched.policies.base import Plan, Policy, PolicyView
from dlsched.policies.queued import QueuedPolicy


def fewest_gpus_first(job: JobState) -> tuple:
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
