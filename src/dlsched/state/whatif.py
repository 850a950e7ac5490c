"""A what-if view: the cluster as a policy would see it if some running jobs were gone and some
GPUs freed, without changing the state (the quota stage shows the policy the cluster
after the evictions and scale-ins it decided in the same pass)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from typing import Any

from ..cluster import Cluster
from ..jobs import JobView
from ..view import DriftingJobs, Holders, IdleGpus, JobQueue, Loans, PolicyView, RunningJobs
from ..workload_model import WorkloadModel, one_more_gpu_helps
from .drifting import LinearKey
from .running import RunningKey


def _idle_after(
    base: PolicyView,
    gone: list[JobView],
    freed: list[tuple[JobView, tuple[int, ...]]],
) -> list[int]:
    """The GPUs that go idle once ``gone`` jobs leave and ``freed`` GPUs are given up: each
    once, only when every job on it leaves it (a GPU two jobs share) and no profiling run holds
    it on, and not one ``base`` shows idle already (a view of a view)."""
    leaving: dict[int, set[str]] = {}
    for job in gone:
        for g in base.gpus_of(job):
            leaving.setdefault(g, set()).add(job.job_id)
    for job, gpus in freed:
        for g in gpus:
            leaving.setdefault(g, set()).add(job.job_id)
    holders, leased, idle = base.occupancy.jobs, base.occupancy.leased, base.free.is_free
    return [
        g
        for g, ids in leaving.items()
        if g not in leased and not idle(g) and all(h.job_id in ids for h in holders[g])
    ]


class WhatIfView:
    """``base`` with ``gone`` running jobs taken off their GPUs and ``freed`` GPUs of other
    running jobs (scale-ins) idle. The occupancy is the base's: a job planning to share a GPU
    sees the holders as they are now."""

    def __init__(
        self,
        base: PolicyView,
        gone: Iterable[JobView] = (),
        freed: Iterable[tuple[JobView, tuple[int, ...]]] = (),
    ) -> None:
        self.base = base
        gone = list(gone)
        freed = list(freed)
        free = base.free.copy()
        free.release(_idle_after(base, gone, freed))
        self._free = free
        ids = {j.job_id for j in gone}
        self._running = {k: v for k, v in base.running.items() if k not in ids}
        self._running_elastic = {k: v for k, v in base.running_elastic.items() if k not in ids}
        self._above_base = dict(base.elastic_above_base)
        self._growable = dict(base.elastic_growable)
        self._extra = base.elastic_extra_gpus
        self._grown = base.elastic_grown_gpus
        held = dict(base.tenant_gpus)
        for job in gone:
            size = len(base.gpus_of(job))
            held[job.spec.tenant] -= size
            self._resized_elastic(job, size, 0)
        self._gpus_of: dict[str, tuple[int, ...]] = {}
        for job, gpus in freed:
            held[job.spec.tenant] -= len(gpus)
            off = set(gpus)
            kept = self._gpus_of.get(job.job_id, base.gpus_of(job))
            self._gpus_of[job.job_id] = tuple(g for g in kept if g not in off)
            self._resized_elastic(job, len(kept), len(self._gpus_of[job.job_id]))
        self._tenant_gpus = held

    def _resized_elastic(self, job: JobView, old: int, new: int) -> None:
        """The indexes of running elastic jobs (as the state keeps them) after a job went from
        ``old`` GPUs to ``new`` (0: gone)."""
        if job.job_id not in self.base.running_elastic:
            return
        base, request = job.base_gpus, job.num_gpus
        self._extra += (new - base if new else 0) - (old - base)
        self._grown += max(0, new - request) - max(0, old - request)
        if new <= base:
            self._above_base.pop(job.job_id, None)
        if new and one_more_gpu_helps(self.base.workload, job.spec, new):
            self._growable[job.job_id] = job
        else:
            self._growable.pop(job.job_id, None)

    def without(
        self, gone: Iterable[JobView] = (), freed: Iterable[tuple[JobView, tuple[int, ...]]] = ()
    ) -> WhatIfView:
        return WhatIfView(self, gone, freed)

    @property
    def now(self) -> float:
        return self.base.now

    @property
    def cluster(self) -> Cluster:
        return self.base.cluster

    @property
    def free(self) -> IdleGpus:
        return self._free

    @property
    def pending(self) -> Mapping[str, JobView]:
        return self.base.pending

    @property
    def running(self) -> Mapping[str, JobView]:
        return self._running

    @property
    def running_elastic(self) -> Mapping[str, JobView]:
        return self._running_elastic

    @property
    def elastic_above_base(self) -> Mapping[str, JobView]:
        return self._above_base

    @property
    def elastic_growable(self) -> Mapping[str, JobView]:
        return self._growable

    @property
    def sharing_candidates(self) -> Mapping[str, JobView]:
        running = self._running
        return {k: v for k, v in self.base.sharing_candidates.items() if k in running}

    @property
    def elastic_extra_gpus(self) -> int:
        return self._extra

    @property
    def elastic_grown_gpus(self) -> int:
        return self._grown

    @property
    def occupancy(self) -> Holders:
        return self.base.occupancy

    @property
    def workload(self) -> WorkloadModel:
        return self.base.workload

    @property
    def loans(self) -> Loans:
        return self.base.loans

    @property
    def cordoned(self) -> Collection[int]:
        return self.base.cordoned

    @property
    def tenant_gpus(self) -> Mapping[str, int]:
        return self._tenant_gpus

    def queue(
        self,
        key: Callable[[JobView], Any],
        bucket: Callable[[JobView], Hashable] | None = None,
        totals: Callable[[JobView], tuple[float, ...]] | None = None,
    ) -> JobQueue:
        return self.base.queue(key, bucket, totals)

    def running_order(self, key: RunningKey) -> RunningJobs:
        return self.base.running_order(key)

    def running_drift(self, linear_key: LinearKey) -> DriftingJobs:
        return self.base.running_drift(linear_key)

    def gpus_of(self, job: JobView) -> tuple[int, ...]:
        kept = self._gpus_of.get(job.job_id)
        return self.base.gpus_of(job) if kept is None else kept

    def projected_finish(self, job: JobView) -> float:
        return self.base.projected_finish(job)

    def executed_gpu_s(self, job: JobView) -> float:
        return self.base.executed_gpu_s(job)

    def resizing(self, job: JobView) -> bool:
        return self.base.resizing(job)

    def preemption_cost_gpu_s(self, job: JobView) -> float:
        return self.base.preemption_cost_gpu_s(job)
