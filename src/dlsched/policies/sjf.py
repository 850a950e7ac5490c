"""Shortest-first policies with oracle durations: SJF (non-preemptive) and SRTF (preemptive)."""

from __future__ import annotations

from ..jobs import JobState
from .base import register
from .preemptive import PreemptivePolicy
from .queued import QueuedPolicy


@register
class Sjf(QueuedPolicy):
    name = "sjf"
    description = "shortest job first by (oracle) duration; non-preemptive"

    def key(self, job: JobState) -> tuple:
        return (job.spec.duration_s, job.spec.submit_time_s)


@register
class Srtf(PreemptivePolicy):
    name = "srtf"
    description = "shortest remaining time first (oracle); preempts longer-remaining jobs"

    def __init__(self, placement: str = "best-fit", backfill: bool = False) -> None:
        super().__init__(placement, backfill)
        self._started_at: dict[str, float] = {}

    def rank(self, job: JobState, now: float) -> tuple:
        return (job.remaining_at(now), job.seq)

    def started(self, job: JobState, now: float) -> None:
        self._started_at[job.job_id] = now

    def stopped(self, job: JobState, now: float) -> None:
        self._started_at.pop(job.job_id, None)

    def job_progressed(self, job: JobState, now: float) -> None:
        # measured progress replaced the prediction: its remaining work, so its rank, moved
        if self.is_running(job.job_id):
            self._started_at[job.job_id] = now
            self._rekey_running(job)

    def worst_first(self, job: JobState) -> tuple:
        # The remaining work shrinks for every running job alike (rate 1 alone at the requested
        # size), so the order by "time it would end if never paused" stays the order by rank.
        # (remaining_s is as of the job's last progress update, which is its start or the
        # measurement job_progressed re-keys it at.)
        return (-(self._started_at[job.job_id] + job.remaining_s), -job.seq)
