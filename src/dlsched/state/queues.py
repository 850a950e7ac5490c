"""Admitted pending jobs in an order a policy names, kept by the cluster state.

A policy asks ``view.queue(key)`` with a key function of a waiting job (``(job.num_gpus,
job.spec.submit_time_s)``: fewest GPUs first); the first call sorts the jobs waiting then, and
from then on the state inserts every job that starts waiting (an arrival, a preemption, a
failure, an admission) and removes every job that stops waiting (a start, a cancel, an
eviction by the admission stage), so a pass reads the queue in order without sorting or
keeping a copy of its own. A key is computed when the job starts waiting: it must not change
while the job waits.

With ``bucket`` (``view.queue(key, bucket)``), the queue is also split by a second function of
the job (its size and GPU types, its tenant), each bucket in the same order: a scan that learns
that one kind of job cannot start skips its whole bucket, and a fair-share pass takes each
tenant's head.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from operator import itemgetter
from typing import Any, overload

from ..jobs import JobState

QueueKey = Callable[[JobState], Any]
_job = itemgetter(2)  # an entry's job
BucketKey = Callable[[JobState], Hashable]


class SortedEntries(Sequence[tuple]):
    """Entries ``(key, seq, job)`` in order, read as a sequence. Jobs mostly leave from the
    front (they start in order), so the front is an offset into the list, compacted now and
    then, rather than a copy of the whole list at every start."""

    __slots__ = ("_list", "_head")

    def __init__(self, entries: list[Any] | None = None) -> None:
        self._list: list[Any] = entries if entries is not None else []  # None before the head
        self._head = 0

    def __len__(self) -> int:
        return len(self._list) - self._head

    def __bool__(self) -> bool:
        return len(self._list) > self._head

    def __iter__(self) -> Iterator[tuple]:
        entries = self._list
        if not self._head:
            return iter(entries)
        return map(entries.__getitem__, range(self._head, len(entries)))  # no walk to the head

    @overload
    def __getitem__(self, i: int) -> tuple: ...
    @overload
    def __getitem__(self, i: slice) -> list[tuple]: ...
    def __getitem__(self, i: int | slice) -> tuple | list[tuple]:
        if isinstance(i, slice):
            return self._list[self._head :][i]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._list[self._head + i]

    def after(self, entry: tuple) -> tuple | None:
        """The entry right after ``entry`` (which need not be here), or None."""
        j = bisect_right(self._list, entry, self._head)
        return self._list[j] if j < len(self._list) else None

    def insert(self, entry: tuple) -> None:
        insort(self._list, entry, self._head)

    def drop(self, key: Any, seq: int) -> None:
        entries, head = self._list, self._head
        if entries[head][1] == seq:
            entries[head] = None  # no reference kept to the job
            head += 1
            if head > 64 and head * 2 > len(entries):
                del entries[:head]
                head = 0
            self._head = head
        else:
            del entries[bisect_left(entries, (key, seq), head)]


class PendingQueue(Sequence[JobState]):
    """Read-only to policies: iterate it (best first), ``len`` it, index it; with buckets,
    ``bucket_of(job)`` and ``buckets`` (bucket -> its entries, best first)."""

    __slots__ = ("key", "bucket", "_entries", "_keys", "_buckets", "sizes")

    def __init__(
        self, key: QueueKey, jobs: Iterable[JobState] = (), bucket: BucketKey | None = None
    ) -> None:
        self.key = key
        self.bucket = bucket
        # job id -> (key, seq, bucket); entries are (key, seq, job), sorted (seq is unique, so
        # comparisons never reach the job)
        self._keys: dict[str, tuple] = {}
        self._buckets: dict[Hashable, SortedEntries] = {}
        # GPUs asked for -> jobs waiting that ask for as many (a scan's quick "nothing fits")
        self.sizes: dict[int, int] = {}
        entries = []
        for job in jobs:
            k = self._key(job)
            entries.append((k[0], k[1], job))
            self.sizes[job.num_gpus] = self.sizes.get(job.num_gpus, 0) + 1
        entries.sort(key=lambda e: e[:2])
        self._entries = SortedEntries(entries)
        if bucket is not None:
            for e in entries:
                b = self._keys[e[2].job_id][2]
                self._buckets.setdefault(b, SortedEntries())._list.append(e)

    def _key(self, job: JobState) -> tuple:
        k = (self.key(job), job.seq, None if self.bucket is None else self.bucket(job))
        self._keys[job.job_id] = k
        return k

    def __iter__(self) -> Iterator[JobState]:
        return map(_job, self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    @overload
    def __getitem__(self, i: int) -> JobState: ...
    @overload
    def __getitem__(self, i: slice) -> list[JobState]: ...
    def __getitem__(self, i: int | slice) -> JobState | list[JobState]:
        if isinstance(i, slice):
            return [e[2] for e in self._entries[i]]
        return self._entries[i][2]

    @property
    def entries(self) -> SortedEntries:
        """The entries ``(key, seq, job)``, best first."""
        return self._entries

    def rerank(self, job: JobState) -> None:
        """The policy's key for this waiting job changed (its own order: Tiresias promotes a
        starved job): it moves to its new place. Nothing when the job is not in the queue."""
        if job.job_id in self._keys:
            self.remove(job)
            self.add(job)

    def bucket_of(self, job: JobState) -> Any:
        """The bucket of a job in the queue (None without buckets)."""
        return self._keys[job.job_id][2]

    @property
    def buckets(self) -> Mapping[Any, SortedEntries]:
        """Bucket -> its entries ``(key, seq, job)``, best first; a bucket goes with its last
        job."""
        return self._buckets

    # -- kept by the state ---------------------------------------------------------------------
    def add(self, job: JobState) -> None:
        key, seq, b = self._key(job)
        entry = (key, seq, job)
        self._entries.insert(entry)
        if self.bucket is not None:
            same = self._buckets.get(b)
            if same is None:
                same = self._buckets[b] = SortedEntries()
            same.insert(entry)
        n = job.num_gpus
        self.sizes[n] = self.sizes.get(n, 0) + 1

    def remove(self, job: JobState) -> None:
        key, seq, b = self._keys.pop(job.job_id)
        self._entries.drop(key, seq)
        if self.bucket is not None:
            same = self._buckets[b]
            if len(same) == 1:
                del self._buckets[b]
            else:
                same.drop(key, seq)
        n = job.num_gpus
        left = self.sizes[n] - 1
        if left:
            self.sizes[n] = left
        else:
            del self.sizes[n]
