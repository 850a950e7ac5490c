"""Non-preemptive queue policies: jobs start in the order of a key and run to completion.

Strict by default (the first job in order that does not fit blocks the rest, as plain FIFO
does); with ``backfill=True`` later jobs may take GPUs the blocked ones cannot use.
"""

from __future__ import annotations

from bisect import insort

from ..jobs import JobState
from .base import PolicyView, Plan, Policy

_NO_PLAN = Plan()


class QueuedPolicy(Policy):
    def __init__(self, placement: str = "best-fit", backfill: bool = False) -> None:
        super().__init__(placement, backfill)
        self.queue: list[tuple] = []       # (key..., seq, kind, job) sorted, best first
        self.sizes: dict[int, int] = {}    # GPUs requested -> pending jobs of that size
        self.kinds: dict[tuple, int] = {}  # kind (see kind()) -> pending jobs of that kind

    def key(self, job: JobState) -> tuple:
        raise NotImplementedError

    def kind(self, job: JobState) -> tuple:
        """What a pass needs to know of a job to tell whether it can start (its size here)."""
        return (job.num_gpus,)

    def _enqueue(self, job: JobState) -> None:
        kind = self.kind(job)
        insort(self.queue, (*self.key(job), job.seq, kind, job))   # seq is unique: sorting stops there
        self.sizes[job.num_gpus] = self.sizes.get(job.num_gpus, 0) + 1
        self.kinds[kind] = self.kinds.get(kind, 0) + 1

    def job_arrived(self, job: JobState, now: float) -> None:
        self._enqueue(job)

    job_requeued = job_arrived

    def job_cancelled(self, job: JobState, now: float) -> None:
        self._dequeue([next(i for i, e in enumerate(self.queue) if e[-1] is job)])

    def schedule(self, view: PolicyView) -> Plan:
        free_total = view.free.total
        if not self.queue or free_total < min(self.sizes):
            return _NO_PLAN
        free = view.free          # copied only once something starts
        plan = Plan()
        started: list[int] = []
        for i, entry in enumerate(self.queue):
            job: JobState = entry[-1]
            need = job.num_gpus
            gpus = self.place(free, need, job.spec.gpu_types) if need <= free.total else None
            if gpus is None:
                if not self.backfill:
                    break
                continue
            if free is view.free:
                free = view.free.copy()
            free.take(gpus)
            plan.start.append((job, gpus))
            started.append(i)
            if free.total < min(self.sizes):
                break
        if started:
            self._dequeue(started)
        return plan

    def _dequeue(self, indexes: list[int]) -> None:
        for i in indexes:
            *_, kind, job = self.queue[i]
            for counts, key in ((self.sizes, job.num_gpus), (self.kinds, kind)):
                left = counts[key] - 1
                if left:
                    counts[key] = left
                else:
                    del counts[key]
        if indexes[-1] == len(indexes) - 1:       # a prefix: the strict case
            del self.queue[:len(indexes)]
        else:
            gone = set(indexes)
            self.queue = [e for i, e in enumerate(self.queue) if i not in gone]
