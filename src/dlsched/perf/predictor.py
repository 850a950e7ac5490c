"""GENIE's prediction model (Chen et al., IEEE TPDS 31(1), 2020; its form is reconstructed:
docs/experiments/genie.md): a job's iteration time on any placement, fitted to a few profiled
iterations rather than looked up.

    t(b, n, m) = a + c * b + f(n) * (g_intra if m == 1 else g_inter),   f(n) = 2 (n - 1) / n

b per-GPU batch, n GPUs, m nodes. Compute is linear in the per-GPU batch (a fixed part a and c
per sample); the gradient all-reduce moves 2 (n - 1) / n gradient sizes (a ring) over the
slowest link the placement uses, which takes g_intra (within a node) or g_inter (across nodes)
per gradient size. The four coefficients are fitted per job by least squares (relative error,
none negative) on the profiling samples: 1 GPU, 2 GPUs on one node and 2 GPUs on two nodes, each
at the job's per-GPU batch and at half of it.

In the simulator the samples come from the workload model (the fitted Pollux measurements) with
a relative measurement noise; ``dlsched perf predict`` reports the form's error on Pollux's own
measurements, fitted to the placements of at most 2 GPUs and tested on all larger ones.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from .measurements import Point, pollux_points
from .scaling import nonnegative_fit

PROFILE_PLACEMENTS = ((1, 1), (2, 1), (2, 2))  # (GPUs, nodes) a profiling run measures
# Chosen: the relative standard deviation of an iteration time measured over a few iterations
# (a documented default of the simulated profiling, not tuned; 0 gives exact samples).
DEFAULT_PROFILE_NOISE = 0.05


def ring_factor(gpus: int) -> float:
    return 2.0 * (gpus - 1) / gpus


def features(local_batch: float, gpus: int, nodes: int) -> tuple[float, float, float, float]:
    f = ring_factor(gpus)
    return (1.0, local_batch, f if nodes == 1 else 0.0, f if nodes > 1 else 0.0)


@dataclass(frozen=True, slots=True)
class GenieFit:
    a: float  # s: fixed compute per iteration
    c: float  # s per sample of per-GPU batch
    g_intra: float  # s per gradient size all-reduced within a node
    g_inter: float  # s per gradient size all-reduced across nodes

    def iteration_s(self, local_batch: float, gpus: int, nodes: int) -> float:
        _, b, intra, inter = features(local_batch, gpus, nodes)
        return self.a + self.c * b + self.g_intra * intra + self.g_inter * inter


def fit(samples: list[tuple[float, int, int, float]]) -> GenieFit:
    """Least squares on ``(local_batch, gpus, nodes, seconds)`` samples."""
    rows = [features(b, n, m) for b, n, m, _ in samples]
    return GenieFit(*nonnegative_fit(rows, [t for *_, t in samples]))


def profile_samples(
    measure: Callable[[int, int, float], float | None],
    local_batch: float,
    noise: float,
    rng: random.Random,
) -> list[tuple[float, int, int, float]] | None:
    """The profiling run: ``measure(gpus, nodes, local_batch)`` at each profiled placement and
    at two per-GPU batches, each reading off by a relative Gaussian error of ``noise``; a
    placement not measured (a cluster without a node of two GPUs, or of one node) is left out.
    None when the job cannot be measured on one GPU."""
    samples = []
    for gpus, nodes in PROFILE_PLACEMENTS:
        for batch in (local_batch, max(1.0, local_batch / 2)):
            t = measure(gpus, nodes, batch)
            if t is None:
                if gpus == 1:
                    return None
                break
            samples.append((batch, gpus, nodes, t * max(0.05, rng.gauss(1.0, noise))))
    return samples


def measured_links(samples: list[tuple[float, int, int, float]]) -> set[bool]:
    """The links the samples of several GPUs crossed: False within a node, True across nodes
    (a fit predicts placements over the links it was fitted to only)."""
    return {nodes > 1 for _, gpus, nodes, _ in samples if gpus > 1}


@dataclass(frozen=True, slots=True)
class HeldOut:
    app: str
    profiled: int  # measured points with at most 2 GPUs: the fit's samples
    tested: int  # measured points with more: held out
    median: float  # relative error on the held-out points
    p90: float
    worst: float


def pollux_holdout(app: str) -> HeldOut:
    """Fit GENIE's form to Pollux's measured points of ``app`` on at most 2 GPUs (what a
    profiling run could measure) and test it on every point with more GPUs."""
    points: tuple[Point, ...] = pollux_points(app)
    small = [p for p in points if p.gpus <= 2]
    large = [p for p in points if p.gpus > 2]
    model = fit([(p.local_batch, p.gpus, p.nodes, p.step_s) for p in small])
    errors = sorted(
        abs(model.iteration_s(p.local_batch, p.gpus, p.nodes) - p.step_s) / p.step_s for p in large
    )
    return HeldOut(
        app,
        len(small),
        len(large),
        statistics.median(errors),
        errors[int(0.9 * (len(errors) - 1))],
        errors[-1],
    )
