"""Pending jobs in an order a policy names, kept by the cluster state.

A policy asks ``view.queue(key)`` with a key function of a waiting job (``(job.num_gpus,
job.spec.submit_time_s)``: fewest GPUs first); the first call sorts the jobs waiting then, and
from then on the state inserts every job that starts waiting (an arrival, a preemption, a
failure) and removes every job that stops waiting (a start, a cancel), so a pass reads the
queue in order without sorting or keeping a copy of its own. A key is computed when the job
starts waiting: it must not change while the job waits.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, overload

from ..jobs import JobState

QueueKey = Callable[[JobState], Any]


class PendingQueue(Sequence[JobState]):
    """Read-only to policies: iterate it (best first), ``len`` it, index it."""

    __slots__ = ("key", "_entries", "_keys")

    def __init__(self, key: QueueKey, jobs: Iterable[JobState] = ()) -> None:
        self.key = key
        self._keys: dict[str, tuple] = {}
        self._entries: list[tuple] = []  # (key, seq, job), sorted; seq is unique
        for job in jobs:
            self._keys[job.job_id] = k = (key(job), job.seq)
            self._entries.append((*k, job))
        self._entries.sort(key=lambda e: e[:2])

    def __iter__(self) -> Iterator[JobState]:
        return (e[2] for e in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    @overload
    def __getitem__(self, i: int) -> JobState: ...
    @overload
    def __getitem__(self, i: slice) -> list[JobState]: ...
    def __getitem__(self, i: int | slice) -> JobState | list[JobState]:
        if isinstance(i, slice):
            return [e[2] for e in self._entries[i]]
        return self._entries[i][2]

    # -- kept by the state ---------------------------------------------------------------------
    def add(self, job: JobState) -> None:
        self._keys[job.job_id] = k = (self.key(job), job.seq)
        insort(self._entries, (*k, job), key=lambda e: e[:2])

    def remove(self, job: JobState) -> None:
        k = self._keys.pop(job.job_id)
        del self._entries[bisect_left(self._entries, k, key=lambda e: e[:2])]
