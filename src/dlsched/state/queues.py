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

With ``totals`` as well (``view.queue(key, bucket, totals)``), a function of a waiting job giving
a tuple of numbers, the queue keeps each bucket's sums of them as jobs join and leave
(``bucket_totals``): fair share's rho over a tenant's waiting jobs reads them instead of summing
the bucket at every pass. The sums are exact (integers in units of the smallest float), so they
never drift with the order of joins and leaves and equal ``math.fsum`` of the bucket.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Callable, Container, Hashable, Iterable, Iterator, Mapping, Sequence
from operator import itemgetter
from typing import Any, overload

from ..jobs import JobView

QueueKey = Callable[[JobView], Any]
_job = itemgetter(2)  # an entry's job
BucketKey = Callable[[JobView], Hashable]
Totals = Callable[[JobView], tuple[float, ...]]
_UNIT_BITS = 1074  # the smallest positive float is 2**-1074: every float is a whole count of it


def _exact(x: float) -> int:
    """``x`` as a whole number of 2**-1074 (exact, for any finite float)."""
    n, d = x.as_integer_ratio()  # d is a power of two, at most 2**1074
    return n << (_UNIT_BITS + 1 - d.bit_length())


class PendingQueue(Sequence[JobView]):
    """Read-only to policies: iterate it (best first), ``len`` it, index it; with buckets,
    ``buckets`` (bucket -> its jobs, best first) and ``scan``."""

    __slots__ = (
        "key",
        "bucket",
        "totals",
        "_entries",
        "_head",
        "_keys",
        "_buckets",
        "sizes",
        "_sums",
        "_rounded",
    )

    def __init__(
        self,
        key: QueueKey,
        jobs: Iterable[JobView] = (),
        bucket: BucketKey | None = None,
        totals: Totals | None = None,
    ) -> None:
        if totals is not None and bucket is None:
            raise ValueError("totals are kept per bucket: give a bucket function too")
        self.key = key
        self.bucket = bucket
        self.totals = totals
        # job id -> (key, seq, bucket); entries are (key, seq, job), sorted (seq is unique, so
        # comparisons never reach the job). A bucketed queue keeps its buckets only, and
        # ``_entries`` is their merge, made when asked after a change (None until then): the
        # hot paths (a preemptive scan, fair share's heads) read the buckets. An unbucketed
        # queue's jobs leave mostly from its head: the entries before ``_head`` have left (a
        # list's ``del l[0]`` moves every other entry: 6% of a FIFO replay of Philly), and go
        # once they are half the list.
        self._keys: dict[str, tuple] = {}
        self._entries: list[tuple] | None = []
        self._head = 0
        self._buckets: dict[Hashable, list[tuple]] = {}
        # GPUs asked for -> jobs waiting that ask for as many (a scan's quick "nothing fits")
        self.sizes: dict[int, int] = {}
        # bucket -> the exact sums of ``totals`` over its jobs (see bucket_totals)
        self._sums: dict[Hashable, list[int]] = {}
        self._rounded: dict[Hashable, tuple[float, ...]] = {}  # as floats, until they change
        for job in jobs:
            k = self._key(job)
            self._entries.append((k[0], k[1], job))
            self.sizes[job.num_gpus] = self.sizes.get(job.num_gpus, 0) + 1
        self._entries.sort(key=lambda e: e[:2])
        if bucket is not None:
            for e in self._entries:
                b = self._keys[e[2].job_id][2]
                self._buckets.setdefault(b, []).append(e)
                if totals is not None:
                    self._count(b, e[2], 1)

    def _key(self, job: JobView) -> tuple:
        k = (self.key(job), job.seq, None if self.bucket is None else self.bucket(job))
        self._keys[job.job_id] = k
        return k

    def __iter__(self) -> Iterator[JobView]:
        return map(_job, self.merged())  # (a reader of the best few pays for those)

    def __len__(self) -> int:
        return len(self._keys)

    def __bool__(self) -> bool:
        return bool(self._keys)

    @overload
    def __getitem__(self, i: int) -> JobView: ...
    @overload
    def __getitem__(self, i: slice) -> list[JobView]: ...
    def __getitem__(self, i: int | slice) -> JobView | list[JobView]:
        if isinstance(i, slice):
            return [e[2] for e in self.entries[i]]
        return self.entries[i][2]

    @property
    def entries(self) -> Sequence[tuple]:
        """The entries ``(key, seq, job)``, best first (of a bucketed queue: its buckets
        merged, once per change of the queue; ``merged`` reads a prefix for less)."""
        if self._entries is None:
            self._entries = list(heapq.merge(*self._buckets.values()))
        elif self._head:
            del self._entries[: self._head]
            self._head = 0
        return self._entries

    def merged(self) -> Iterator[tuple]:
        """The entries, best first, as they are read: of a bucketed queue, its buckets merged
        as far as the caller reads (the queue must not change meanwhile)."""
        entries = self._entries
        if entries is None:
            return heapq.merge(*self._buckets.values())
        if not self._head:
            return iter(entries)
        return map(entries.__getitem__, range(self._head, len(entries)))

    def rerank(self, job: JobView) -> None:
        """The policy's key for this waiting job changed (its own order: Tiresias promotes a
        starved job): it moves to its new place. Nothing when the job is not in the queue."""
        if job.job_id in self._keys:
            self.remove(job)
            self.add(job)

    def key_of(self, job: JobView) -> Any:
        """The key of a job in the queue (computed when it started waiting)."""
        return self._keys[job.job_id][0]

    @property
    def buckets(self) -> Mapping[Any, Sequence[tuple]]:
        """Bucket -> its entries ``(key, seq, job)``, best first; a bucket goes with its last
        job."""
        return self._buckets

    def scan(self, skipped: Container[Hashable]) -> Iterator[tuple[JobView, Hashable]]:
        """The waiting jobs with their buckets, best first, passing over the rest of a bucket
        once the caller has put it in ``skipped``: a backfilling pass that learns one kind of
        job cannot start never looks at that kind's other jobs. It merges the buckets' heads,
        so a pass costs the jobs it looks at, not the queue's length. The queue must not
        change meanwhile (it does not: the state changes it between passes)."""
        buckets = self._buckets
        heap = [(entries[0][0], entries[0][1], 0, b) for b, entries in buckets.items()]
        heapq.heapify(heap)  # seq is unique: comparisons never reach the position or bucket
        while heap:
            _, _, i, b = heap[0]
            entries = buckets[b]
            yield entries[i][2], b
            i += 1
            if i == len(entries) or b in skipped:
                heapq.heappop(heap)
            else:
                heapq.heapreplace(heap, (entries[i][0], entries[i][1], i, b))

    def bucket_totals(self, bucket: Hashable) -> tuple[float, ...]:
        """The sums of ``totals`` over the bucket's jobs (each correctly rounded); an empty
        tuple for a bucket with no job waiting."""
        rounded = self._rounded.get(bucket)
        if rounded is None:
            sums = self._sums.get(bucket)
            if sums is None:
                return ()
            rounded = self._rounded[bucket] = tuple(s / (1 << _UNIT_BITS) for s in sums)
        return rounded

    def _count(self, b: Hashable, job: JobView, sign: int) -> None:
        assert self.totals is not None
        values = self.totals(job)
        self._rounded.pop(b, None)
        sums = self._sums.setdefault(b, [0] * len(values))
        for i, v in enumerate(values):
            sums[i] += sign * _exact(v)

    # -- kept by the state ---------------------------------------------------------------------
    def add(self, job: JobView) -> None:
        # (_key and _put inlined: the state calls this for every job that starts waiting)
        bucket = self.bucket
        key, seq = self.key(job), job.seq
        b = None if bucket is None else bucket(job)
        self._keys[job.job_id] = (key, seq, b)
        entry = (key, seq, job)
        if bucket is None:
            entries = self._entries
            assert entries is not None  # (kept when not bucketed)
            if len(entries) == self._head or entries[-1] < entry:
                entries.append(entry)
            else:
                insort(entries, entry, lo=self._head)
        else:
            self._entries = None
            _put(self._buckets.setdefault(b, []), entry)
            if self.totals is not None:
                self._count(b, job, 1)
        n = job.num_gpus
        self.sizes[n] = self.sizes.get(n, 0) + 1

    def remove(self, job: JobView) -> None:
        key, seq, b = self._keys.pop(job.job_id)
        if self.bucket is None:
            entries, head = self._entries, self._head
            assert entries is not None  # (kept when not bucketed)
            if entries[head][2] is job:  # (the state calls this for every start)
                head += 1
                if 2 * head >= len(entries):  # (when empty, too)
                    del entries[:head]
                    head = 0
                self._head = head
            else:
                del entries[bisect_left(entries, (key, seq), lo=head)]
        else:
            self._entries = None
            same = self._buckets[b]
            if len(same) == 1:
                del self._buckets[b]
                if self.totals is not None:
                    del self._sums[b]
                    self._rounded.pop(b, None)
            else:
                _drop(same, key, seq, job)
                if self.totals is not None:
                    self._count(b, job, -1)
        n = job.num_gpus
        left = self.sizes[n] - 1
        if left:
            self.sizes[n] = left
        else:
            del self.sizes[n]


# Most jobs join at the tail (arrival order) and leave from the head (they start): both are
# checked before a binary search.
def _put(entries: list[tuple], entry: tuple) -> None:
    if not entries or entries[-1] < entry:
        entries.append(entry)
    else:
        insort(entries, entry)


def _drop(entries: list[tuple], key: Any, seq: int, job: JobView) -> None:
    if entries[0][2] is job:
        del entries[0]
    else:
        del entries[bisect_left(entries, (key, seq))]
