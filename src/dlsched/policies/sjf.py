"""Shortest-first policies with oracle durations: SJF (non-preemptive) and SRTF (preemptive)."""

from __future__ import annotations

from ..jobs import JobState
from .base import register
from .preemptive import PreemptiveOrder, PreemptivePolicy
from .queued import QueuedPolicy, shortest_first


@register
class Sjf(QueuedPolicy):
    name = "sjf"
    description = "shortest job first by (oracle) duration; non-preemptive"

    def __init__(self, placement: str = "best-fit", scan: str = "strict") -> None:
        super().__init__(shortest_first, placement, scan)


class SrtfOrder(PreemptiveOrder):
    def __init__(self) -> None:
        self._started_at: dict[str, float] = {}

    def rank(self, job: JobState, now: float) -> tuple:
        return (job.remaining_at(now), job.seq)

    def started(self, job: JobState, now: float) -> None:
        self._started_at[job.job_id] = now

    def stopped(self, job: JobState, now: float) -> None:
        self._started_at.pop(job.job_id, None)

    def progressed(self, job: JobState, now: float) -> None:
        # measured progress replaced the prediction: its remaining work, so its rank, moved
        self._started_at[job.job_id] = now
        self.policy.rekey_running(job)

    def worst_first(self, job: JobState) -> tuple:
        # The remaining work shrinks for every running job alike (rate 1 alone at the requested
        # size), so the order by "time it would end if never paused" stays the order by rank.
        return (-(self._started_at[job.job_id] + job.remaining_s), -job.seq)


@register
class Srtf(PreemptivePolicy):
    name = "srtf"
    description = "shortest remaining time first (oracle); preempts longer-remaining jobs"

    def __init__(self, placement: str = "best-fit", scan: str = "greedy") -> None:
        super().__init__(SrtfOrder(), placement, scan)
