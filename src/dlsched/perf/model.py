"""One facade over the performance data: iteration time, memory, GPU-type speed and
co-location slowdown for any model of the zoo."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from functools import cache

from ..errors import SpecError
from .measurements import GAVEL_GPU_TYPES, blox_pairs, gavel_pair, gavel_solo, pollux_points
from .scaling import scaling_model
from .zoo import ModelProfile, profile

# Gavel's throughputs are relative to the V100; trace durations are taken to be V100 times.
REFERENCE_GPU = "V100"
# Memory variants of a measured chip: the same compute, so the same speed.
SAME_CHIP = {"V100M16": "V100", "V100M32": "V100"}


@cache
def default_local_batch(model: str) -> float:
    prof = profile(model)
    if prof.default_batch is not None:
        return float(prof.default_batch)
    return statistics.median(p.local_batch for p in pollux_points(prof.scaling_app))


@cache
def _measured_type_speed(model: str, measured: str) -> float:
    """Gavel's solo throughput of the model's job type on ``measured`` over a V100's (asked
    for every job a trace without models is given one: kept, as the tables do not change)."""
    job_type = profile(model).gavel_type
    return gavel_solo(job_type, measured) / gavel_solo(job_type, REFERENCE_GPU)


class PerfModel:
    """``type_speeds`` overrides or adds relative speeds per GPU type ({type: speed vs V100},
    for every model), e.g. for types no public source measured."""

    def __init__(self, type_speeds: dict[str, float] | None = None) -> None:
        self.type_speeds = dict(type_speeds or {})
        self._colocation: dict[tuple[str, str], tuple[float, float] | None] = {}
        for t, v in self.type_speeds.items():
            if not (isinstance(v, (int, float)) and v > 0):
                raise SpecError("type_speeds", f"speed of {t} must be > 0, got {v!r}")

    def profile(self, model: str) -> ModelProfile:
        return profile(model)

    def iteration_s(
        self,
        model: str,
        gpus: int = 1,
        local_batch: float | None = None,
        nodes: int = 1,
        accumulation: int = 1,
        gpu_type: str = REFERENCE_GPU,
    ) -> float:
        """Seconds per optimizer step on ``gpus`` GPUs over ``nodes`` nodes."""
        fit = scaling_model(profile(model).scaling_app)
        batch = default_local_batch(model) if local_batch is None else local_batch
        return fit.iteration_s(batch, gpus, nodes, accumulation) / self.type_speed(model, gpu_type)

    def type_speed(self, model: str, gpu_type: str) -> float:
        """Speed on one GPU of ``gpu_type`` relative to a V100: as overridden, else Gavel's
        measurement of the model's job type; a type neither names is refused (SpecError)."""
        if gpu_type in self.type_speeds:
            return self.type_speeds[gpu_type]
        return _measured_type_speed(model, self._measured_type(gpu_type))

    def check_types(self, gpu_types: Iterable[str]) -> None:
        """Refuse at once (SpecError) a GPU type whose speed is neither measured nor given."""
        for gpu_type in sorted(set(gpu_types) - set(self.type_speeds)):
            self._measured_type(gpu_type)

    @staticmethod
    def _measured_type(gpu_type: str) -> str:
        measured = SAME_CHIP.get(gpu_type, gpu_type)
        if measured not in GAVEL_GPU_TYPES:
            raise SpecError(
                "gpu_speed",
                f"GPU type {gpu_type} has no measured speed (Gavel measured "
                f"{', '.join(GAVEL_GPU_TYPES)}): give its speed relative to a V100 in the "
                "cluster (e.g. 16x8:T4*0.5, or gpu_speed in a cluster YAML) or run without the "
                "performance model (--no-perf)",
            )
        return measured

    def memory_mib(self, model: str, local_batch: float | None = None) -> float | None:
        batch = default_local_batch(model) if local_batch is None else local_batch
        return profile(model).memory_mib(batch)

    def colocation(self, a: str, b: str) -> tuple[float, float] | None:
        """Slowdowns (xi_a, xi_b) >= 1 when a and b share one GPU: solo speed / shared speed.
        Blox's measurement when both models have one, else Gavel's for their job types. None
        when the pair was measured not to fit on one GPU. A measured speed-up is taken as 1."""
        if (a, b) not in self._colocation:
            self._colocation[(a, b)] = self._measured_colocation(a, b)
        return self._colocation[(a, b)]

    def _measured_colocation(self, a: str, b: str) -> tuple[float, float] | None:
        pa, pb = profile(a), profile(b)
        if pa.blox and pb.blox:
            speeds = blox_pairs().get((*pa.blox, *pb.blox))
            if speeds is not None:
                return max(1.0, 1 / speeds[0]), max(1.0, 1 / speeds[1])
        shared = gavel_pair(pa.gavel_type, pb.gavel_type)
        if shared is None:
            return None
        return (
            max(1.0, gavel_solo(pa.gavel_type) / shared[0]),
            max(1.0, gavel_solo(pb.gavel_type) / shared[1]),
        )
