"""Running jobs in an order a policy names, kept by the cluster state (the running side of
:mod:`.queues`).

A preemptive policy asks ``view.running_order(key)`` with a key function of a running job that
sorts the worst first (the first to preempt: Tiresias' lowest queue, latest submitted); the first
call sorts the jobs running then, and from then on the state adds every job that starts and
drops every job that stops, so a pass finds its victims without keeping a copy of the running
jobs. A key is computed when the job starts; a policy whose own key for a running job changes
(Tiresias demotes it) says so with ``rekey``. Orders that drift with time (SRTF's work left)
have their own index, :class:`~.drifting.RunningDrift`.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from typing import Any

from ..jobs import JobView

RunningKey = Callable[[JobView], tuple]


class RunningOrder:
    """Read-only to policies but for ``rekey``: iterate it (worst first), ``len`` it, ask its
    ``worst``; ``head_gpus`` maps the first element of a key (Tiresias' queue) to the GPUs its
    jobs asked for, a bound on what preempting them could free."""

    __slots__ = ("key", "_keys", "_entries", "head_gpus")

    def __init__(self, key: RunningKey, jobs: Iterable[JobView] = ()) -> None:
        self.key = key
        self._keys: dict[str, tuple] = {}  # job id -> (key, seq)
        self._entries: list[tuple] = []  # (key, seq, job), worst first; seq is unique
        self.head_gpus: dict[Any, int] = {}
        for job in jobs:
            self.add(job)

    def __iter__(self) -> Iterator[JobView]:
        return (e[2] for e in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._keys

    def worst(
        self, skip: Container[str] = (), running: Mapping[str, JobView] | None = None
    ) -> JobView | None:
        """The worst running job but those in ``skip`` (a pass's victims so far) and those not
        in ``running`` (a what-if view's running jobs)."""
        if not skip and running is None:
            return self._entries[0][2] if self._entries else None
        for _, _, job in self._entries:
            jid = job.job_id
            if jid not in skip and (running is None or jid in running):
                return job
        return None

    def rekey(self, job: JobView) -> None:
        """The policy's key for this running job changed: it moves to its new place."""
        if job.job_id in self._keys:
            self.remove(job)
            self.add(job)

    # -- kept by the state ---------------------------------------------------------------------
    def add(self, job: JobView) -> None:
        key = self.key(job)
        self._keys[job.job_id] = (key, job.seq)
        insort(self._entries, (key, job.seq, job))
        head = key[0]
        self.head_gpus[head] = self.head_gpus.get(head, 0) + job.num_gpus

    def remove(self, job: JobView) -> None:
        found = self._keys.pop(job.job_id, None)
        if found is None:
            return
        del self._entries[bisect_left(self._entries, found)]
        head = found[0][0]
        left = self.head_gpus[head] - job.num_gpus
        if left:
            self.head_gpus[head] = left
        else:
            del self.head_gpus[head]
