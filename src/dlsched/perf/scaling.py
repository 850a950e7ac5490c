"""Iteration time as a function of per-GPU batch, GPU count and node count.

    t_iter(b, n, m) = c0 + c1 * b + t_sync(n, m)
    t_sync(1, 1) = 0
    t_sync(n, 1) = s0 + s1 * (n - 2)      n > 1 GPUs on one node
    t_sync(n, m) = r0 + r1 * (n - 2)      spread over m > 1 nodes

Compute time linear in the per-GPU batch; synchronization, the form Pollux uses (Qiao et al.,
OSDI'21, section 4.1: a constant plus a term linear in the replicas, fitted separately for one
node and several). The six coefficients are fitted per application by least squares on the
measured iteration times (``dlsched.perf.measurements``), weighted by 1/t so that the relative
error is minimized; a coefficient that would come out negative is dropped (held at 0) and the
rest refitted, so time never falls as batch or GPUs grow. With gradient accumulation over k
sub-batches an optimizer step costs k compute passes at the sub-batch and one synchronization.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from itertools import repeat
from operator import mul

from ..errors import SpecError
from .measurements import Point, pollux_apps, pollux_points

COEFFICIENTS = ("c0", "c1", "s0", "s1", "r0", "r1")


@dataclass(frozen=True, slots=True)
class ScalingFit:
    app: str
    c0: float  # s: fixed compute per iteration
    c1: float  # s per sample of per-GPU batch
    s0: float  # s: synchronization on one node, 2 GPUs
    s1: float  # s per GPU beyond 2, on one node
    r0: float  # s: synchronization across nodes, 2 GPUs
    r1: float  # s per GPU beyond 2, across nodes
    points: int
    source: str

    def compute_s(self, local_batch: float) -> float:
        return self.c0 + self.c1 * local_batch

    def sync_s(self, gpus: int, nodes: int = 1) -> float:
        if gpus <= 1:
            return 0.0
        if nodes <= 1:
            return self.s0 + self.s1 * (gpus - 2)
        return self.r0 + self.r1 * (gpus - 2)

    def iteration_s(
        self, local_batch: float, gpus: int = 1, nodes: int = 1, accumulation: int = 1
    ) -> float:
        """Time of one optimizer step: ``accumulation`` passes at ``local_batch`` each, then
        one synchronization."""
        if gpus < 1 or nodes < 1 or nodes > gpus or accumulation < 1 or local_batch <= 0:
            raise SpecError(
                "placement",
                f"invalid gpus={gpus}, nodes={nodes}, "
                f"accumulation={accumulation}, local_batch={local_batch}",
            )
        return accumulation * self.compute_s(local_batch) + self.sync_s(gpus, nodes)

    def throughput(self, local_batch: float, gpus: int = 1, nodes: int = 1) -> float:
        """Samples per second."""
        return gpus * local_batch / self.iteration_s(local_batch, gpus, nodes)


def _features(points: Sequence[Point]) -> list[tuple[float, ...]]:
    rows: list[tuple[float, ...]] = []
    for p in points:
        local = 1.0 if p.gpus > 1 and p.nodes == 1 else 0.0
        remote = 1.0 if p.nodes > 1 else 0.0
        rows.append(
            (1.0, p.local_batch, local, local * (p.gpus - 2), remote, remote * (p.gpus - 2))
        )
    return rows


def nonnegative_fit(rows: Sequence[Sequence[float]], y: Sequence[float]) -> list[float]:
    """Least squares of ``rows @ coef = y`` weighted by 1/y (relative error), every coefficient
    >= 0: one that comes out negative is held at 0 and the rest refitted."""
    w = [1.0 / t for t in y]
    weighted = [list(map(mul, row, repeat(wi))) for row, wi in zip(rows, w)]
    target = list(map(mul, y, w))
    k = len(rows[0])
    active = list(range(k))
    while True:
        kept = weighted if len(active) == k else [[row[j] for j in active] for row in weighted]
        coef = least_squares(kept, target)
        negative = [active[i] for i, c in enumerate(coef) if c < 0]
        if not negative:
            break
        active.remove(negative[0])
    full = [0.0] * k
    for j, c in zip(active, coef):
        full[j] = c
    return full


def least_squares(rows: Sequence[Sequence[float]], y: Sequence[float]) -> list[float]:
    """The x that minimizes |rows @ x - y|, by Householder QR in plain Python: the systems are
    small (a GENIE job's 6 samples, at most 720 points of an application) and a simulation then
    needs no numpy (13 MiB of GENIE's peak memory on full Philly). A column that adds nothing to
    the earlier ones (all zero, or their combination up to rounding) gets 0, as the minimum-norm
    solution gives an all-zero column. Kept by columns, with ``b`` as the last, each sum a loop
    from 0.0 as ``sum`` adds: GENIE solves about 98,000 systems of 6 x 4 in a Philly replay, and
    such loops take 11.6 us a system where ``map`` and ``sum`` over slices took 21 us, with the
    same operations in the same order (the same bits)."""
    k = len(rows[0])
    a = [list(map(float, column)) for column in zip(*rows)]  # a[j]: column j
    b = list(map(float, y))
    a.append(b)
    m = len(b)
    pivot_row: list[int | None] = []
    r = 0
    for j in range(k):
        column = a[j]
        s = 0.0
        for c in column:
            s += c**2
        original = math.sqrt(s)
        if r:  # (else the norm below the pivot is that of the whole column)
            s = 0.0
            for i in range(r, m):
                s += column[i] ** 2
        norm = math.sqrt(s)
        if r >= m or norm <= 1e-12 * original:  # also an all-zero column
            pivot_row.append(None)
            continue
        alpha = -norm if column[r] > 0 else norm
        v = column[r:]  # the reflector's entries r..m-1
        v[0] -= alpha
        vv = 0.0
        for e in v:
            vv += e * e
        for target in a[j:]:  # this column, those after it, and b
            s, i = 0.0, r
            for e in v:
                s += e * target[i]
                i += 1
            f = 2.0 * s / vv
            i = r
            for e in v:
                target[i] -= f * e
                i += 1
        pivot_row.append(r)
        r += 1
    x = [0.0] * k
    for j in reversed(range(k)):
        row = pivot_row[j]
        if row is not None:
            s = 0.0
            for jj in range(j + 1, k):
                s += a[jj][row] * x[jj]
            x[j] = (b[row] - s) / a[j][row]
    return x


def fit_scaling(app: str, points: Sequence[Point]) -> ScalingFit:
    if len(points) < len(COEFFICIENTS):
        raise SpecError(
            "points", f"{app}: {len(points)} points cannot fit {len(COEFFICIENTS)} coefficients"
        )
    coef = nonnegative_fit(_features(points), [p.step_s for p in points])
    full = dict(zip(COEFFICIENTS, coef))
    sources = sorted({p.source for p in points})
    return ScalingFit(app=app, points=len(points), source=", ".join(sources), **full)


@cache
def scaling_model(app: str) -> ScalingFit:
    """The fit to every measured point of ``app``: as stored in the package (the same fit, made
    once: :func:`write_fits` writes it, tests/test_perf.py checks it), else fitted now."""
    stored = _stored_fits().get(app)
    return ScalingFit(**stored) if stored else fit_scaling(app, pollux_points(app))


FITS_FILE = "scaling_fits.json"  # in dlsched/data/profiles/pollux


@cache
def _stored_fits() -> dict[str, dict]:
    path = resources.files("dlsched") / "data" / "profiles" / "pollux" / FITS_FILE
    return json.loads(path.read_text())["fits"] if path.is_file() else {}


def fits_document() -> dict:
    """What FITS_FILE holds: every measured application's fit, made now."""
    return {
        "about": "fit_scaling of every application's measured points (dlsched.perf.scaling); "
        "written by dlsched.perf.scaling.write_fits(), checked against a fresh fit by the tests",
        "fits": {app: asdict(fit_scaling(app, pollux_points(app))) for app in pollux_apps()},
    }


def relative_errors(fit: ScalingFit, points: Sequence[Point]) -> list[float]:
    return [
        abs(fit.iteration_s(p.local_batch, p.gpus, p.nodes) - p.step_s) / p.step_s for p in points
    ]


def holdout_split(points: Sequence[Point]) -> tuple[list[Point], list[Point]]:
    """Every third measured point is held out of the fit (a fixed, documented split)."""
    return (
        [p for i, p in enumerate(points) if i % 3],
        [p for i, p in enumerate(points) if i % 3 == 0],
    )


def write_fits() -> None:
    """Store every fit in the package (run after the measurements change; the tests say when)."""
    target = resources.files("dlsched") / "data" / "profiles" / "pollux" / FITS_FILE
    with resources.as_file(target) as path:
        path.write_text(json.dumps(fits_document(), indent=1, sort_keys=True) + "\n")
