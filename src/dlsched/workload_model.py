"""The workload model: what the state and the policies may ask about how a job runs.

Three implementations answer it: :class:`TraceModel` (every job at its trace speed, nothing
else known), the fitted performance model (:class:`dlsched.perf.speed.PerfSpeed`) and the
runtime's measured model (:class:`dlsched.runtime.speed.RuntimeSpeed`). None subclasses another;
each is checked against :class:`WorkloadModel` in the tests.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol, runtime_checkable

from .jobs import JobSpec, JobView


@runtime_checkable
class WorkloadModel(Protocol):
    measures_real_runs: bool  # its iteration times are measured (the runtime), not modelled

    def __call__(self, job: JobView, gpus: tuple[int, ...]) -> float:
        """The job's speed (solo seconds of work per second) on ``gpus`` at its current
        sub-batch count, alone on them."""

    def speed_at_size(self, spec: JobSpec, gpus: int) -> float | None:
        """Speed on ``gpus`` GPUs of the reference type on the fewest nodes, global batch kept
        (1.0 at its request); None when unknown."""

    def spread_speed(self, job: JobView, gpus: int, gpu_types: Collection[str]) -> float | None:
        """At least the job's speed (at its current sub-batch count) on any placement of
        ``gpus`` GPUs over more than one node whose types include ``gpu_types``; None when
        unknown."""

    def slowdown(self, job: JobView, partner: JobView) -> float | None:
        """How much slower ``job`` runs beside ``partner`` on one GPU; None when unmeasured
        (then the two may not share)."""

    def memory_mib(self, spec: JobSpec, gpus: int, accumulation: int = 1) -> float | None:
        """Memory per GPU on ``gpus`` GPUs at ``accumulation`` sub-batches; None when unknown."""

    def accumulation_cost(self, spec: JobSpec, accumulation: int) -> float:
        """How much longer an optimizer step takes with ``accumulation`` sub-batches (1.0 for
        none)."""

    def checkpoint_mib(self, spec: JobSpec) -> float | None:
        """The size of the job's checkpoint (weights and optimizer state); None when unknown."""

    def iteration_s(self, spec: JobSpec, gpus: int, nodes: int, local_batch: float) -> float | None:
        """Seconds per iteration at ``local_batch`` per GPU on ``gpus`` GPUs of the reference type
        over ``nodes`` nodes, alone: what a profiling run of a few iterations measures (GENIE's
        predictor is fitted to such samples); None when unknown."""


class TraceModel:
    """Without a performance model: every job runs at its trace speed, and since no job's
    memory or co-location slowdown is known, none may share a GPU."""

    measures_real_runs = False

    def __call__(self, job: JobView, gpus: tuple[int, ...]) -> float:
        return 1.0

    def speed_at_size(self, spec: JobSpec, gpus: int) -> float | None:
        return None

    def spread_speed(self, job: JobView, gpus: int, gpu_types: Collection[str]) -> float | None:
        return None

    def slowdown(self, job: JobView, partner: JobView) -> float | None:
        return None

    def memory_mib(self, spec: JobSpec, gpus: int, accumulation: int = 1) -> float | None:
        return None

    def accumulation_cost(self, spec: JobSpec, accumulation: int) -> float:
        return 1.0

    def checkpoint_mib(self, spec: JobSpec) -> float | None:
        return None

    def iteration_s(self, spec: JobSpec, gpus: int, nodes: int, local_batch: float) -> float | None:
        return None


TRACE_MODEL = TraceModel()


def one_more_gpu_helps(model: WorkloadModel, spec: JobSpec, gpus: int) -> bool:
    """Whether an elastic job on ``gpus`` GPUs may take one more (it is below its maximum) and
    runs faster on it, as far as ``model`` knows (a pure function of the spec and the size in
    every model)."""
    if gpus >= spec.gpu_range[1]:
        return False
    now, more = model.speed_at_size(spec, gpus), model.speed_at_size(spec, gpus + 1)
    return now is not None and more is not None and more > now
