"""How well the performance model matches the measurements: errors per point and per model,
held-out errors, an external check against Gavel's multi-GPU points, and the plot of measured
vs modelled scaling curves."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from .measurements import Point, gavel_job_types, gavel_throughputs, pollux_points
from .scaling import fit_scaling, holdout_split, relative_errors, scaling_model
from .zoo import ZOO


@dataclass(frozen=True, slots=True)
class ModelErrors:
    app: str
    points: int
    median: float
    worst: float
    held_out_median: float
    held_out_worst: float


def pollux_errors(app: str) -> ModelErrors:
    points = pollux_points(app)
    errors = relative_errors(scaling_model(app), points)
    train, test = holdout_split(points)
    held = relative_errors(fit_scaling(app, train), test)
    return ModelErrors(
        app, len(points), statistics.median(errors), max(errors), statistics.median(held), max(held)
    )


def gavel_scaling_check() -> list[tuple[str, str, int, float, float]]:
    """(zoo model, Gavel job type, GPUs, measured speed-up, modelled speed-up) for Gavel's
    consolidated multi-GPU V100 points of the job types the zoo maps to. Gavel's step rates of a
    distributed job grow with its workers, so they are read as throughput (samples/s) speed-ups
    and compared with the model's. These points were not used in any fit; several are
    superlinear (ResNet-18 batch 128: x9.0 on 8 GPUs), which the model never is."""
    table = gavel_throughputs()["v100"]
    rows = []
    for model, prof in ZOO.items():
        if prof.gavel_type not in gavel_job_types():
            continue
        fit = scaling_model(prof.scaling_app)
        one = table[str((prof.gavel_type, 1))]["null"]
        for gpus in (2, 4, 8):
            entry = table.get(str((prof.gavel_type, gpus)))
            if entry is None:
                continue
            measured = entry["null"] / one
            batch = prof.default_batch or statistics.median(
                p.local_batch for p in pollux_points(prof.scaling_app)
            )
            modelled = gpus * fit.iteration_s(batch) / fit.iteration_s(batch, gpus, 1)
            rows.append((model, prof.gavel_type, gpus, measured, modelled))
    return rows


def consolidated_curve(app: str) -> tuple[float, list[tuple[int, int, float]]]:
    """The most measured per-GPU batch of ``app`` and its measured (GPUs, nodes, samples/s) on
    the fewest nodes measured for each GPU count."""
    points = pollux_points(app)
    counts: dict[float, int] = {}
    for p in points:
        counts[p.local_batch] = counts.get(p.local_batch, 0) + 1
    batch = max(counts, key=lambda b: (counts[b], -b))
    best: dict[int, Point] = {}
    for p in points:
        if p.local_batch == batch and (p.gpus not in best or p.nodes < best[p.gpus].nodes):
            best[p.gpus] = p
    return batch, [(g, best[g].nodes, g * batch / best[g].step_s) for g in sorted(best)]
