"""Running jobs whose order drifts with time (SRTF's), kept by the cluster state so that a
preemptive pass finds the worst one, and the GPUs a job could free by preemption, without
visiting every job.

Each job has a linear key
(:meth:`dlsched.policies.preemptive.PreemptiveOrder.linear_key`): from the pass under way until
``until``, its badness is ``slope x time + intercept``. Jobs of one slope keep their order, so
each slope is a list sorted by intercept (the worst last); a job whose key ends (a pause over)
is handed back to be re-keyed. With a handful of slopes (the distinct speeds of running jobs)
the worst job is the worst of the slopes' last ones, and the GPUs held by jobs at least as bad
as a badness are a bisection and a sum per slope.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections.abc import Callable, Collection, Container, Iterable

from ..jobs import JobView

LinearKey = Callable[[JobView], tuple[float, float, float]]


class _Slope:
    """The jobs of one slope as entries (intercept, seq, GPUs it may hold, job), ascending (one
    list: a start or stop inserts or deletes once); ``total`` sums their GPUs."""

    __slots__ = ("entries", "total")

    def __init__(self) -> None:
        self.entries: list[tuple[float, int, int, JobView]] = []
        self.total = 0


class DriftingIndex:
    """Running jobs by slope; each job once (``add`` replaces its key)."""

    def __init__(self) -> None:
        self._slopes: dict[float, _Slope] = {}
        self._where: dict[str, tuple[float, tuple[float, int]]] = {}  # job id -> slope, key
        # keys that end (paused jobs' resumes), soonest first; stale once the job moved
        self._ending: list[tuple[float, int, JobView, float, tuple[float, int]]] = []

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._where

    def add(self, job: JobView, slope: float, intercept: float, until: float) -> None:
        """Index a running job under its linear key (replacing the one it had)."""
        if job.job_id in self._where:
            self.remove(job.job_id)
        key = (intercept, job.seq)
        same = self._slopes.get(slope)
        if same is None:
            same = self._slopes[slope] = _Slope()
        # at most its largest size: an elastic job's GPUs may change while it is indexed
        # (a conditional, not ``max``: asked at every start and resume)
        gpus, largest = len(job.gpus), job.spec.gpu_range[1]
        if largest > gpus:
            gpus = largest
        entry = (intercept, job.seq, gpus, job)
        entries = same.entries
        entries.insert(bisect_left(entries, entry), entry)
        same.total += gpus
        self._where[job.job_id] = (slope, key)
        if until < math.inf:
            heapq.heappush(self._ending, (until, job.seq, job, slope, key))

    def remove(self, job_id: str) -> None:
        found = self._where.pop(job_id, None)
        if found is None:
            return
        slope, key = found
        same = self._slopes[slope]
        entries = same.entries
        i = bisect_left(entries, key)  # (a key sorts just before its entry)
        same.total -= entries[i][2]
        del entries[i]
        if not entries:
            del self._slopes[slope]

    def ended(self, now: float) -> list[JobView]:
        """The jobs whose keys hold no longer at ``now``: to be re-keyed (``add``)."""
        due = []
        ending, where = self._ending, self._where
        while ending and ending[0][0] <= now:
            _, _, job, slope, key = heapq.heappop(ending)
            if where.get(job.job_id) == (slope, key):
                due.append(job)
        return due

    def worst(
        self,
        exact_worst_first: Callable[[JobView], tuple],
        now: float,
        skip: Container[str] = (),
        running: Container[str] | None = None,
    ) -> JobView | None:
        """The worst running job, but those in ``skip`` (a pass's victims so far) and those not
        in ``running`` (a what-if view's): the least ``exact_worst_first`` of the slopes'
        worst, asked only of those whose linear badness at ``now`` is within the rounding of
        the largest (the two keys may differ in their last places)."""
        # one loop keeping the largest badness and the runner-up: the exact keys are asked
        # only on a near tie (asked about 265,000 times in an SRTF replay of Philly)
        largest = second = -math.inf
        found = None
        if skip or running is not None:
            for slope, same in self._slopes.items():
                i = _top(same.entries, skip, running)
                if i < 0:
                    continue
                badness = slope * now + same.entries[i][0]
                if badness > largest:
                    largest, second, found = badness, largest, same.entries[i][3]
                elif badness > second:
                    second = badness
        else:  # (most calls: each slope's worst is its last)
            top: _Slope | None = None
            for slope, same in self._slopes.items():
                badness = slope * now + same.entries[-1][0]
                if badness > largest:
                    largest, second, top = badness, largest, same
                elif badness > second:
                    second = badness
            if top is not None:
                found = top.entries[-1][3]
        if found is None:
            return None
        cut = largest - rounding_margin(largest, now)
        if second < cut:
            return found
        tops = self._tops(now, skip, running)
        return min((job for badness, job in tops if badness >= cut), key=exact_worst_first)

    def _tops(
        self, now: float, skip: Container[str], running: Container[str] | None
    ) -> list[tuple[float, JobView]]:
        """Each slope's worst job but those skipped, with its badness at ``now``."""
        tops = []
        for slope, same in self._slopes.items():
            i = _top(same.entries, skip, running)
            if i >= 0:
                tops.append((slope * now + same.entries[i][0], same.entries[i][3]))
        return tops

    def gpus_from(
        self, badness: float, now: float, skip: Collection[str] = (), enough: float = math.inf
    ) -> int:
        """An upper bound on the GPUs held by the jobs whose badness at ``now`` is at least
        ``badness``, but those in ``skip`` (a pass's victims: few); or, once that count
        reaches ``enough``, some count at least ``enough`` (a pass asks whether a job can
        make room, not how much)."""
        if enough < math.inf:
            return self._gpus_reaching(badness, now, skip, enough)
        total = 0
        for jid in skip:
            found = self._where.get(jid)
            if found is not None:
                slope, key = found
                if key >= (badness - slope * now,):  # as the bisection below counts it
                    same = self._slopes[slope]
                    total -= same.entries[bisect_left(same.entries, key)][2]
        for slope, same in self._slopes.items():
            entries = same.entries
            i = bisect_left(entries, (badness - slope * now,))
            if 2 * i < len(entries):  # the shorter side: most jobs are usually above
                total += same.total - sum(e[2] for e in entries[:i])
            else:
                total += sum(e[2] for e in entries[i:])
        return total

    def _gpus_reaching(
        self, badness: float, now: float, skip: Container[str], enough: float
    ) -> int:
        """``gpus_from`` counting each slope from its worst job down, stopping at ``enough``:
        every job counted holds a GPU, so it visits at most ``enough`` jobs and the skipped."""
        if enough <= 0:
            return 0
        total = 0
        for slope, same in self._slopes.items():
            # the jobs whose key is at least (threshold,), as the bisection in gpus_from counts
            threshold = badness - slope * now
            entries = same.entries
            i = len(entries) - 1
            while i >= 0 and entries[i][0] >= threshold:
                if entries[i][3].job_id not in skip:
                    total += entries[i][2]
                    if total >= enough:
                        return total
                i -= 1
        return total


def _top(
    entries: list[tuple[float, int, int, JobView]],
    skip: Container[str],
    running: Container[str] | None,
) -> int:
    """The index of a slope's worst entry but the jobs in ``skip`` and those not in ``running``
    (-1: none)."""
    i = len(entries) - 1
    while i >= 0 and (
        (jid := entries[i][3].job_id) in skip or (running is not None and jid not in running)
    ):
        i -= 1
    return i


class RunningDrift(DriftingIndex):
    """The running jobs under a policy's linear key (``linear_key(job)``: slope, intercept,
    until), kept by the state: it keys a job when it starts and whenever its speed or work left
    changes (``put``), drops it when it stops, and re-keys those whose keys ended (a pause
    over) when a pass asks for it (``settle``)."""

    def __init__(self, linear_key: LinearKey, jobs: Iterable[JobView] = ()) -> None:
        super().__init__()
        self.linear_key = linear_key
        for job in jobs:
            self.put(job)

    def put(self, job: JobView) -> None:
        self.add(job, *self.linear_key(job))

    def rekey(self, job: JobView) -> None:
        """The policy's key for the running job changed."""
        if job.job_id in self._where:
            self.put(job)

    def settle(self, now: float) -> None:
        for job in self.ended(now):
            self.put(job)


def rounding_margin(badness: float, now: float) -> float:
    """More than the rounding between a linear key's badness at ``now`` and the order's exact
    key (a few units in the last place of numbers this large)."""
    return 1e-9 * (abs(badness) + abs(now)) + 1e-9
