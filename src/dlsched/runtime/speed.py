"""The runtime's workload model: what the policies ask of real jobs (speed at a size, memory at
a sub-batch, co-location slowdown, the cost of accumulation), answered from each job's
profiling run where there is one (:mod:`.profile`) and from documented defaults where not."""

from __future__ import annotations

import statistics
from collections import deque
from functools import lru_cache

from ..jobs import JobSpec, JobState

# Chosen: how many finished jobs' measured sharing slowdowns the cluster's typical one is taken
# over.
SLOWDOWN_HISTORY = 1000
# Chosen, until jobs are profiled at several sizes: a real job's speed on n GPUs relative to its
# request r is (n / r) ** this: sublinear, as every measured curve in docs/perf.md is; it is what
# lets the elastic policies weigh growing one job against another.
RUNTIME_SCALING_EXPONENT = 0.9


@lru_cache(maxsize=1)
def median_measured_slowdown() -> float:
    """The median co-location slowdown over every measured pair of the performance model's data
    (Blox and Gavel; 1.63): a real job's slowdown until some job has been measured sharing a GPU
    on this cluster (no profiling run measures pairs)."""
    from ..perf.model import PerfModel
    from ..perf.zoo import ZOO

    perf = PerfModel()
    pairs = [perf.colocation(a, b) for a in ZOO for b in ZOO]
    return statistics.median(p[0] for p in pairs if p)


class RuntimeSpeed:
    """Implements :class:`~dlsched.workload_model.WorkloadModel` for real jobs."""

    measures_real_runs = True  # its iteration times are measurements: no simulated noise

    def __init__(self, exponent: float = RUNTIME_SCALING_EXPONENT) -> None:
        self.exponent = exponent
        self.profiles: dict[str, dict] = {}  # job id -> its profiling run's result
        self.slowdowns: dict[str, float] = {}  # job id -> its measured slowdown while sharing
        self.finished_slowdowns: deque[float] = deque(maxlen=SLOWDOWN_HISTORY)  # of jobs gone
        self._typical: float | None = None

    def measured_slowdown(self, job_id: str, slowdown: float) -> None:
        self.slowdowns[job_id] = slowdown
        self._typical = None

    def forget(self, job_id: str) -> None:
        """The job is gone; its measured slowdown still counts in the cluster's typical one."""
        self.profiles.pop(job_id, None)
        if job_id in self.slowdowns:
            self.finished_slowdowns.append(self.slowdowns.pop(job_id))

    def typical_slowdown(self) -> float:
        """A job's slowdown until it has shared: the median of those measured on this cluster,
        and before any, the median of the performance model's measured pairs."""
        if self._typical is None:
            measured = [*self.slowdowns.values(), *self.finished_slowdowns]
            self._typical = statistics.median(measured) if measured else median_measured_slowdown()
        return self._typical

    def __call__(self, job: JobState, gpus: tuple[int, ...]) -> float:
        return self.speed_at_size(job.spec, len(gpus)) / self.accumulation_cost(
            job.spec, job.accumulation
        )

    def speed_at_size(self, spec: JobSpec, gpus: int) -> float | None:
        return (gpus / spec.num_gpus) ** self.exponent

    def memory_mib(self, spec: JobSpec, gpus: int, accumulation: int = 1) -> float | None:
        p = self.profiles.get(spec.job_id)
        if p is None:
            return None
        return p["fixed_mib"] + p["per_sample_mib"] * spec.batch_size / gpus / accumulation

    def accumulation_cost(self, spec: JobSpec, accumulation: int) -> float:
        p = self.profiles.get(spec.job_id)
        if p is None or accumulation == 1:
            return 1.0
        batch = spec.batch_size / spec.num_gpus
        return (accumulation * p["c0_s"] + p["c1_s"] * batch) / (p["c0_s"] + p["c1_s"] * batch)

    def slowdown(self, job: JobState, partner: JobState) -> float | None:
        if job.job_id in self.profiles and partner.job_id in self.profiles:
            return self.slowdowns.get(job.job_id) or self.typical_slowdown()
        return None

    def checkpoint_mib(self, spec: JobSpec) -> float | None:
        return None  # not measured: a real resize's pause is what it takes, not predicted

    def iteration_s(self, spec: JobSpec, gpus: int, nodes: int, local_batch: float) -> float | None:
        """What the job's profiling run measured on ``gpus`` workers over ``nodes`` nodes at the
        per-worker batch nearest ``local_batch`` (within 10%); one worker's compute line
        (c0 + c1 x batch) when that placement was not measured on its own."""
        p = self.profiles.get(spec.job_id)
        if p is None:
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
