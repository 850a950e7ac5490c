"""Pollux's evaluation workloads (petuum/adaptdl ``simulator/workloads``):
``name,time,application,num_replicas,batch_size`` (time in seconds, batch_size global).

The workloads carry no run time. Each job's duration is taken from Pollux's own measurements
(``data/profiles/pollux/<app>/``): the number of steps the application needed at that batch
size (the ``iteration`` column of ``validation-<batch>.csv`` at its last epoch, a full measured
training run, as Pollux's simulator counts them) times the measured iteration time (``step_time``,
which includes synchronization) of the nearest
measured point in ``scalability.csv`` / ``placements.csv`` with the same number of replicas,
fewest nodes first, nearest per-GPU batch. No fitting happens here; the performance model does
that.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..errors import SpecError
from ..jobs import JobSpec
from ..perf.measurements import pollux_points, pollux_training_steps
from .base import Trace, collect, number, read_rows

COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")


def measured_iteration_s(app: str, replicas: int, batch_size: int) -> float:
    """The measured iteration time nearest to (replicas, global batch): same GPU count (else
    the nearest measured one), fewest nodes, nearest per-GPU batch on a log scale."""
    points = pollux_points(app)
    counts = {p.gpus for p in points}
    gpus = replicas if replicas in counts else min(counts, key=lambda c: abs(c - replicas))
    same = [p for p in points if p.gpus == gpus]
    fewest_nodes = min(p.nodes for p in same)
    local = batch_size / replicas
    best = min(
        (p for p in same if p.nodes == fewest_nodes),
        key=lambda p: abs(math.log(p.local_batch / local)),
    )
    return best.step_s


def load_pollux(path: str | Path, name: str = "pollux", skip_invalid: bool = False) -> Trace:
    def convert(row_number: int, row: dict[str, str]) -> JobSpec:
        app = (row["application"] or "").strip()
        replicas = number(row, "num_replicas", "num_gpus", integer=True)
        batch = number(row, "batch_size", integer=True)
        if replicas < 1 or batch < 1:
            raise SpecError("num_gpus" if replicas < 1 else "batch_size", "must be >= 1")
        steps = pollux_training_steps(app, batch)
        return JobSpec(
            job_id=f"{name}-{(row['name'] or '').strip() or row_number}",
            submit_time_s=number(row, "time", "submit_time_s"),
            num_gpus=replicas,
            duration_s=steps * measured_iteration_s(app, replicas, batch),
            model=app,
            batch_size=batch,
            iterations=round(steps),
        )

    return collect(Trace(name, []), read_rows(path, COLUMNS, name), convert, skip_invalid)
