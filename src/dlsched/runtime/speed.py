"""The runtime's workload model: what the policies ask of real jobs (speed at a size, memory at
a sub-batch, co-location slowdown, the cost of accumulation), answered from each job's
profiling run where there is one (:mod:`.profile`) and from documented defaults where not."""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Collection
from functools import lru_cache

from ..jobs import JobSpec, JobView
from .device import MEMORY_HEADROOM

# Chosen: how many finished jobs' measured sharing slowdowns the cluster's typical one is taken
# over.
SLOWDOWN_HISTORY = 1000
# Chosen, until jobs are profiled at several sizes: a real job's speed on n GPUs relative to its
# request r is (n / r) ** this: sublinear, as every measured curve in docs/perf.md is; it is what
# lets the elastic policies weigh growing one job against another.
RUNTIME_SCALING_EXPONENT = 0.9


@lru_cache(maxsize=1)
def measured_pair_slowdowns() -> tuple[float, ...]:
    """The co-location slowdown of every measured pair of the performance model's data (Blox
    and Gavel; 169 pairs, 1.0 to 8.6, median 1.63), sorted."""
    from ..perf.model import PerfModel
    from ..perf.zoo import ZOO

    perf = PerfModel()
    pairs = [perf.colocation(a, b) for a in ZOO for b in ZOO]
    return tuple(sorted(p[0] for p in pairs if p))


def median_measured_slowdown() -> float:
    """A real job's slowdown until some job has been measured sharing a GPU on this cluster (no
    profiling run measures pairs): the median of the measured pairs (1.63)."""
    return statistics.median(measured_pair_slowdowns())


def global_batch(spec: JobSpec) -> int:
    """A runtime job's global batch: its spec requires one (a simulated job's may have none)."""
    if spec.batch_size is None:
        raise ValueError(f"job {spec.job_id} has no batch size")
    return spec.batch_size


class RuntimeSpeed:
    """Implements :class:`~dlsched.workload_model.WorkloadModel` for real jobs."""

    measures_real_runs = True  # its iteration times are measurements: no simulated noise

    def __init__(
        self, exponent: float = RUNTIME_SCALING_EXPONENT, memory_headroom: float = MEMORY_HEADROOM
    ) -> None:
        self.exponent, self.memory_headroom = exponent, memory_headroom
        self.profiles: dict[str, dict] = {}  # job id -> its profiling run's result
        # jobs that outgrew their memory grant: their memory counts as unknown, so they run
        # alone and nobody joins them (dlsched.runtime.device)
        self.exclusive: set[str] = set()
        self.slowdowns: dict[str, float] = {}  # job id -> its measured slowdown while sharing
        self.tenant_of: dict[str, str] = {}  # job id -> its tenant, for the typical slowdown
        # (tenant, slowdown) of jobs gone
        self.finished_slowdowns: deque[tuple[str, float]] = deque(maxlen=SLOWDOWN_HISTORY)
        self._typical: float | None = None

    def measured_slowdown(self, job_id: str, slowdown: float, tenant: str | None = None) -> None:
        """The job's slowdown while sharing, as measured (its own from now on); ``tenant``: whose
        vote it is in the cluster's typical slowdown (default: the job's own)."""
        self.slowdowns[job_id] = slowdown
        self.tenant_of[job_id] = job_id if tenant is None else tenant
        self._typical = None

    def forget(self, job_id: str) -> None:
        """The job is gone; its measured slowdown still counts in the cluster's typical one."""
        self.profiles.pop(job_id, None)
        self.exclusive.discard(job_id)
        if job_id in self.slowdowns:
            tenant = self.tenant_of.pop(job_id)
            self.finished_slowdowns.append((tenant, self.slowdowns.pop(job_id)))

    def typical_slowdown(self) -> float:
        """A job's slowdown until it has shared: the median over tenants of each tenant's median
        of those measured on this cluster, each within the measured pairs' range, so that no
        tenant's jobs (nor their false reports) carry more than one vote; before any, the median
        of the performance model's measured pairs."""
        if self._typical is None:
            pairs = measured_pair_slowdowns()
            by_tenant: dict[str, list[float]] = {}
            measured = [(self.tenant_of[j], x) for j, x in self.slowdowns.items()]
            for tenant, x in [*measured, *self.finished_slowdowns]:
                by_tenant.setdefault(tenant, []).append(min(max(x, pairs[0]), pairs[-1]))
            votes = [statistics.median(xs) for xs in by_tenant.values()]
            self._typical = statistics.median(votes) if votes else statistics.median(pairs)
        return self._typical

    def __call__(self, job: JobView, gpus: tuple[int, ...]) -> float:
        return self.speed_at_size(job.spec, len(gpus)) / self.accumulation_cost(
            job.spec, job.accumulation
        )

    def speed_at_size(self, spec: JobSpec, gpus: int) -> float:
        return (gpus / spec.num_gpus) ** self.exponent

    def memory_mib(self, spec: JobSpec, gpus: int, accumulation: int = 1) -> float | None:
        """A worker's memory grant: its profiled peak at its sub-batch, plus the headroom."""
        p = self.profiles.get(spec.job_id)
        if p is None or spec.job_id in self.exclusive:
            return None
        peak = p["fixed_mib"] + p["per_sample_mib"] * global_batch(spec) / gpus / accumulation
        # the fit's line at a sub-batch below the measured ones may reach 0 or below: unknown,
        # not a grant of nothing (a grant of 0 is no cap, and anyone may join a job using none)
        return peak * (1 + self.memory_headroom) if peak > 0 else None

    def accumulation_cost(self, spec: JobSpec, accumulation: int) -> float:
        p = self.profiles.get(spec.job_id)
        if p is None or accumulation == 1:
            return 1.0
        batch = global_batch(spec) / spec.num_gpus
        return (accumulation * p["c0_s"] + p["c1_s"] * batch) / (p["c0_s"] + p["c1_s"] * batch)

    def spread_speed(self, job: JobView, gpus: int, gpu_types: Collection[str]) -> float | None:
        return None  # (placements are measured, not modelled)

    def slowdown(self, job: JobView, partner: JobView) -> float | None:
        if job.job_id in self.profiles and partner.job_id in self.profiles:
            return self.slowdown_of(job.job_id)
        return None

    def slowdown_of(self, job_id: str) -> float:
        """A job's slowdown while it shares a GPU: its own measured one, else the typical one."""
        return self.slowdowns.get(job_id) or self.typical_slowdown()

    def checkpoint_mib(self, spec: JobSpec) -> float | None:
        return None  # not measured: a real resize's pause is what it takes, not predicted

    def iteration_s(self, spec: JobSpec, gpus: int, nodes: int, local_batch: float) -> float | None:
        """What the job's profiling run measured on ``gpus`` workers over ``nodes`` nodes at the
        per-worker batch nearest ``local_batch`` (within 10%); one worker's compute line
        (c0 + c1 x batch) when that placement was not measured on its own."""
        p = self.profiles.get(spec.job_id)
        if p is None or spec.job_id in self.exclusive:
            return None
        measured = [m for m in p.get("placements", ()) if m["gpus"] == gpus and m["nodes"] == nodes]
        if measured:
            nearest = min(measured, key=lambda m: abs(m["batch"] - local_batch))
            return (
                nearest["iteration_s"]
                if abs(nearest["batch"] - local_batch) <= 0.1 * local_batch
                else None
            )
        return p["c0_s"] + p["c1_s"] * local_batch if gpus == 1 else None
