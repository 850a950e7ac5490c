"""Measured points shipped with the package.

Pollux (petuum/adaptdl osdi21-artifact, ``simulator/traces/<app>/``, Apache-2.0; Qiao et al.,
OSDI'21): per application, the iteration time (``step_time``, synchronization included) and the
synchronization time at each measured placement and per-GPU batch size. ``placements.csv``
names a placement by its GPUs per node ("22" = 2 nodes x 2 GPUs); ``scalability.csv`` gives
node and replica counts.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from ..errors import SpecError


@dataclass(frozen=True, slots=True)
class Point:
    app: str
    nodes: int
    gpus: int
    local_batch: float
    step_s: float
    sync_s: float
    source: str


def _pollux_root():
    return resources.files("dlsched") / "data" / "profiles" / "pollux"


def pollux_apps() -> list[str]:
    return sorted(p.name for p in _pollux_root().iterdir() if p.is_dir())


@lru_cache(maxsize=None)
def pollux_points(app: str) -> tuple[Point, ...]:
    d = _pollux_root() / app
    if not d.is_dir():
        raise SpecError("model", f"no Pollux measurements for '{app}' (have {', '.join(pollux_apps())})")
    points = []
    with (d / "placements.csv").open() as f:
        for r in csv.DictReader(f):
            per_node = [int(c) for c in r["placement"]]
            points.append(Point(app, len(per_node), sum(per_node), float(r["local_bsz"]),
                                float(r["step_time"]), float(r["sync_time"]), f"pollux/{app}/placements.csv"))
    with (d / "scalability.csv").open() as f:
        for r in csv.DictReader(f):
            points.append(Point(app, int(r["num_nodes"]), int(r["num_replicas"]), float(r["local_bsz"]),
                                float(r["step_time"]), float(r["sync_time"]), f"pollux/{app}/scalability.csv"))
    return tuple(points)


@lru_cache(maxsize=None)
def pollux_training_steps(app: str, batch_size: int) -> float:
    """Steps a full measured training run of ``app`` took at global batch ``batch_size``: the
    last ``progress`` of ``validation-<batch>.csv``."""
    path = _pollux_root() / app / f"validation-{batch_size}.csv"
    if not (_pollux_root() / app).is_dir():
        raise SpecError("application", f"no Pollux profile for '{app}' (have {', '.join(pollux_apps())})")
    if not path.is_file():
        raise SpecError("batch_size", f"Pollux measured no training run of '{app}' at batch {batch_size}")
    with path.open() as f:
        rows = list(csv.DictReader(f))
    return float(rows[-1]["progress"])
