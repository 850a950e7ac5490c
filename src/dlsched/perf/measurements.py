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
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

from ..errors import SpecError, quoted


@dataclass(frozen=True, slots=True)
class Point:
    app: str
    nodes: int
    gpus: int
    local_batch: float
    step_s: float
    sync_s: float
    source: str


def _pollux_root() -> Traversable:
    return resources.files("dlsched") / "data" / "profiles" / "pollux"


@cache
def _measured_apps() -> tuple[str, ...]:
    return tuple(sorted(p.name for p in _pollux_root().iterdir() if p.is_dir()))


def pollux_apps() -> list[str]:
    return list(_measured_apps())


def _app_dir(app: str, field: str) -> Traversable:
    """The folder of an application Pollux measured; any other name (an empty one, a path, one
    too long for a file name) is refused naming ``field``, before it is used as a path."""
    if app not in _measured_apps():
        raise SpecError(
            field, f"no Pollux measurements for {quoted(app)} (have {', '.join(pollux_apps())})"
        )
    return _pollux_root() / app


@cache
def pollux_points(app: str) -> tuple[Point, ...]:
    d = _app_dir(app, "model")
    points = []
    with (d / "placements.csv").open() as f:
        for r in csv.DictReader(f):
            per_node = [int(c) for c in r["placement"]]
            points.append(
                Point(
                    app,
                    len(per_node),
                    sum(per_node),
                    float(r["local_bsz"]),
                    float(r["step_time"]),
                    float(r["sync_time"]),
                    f"pollux/{app}/placements.csv",
                )
            )
    with (d / "scalability.csv").open() as f:
        for r in csv.DictReader(f):
            points.append(
                Point(
                    app,
                    int(r["num_nodes"]),
                    int(r["num_replicas"]),
                    float(r["local_bsz"]),
                    float(r["step_time"]),
                    float(r["sync_time"]),
                    f"pollux/{app}/scalability.csv",
                )
            )
    return tuple(points)


@cache
def pollux_training_steps(app: str, batch_size: int) -> float:
    """Optimizer steps a full measured training run of ``app`` took at global batch
    ``batch_size``, as Pollux's simulator counts them (petuum/adaptdl, simulator/applications.py,
    ``get_iteration`` at ``get_completion_epoch``): the ``iteration`` column (cumulative steps
    after each epoch) of ``validation-<batch>.csv`` at its last epoch (each file holds exactly
    the application's ``max_epochs`` there), linearly interpolated between the measured batch
    sizes around ``batch_size``. (The ``progress`` column is not a step count.)"""
    root = _app_dir(app, "application")
    measured = sorted(
        int(p.name.removesuffix(".csv").split("-")[-1])
        for p in root.iterdir()
        if p.name.startswith("validation-") and p.name.endswith(".csv")
    )
    if not measured[0] <= batch_size <= measured[-1]:
        raise SpecError(
            "batch_size",
            f"Pollux measured '{app}' at batches {measured[0]}..{measured[-1]}, not {batch_size}",
        )
    lower = max(b for b in measured if b <= batch_size)
    upper = min(b for b in measured if b >= batch_size)

    def last_iteration(batch: int) -> float:
        with (root / f"validation-{batch}.csv").open() as f:
            return float(list(csv.DictReader(f))[-1]["iteration"])

    if lower == upper:
        return last_iteration(lower)
    return (
        (batch_size - lower) * last_iteration(upper) + (upper - batch_size) * last_iteration(lower)
    ) / (upper - lower)


# -- Gavel (stanford-futuredata/gavel c4fa400, scheduler/simulation_throughputs.json, MIT;
#    Narayanan et al., OSDI'20): steps/s per job type and GPU type, alone (key "null") and
#    co-located on one GPU with another job type ([own, partner] steps/s; [0, 0] = did not fit).

GAVEL_GPU_TYPES = {"V100": "v100", "P100": "p100", "K80": "k80"}


@cache
def gavel_throughputs() -> dict:
    import gzip
    import json

    path = resources.files("dlsched") / "data" / "profiles" / "gavel_simulation_throughputs.json.gz"
    with path.open("rb") as raw, gzip.open(raw, "rt") as f:
        return json.load(f)


def gavel_key(job_type: str) -> str:
    return str((job_type, 1))


def gavel_solo(job_type: str, gpu_type: str = "V100") -> float:
    """Measured steps/s of ``job_type`` alone on one GPU of ``gpu_type``."""
    table = gavel_throughputs()[GAVEL_GPU_TYPES[gpu_type]]
    return table[gavel_key(job_type)]["null"]


def gavel_pair(a: str, b: str) -> tuple[float, float] | None:
    """Measured steps/s of a and b sharing one V100, or None when the pair did not fit."""
    entry = gavel_throughputs()["v100"][gavel_key(a)].get(gavel_key(b))
    if entry is None or entry[0] <= 0 or entry[1] <= 0:
        return None
    return entry[0], entry[1]


def gavel_job_types() -> list[str]:
    return sorted(eval_key(k)[0] for k in gavel_throughputs()["v100"] if eval_key(k)[1] == 1)


def eval_key(key: str) -> tuple[str, int]:
    name, _, scale = key.strip("()").rpartition(", ")
    return name.strip("'\""), int(scale)


# -- Blox (msr-fiddle/blox cc1f862, blox_exp/colocate_info/norm_speed.csv, MIT; Agarwal et al.,
#    EuroSys'24): normalized speed of each job of a pair sharing GPUs (1.0 = alone).


@cache
def blox_pairs() -> dict[tuple[str, str, str, str], tuple[float, float]]:
    """{(model1, batch1, model2, batch2): (speed1, speed2)} for single-GPU, non-pipelined pairs."""
    path = resources.files("dlsched") / "data" / "profiles" / "blox_colocate_norm_speed.csv"
    out = {}
    with path.open() as f:
        for r in csv.DictReader(f):
            if r["model2"] == "Empty" or r["pipeline_strategy"] != "NA":
                continue
            if r["gpu_num1"] != "1" or r["gpu_num2"] != "1":
                continue
            out[(r["model1"], r["batch_size1"], r["model2"], r["batch_size2"])] = (
                float(r["speed1"]),
                float(r["speed2"]),
            )
    return out
