"""Shortest-first policies with oracle durations: SJF (non-preemptive) and SRTF (preemptive)."""

from __future__ import annotations

import math

from ..jobs import JobView
from .base import PolicyView
from .preemptive import PreemptiveOrder, PreemptivePolicy
from .queued import QueuedPolicy, shortest_first


class Sjf(QueuedPolicy):
    name = "sjf"
    description = "shortest job first by (oracle) duration; non-preemptive"

    def __init__(self, placement: str = "best-fit", scan: str = "strict") -> None:
        super().__init__(shortest_first, placement, scan)


class SrtfOrder(PreemptiveOrder):
    """Remaining solo work at ``now`` (the oracle's). Running jobs progress at different speeds
    (placement, GPU type) and not at all while they pause to restart, so their order drifts
    (``drifting_keys``); their work left only shrinks while they run."""

    drifting_keys = True

    def __init__(self) -> None:
        self.now = 0.0

    def rank(self, job: JobView, now: float) -> tuple:
        return (job.remaining_at(now), job.seq)

    def on_timers(self, view: PolicyView) -> None:
        self.now = view.now

    def outranks(self, job: JobView, victim: JobView, now: float) -> bool:
        # ``rank``'s comparison without its tuples (asked about half a million times a replay)
        left, mine = victim.remaining_at(now), job.remaining_at(now)
        return left > mine or (left == mine and victim.seq > job.seq)

    # Keys are in "time its work left would reach zero at speed 1 from now" (now + work left),
    # so keys computed at different times compare: a larger one is more work left.
    def exact_worst_first(self, job: JobView) -> tuple:
        return (-(self.now + job.remaining_at(self.now)), -job.seq)

    def preemptible_gpus(self, job: JobView, enough: float = math.inf) -> float:
        """The GPUs of the running jobs with more work left than ``job``'s (at most)."""
        now = self.now
        return self.policy.drifting_gpus_from(now + job.remaining_at(now), now, enough)

    def linear_key(self, job: JobView) -> tuple[float, float, float]:
        """now + work left: t + R while it pauses (until it resumes), then (1 - r) t + R + r s
        for work left R at s, the later of its last progress and its resume, at speed r."""
        if job.resume_at > self.now or job.rate <= 0:
            return 1.0, job.remaining_s, job.resume_at if job.rate > 0 else math.inf
        since = job.resume_at if job.resume_at > job.progress_at else job.progress_at
        return 1.0 - job.rate, job.remaining_s + job.rate * since, math.inf


class Srtf(PreemptivePolicy):
    name = "srtf"
    description = "shortest remaining time first (oracle); preempts longer-remaining jobs"

    def __init__(self, placement: str = "best-fit", scan: str = "greedy") -> None:
        super().__init__(SrtfOrder(), placement, scan)
