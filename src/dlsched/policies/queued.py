"""Non-preemptive queue policies: jobs start in the order of a key and run to completion; an
optional sharing part lets a job that finds no idle GPUs join running jobs' GPUs.

Strict by default (the first job in order that cannot start blocks the rest, as plain FIFO
does, and as the Tiresias simulator's ``fifo``); with ``scan="backfill"`` (or "greedy", the same
without preemption; the Tiresias simulator's ``fjf``) later jobs may take GPUs the blocked ones
cannot use.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from typing import Protocol

from ..jobs import JobView
from ..state.free import FreeGpus
from ..view import IdleGpus
from .base import Plan, Policy, PolicyView

_NO_PLAN = Plan()


def submit_order(job: JobView) -> tuple:
    return (job.spec.submit_time_s,)


def shortest_first(job: JobView) -> tuple:
    """By (oracle) duration, then submit time."""
    return (job.spec.duration_s, job.spec.submit_time_s)


def size_kind(job: JobView) -> tuple:
    """What a pass needs to know of a job to tell whether it can start on idle GPUs."""
    return (job.num_gpus, job.spec.gpu_types)


class SharingPass(Protocol):
    def find(self, job: JobView, free: IdleGpus) -> tuple[tuple[int, ...] | None, int]:
        """GPUs for ``job`` beside running jobs (and idle ones), and its sub-batch count."""


class SharingPart(Protocol):
    """What a queue policy asks of a part that shares GPUs
    (:class:`~dlsched.policies.sharing.GpuSharing`)."""

    def kind(self, job: JobView) -> tuple: ...
    def params(self) -> dict: ...
    def begin(self, view: PolicyView) -> SharingPass: ...


class QueuedPolicy(Policy):
    def __init__(
        self,
        key: Callable[[JobView], tuple],
        placement: str = "best-fit",
        scan: str = "strict",
        sharing: SharingPart | None = None,
    ) -> None:
        super().__init__(placement, scan)
        self.key = key
        self.sharing = sharing
        self.shares_gpus = sharing is not None  # may put two jobs on one GPU (needs their memory)
        self.kind = size_kind if sharing is None else sharing.kind

    def params(self) -> dict:
        params = super().params()
        return params if self.sharing is None else {**params, **self.sharing.params()}

    def schedule(self, view: PolicyView) -> Plan:
        backfill = self.backfill
        # a strict scan stops at the first job that cannot start: it needs no buckets
        queue = view.queue(self.key, self.kind if backfill else None)
        if not queue:
            return _NO_PLAN
        sharing = None
        smallest = 0
        if self.sharing is not None:
            sharing = self.sharing.begin(view)
        else:
            smallest = min(queue.sizes)
            if view.free.total < smallest:
                return _NO_PLAN
        free: IdleGpus = view.free  # copied only once something starts
        scratch: FreeGpus | None = None
        starts: list[tuple[JobView, tuple[int, ...]]] = []
        accumulation: dict[str, int] = {}
        # A kind of job that could not start cannot start later in the pass: idle GPUs only
        # shrink (and placement fails monotonically), claimed partners only grow, and in SJF
        # order the sharing benefit test only gets harder. Once every kind in the queue has
        # failed, the pass is over.
        failed: set = set()
        scan = queue.scan(failed) if backfill else zip(queue, repeat(None))
        for job, kind in scan:
            need = job.num_gpus
            gpus = self.place(free, need, job.spec.gpu_types) if need <= free.total else None
            k = 1
            if gpus is None and sharing is not None:
                gpus, k = sharing.find(job, free)
            if gpus is None:
                if not backfill:
                    break
                failed.add(kind)
                continue
            idle = gpus if sharing is None else [g for g in gpus if free.is_free(g)]
            if idle:
                if scratch is None:
                    free = scratch = view.free.copy()
                scratch.take(idle)
            starts.append((job, gpus))
            if k > 1:
                accumulation[job.job_id] = k
            if sharing is None and free.total < smallest:
                break
        if not starts:
            return _NO_PLAN
        return Plan(starts, accumulation=accumulation)
