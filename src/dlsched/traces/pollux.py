"""Pollux's evaluation workloads (petuum/adaptdl ``simulator/workloads``):
``name,time,application,num_replicas,batch_size`` (time in seconds, batch_size global).

The workloads carry no run time. Each job's duration is taken from Pollux's own measurements
(``data/profiles/pollux/<app>/``): the number of steps the application needed at that batch
size (the last ``progress`` of ``validation-<batch>.csv``, a full measured training run) times
the measured iteration time (``step_time``, which includes synchronization) of the nearest
measured point in ``scalability.csv`` / ``placements.csv`` with the same number of replicas,
fewest nodes first, nearest per-GPU batch. No fitting happens here; the performance model does
that.
"""

from __future__ import annotations

import csv
import math
from functools import lru_cache
from importlib import resources

from ..errors import SpecError
from ..jobs import JobSpec
from .base import Trace, collect, number, read_rows

COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")


def _profile_dir(app: str):
    root = resources.files("dlsched") / "data" / "profiles" / "pollux"
    d = root / app
    if not d.is_dir():
        known = sorted(p.name for p in root.iterdir() if p.is_dir())
        raise SpecError("application", f"no Pollux profile for '{app}' (have {', '.join(known)})")
    return d


@lru_cache(maxsize=None)
def measured_steps(app: str, batch_size: int) -> float:
    path = _profile_dir(app) / f"validation-{batch_size}.csv"
    if not path.is_file():
        raise SpecError("batch_size", f"Pollux measured no training run of '{app}' at batch {batch_size}")
    with path.open() as f:
        rows = list(csv.DictReader(f))
    return float(rows[-1]["progress"])


@lru_cache(maxsize=None)
def measured_points(app: str) -> tuple[tuple[int, int, float, float], ...]:
    """(nodes, replicas, local batch, step time s) of every measured placement."""
    d = _profile_dir(app)
    points = []
    with (d / "scalability.csv").open() as f:
        for r in csv.DictReader(f):
            points.append((int(r["num_nodes"]), int(r["num_replicas"]), float(r["local_bsz"]), float(r["step_time"])))
    with (d / "placements.csv").open() as f:
        for r in csv.DictReader(f):
            digits = [int(c) for c in r["placement"]]
            points.append((len(digits), sum(digits), float(r["local_bsz"]), float(r["step_time"])))
    return tuple(points)


def measured_iteration_s(app: str, replicas: int, batch_size: int) -> float:
    points = measured_points(app)
    same = [p for p in points if p[1] == replicas] or \
        [p for p in points if p[1] == min({q[1] for q in points}, key=lambda r: abs(r - replicas))]
    fewest_nodes = min(p[0] for p in same)
    local = batch_size / replicas
    best = min((p for p in same if p[0] == fewest_nodes), key=lambda p: abs(math.log(p[2] / local)))
    return best[3]


def load_pollux(path, name: str = "pollux", skip_invalid: bool = False) -> Trace:
    def convert(row_number: int, row: dict[str, str]) -> JobSpec:
        app = (row["application"] or "").strip()
        replicas = number(row, "num_replicas", "num_gpus", integer=True)
        batch = number(row, "batch_size", integer=True)
        if replicas < 1 or batch < 1:
            raise SpecError("num_gpus" if replicas < 1 else "batch_size", "must be >= 1")
        steps = measured_steps(app, batch)
        return JobSpec(job_id=f"{name}-{(row['name'] or '').strip() or row_number}",
                       submit_time_s=number(row, "time", "submit_time_s"), num_gpus=replicas,
                       duration_s=steps * measured_iteration_s(app, replicas, batch),
                       model=app, batch_size=batch, iterations=int(steps))

    return collect(Trace(name, []), read_rows(path, COLUMNS, name), convert, skip_invalid)
