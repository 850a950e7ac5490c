"""A dlsched server's exported history (``dlsched export``; :mod:`dlsched.runtime.export`):
each job's spec and the speeds and pauses its real runs measured, so that the simulator replays
the server's own jobs as they ran (``dlsched simulate --trace export.csv`` or ``dlsched whatif``).
"""

from __future__ import annotations

from pathlib import Path

from ..cluster import MAX_GPUS
from ..errors import SpecError, quoted
from ..jobs import MAX_TIME_S, JobSpec, in_range
from .base import Trace, collect, number, read_rows

REQUIRED = (
    "job_id",
    "tenant",
    "submit_s",
    "gpus",
    "batch_size",
    "iterations",
    "iteration_s",
    "model",
    "startup_s",
    "restart_s",
)
PROFILE = ("fixed_mib", "per_sample_mib", "c0_s", "c1_s", "local_batch")
OUTCOME = ("start_s", "end_s", "jct_s")
MAX_PLACEMENTS = 64  # entries in one job's placements cell (the runtime measures 6)


def parse_placements(cell: str) -> list[dict]:
    """``gpus/nodes/batch/iteration_s`` entries separated by ``;`` (GENIE's profiled
    placements, :func:`dlsched.runtime.export.format_placements`)."""
    entries = [e for e in cell.split(";") if e.strip()]
    if len(entries) > MAX_PLACEMENTS:
        raise SpecError("placements", f"at most {MAX_PLACEMENTS} entries, got {len(entries)}")
    placements = []
    for entry in entries:
        parts = entry.strip().split("/")
        try:
            gpus, nodes, batch, iteration_s = int(parts[0]), int(parts[1]), *map(float, parts[2:])
        except (ValueError, IndexError):
            parts = []
        if len(parts) != 4 or not (1 <= gpus <= MAX_GPUS and 1 <= nodes <= gpus):
            raise SpecError(
                "placements",
                f"{quoted(entry)}: expected gpus/nodes/batch/iteration_s, e.g. 2/1/8/0.05, "
                f"with 1 <= nodes <= gpus <= {MAX_GPUS:,}",
            )
        if not (0 < batch <= MAX_TIME_S and 0 < iteration_s <= MAX_TIME_S):
            raise SpecError(
                "placements",
                f"{quoted(entry)}: batch and iteration_s must be > 0 and <= {MAX_TIME_S:g}",
            )
        placements.append(
            {"gpus": gpus, "nodes": nodes, "batch": batch, "iteration_s": iteration_s}
        )
    return placements


def _optional(row: dict[str, str], column: str) -> float | None:
    return None if not (row.get(column) or "").strip() else number(row, column)


def _optional_whole(row: dict[str, str], column: str) -> int | None:
    return None if not (row.get(column) or "").strip() else number(row, column, integer=True)


# the measured columns' ranges: (least, above it only, most). Every bound above is MAX_TIME_S,
# far past any memory (MiB), batch, time or count measured: it keeps what is derived from them
# finite. A profile's fixed memory is a fit's intercept: it may be below 0.
MEASURED = {
    "fixed_mib": (-MAX_TIME_S, False, MAX_TIME_S),
    "per_sample_mib": (0.0, False, MAX_TIME_S),
    "c0_s": (0.0, True, MAX_TIME_S),
    "c1_s": (0.0, False, MAX_TIME_S),
    "local_batch": (0.0, True, MAX_TIME_S),
    "slowdown": (0.0, True, MAX_TIME_S),
    "profile_s": (0.0, False, MAX_TIME_S),
    "preemptions": (0.0, False, MAX_TIME_S),
}


def _measured(row: dict[str, str], column: str, integer: bool = False) -> float | None:
    """An optional measured column, refused (naming it) outside its range."""
    value = _optional_whole(row, column) if integer else _optional(row, column)
    least, above, most = MEASURED[column]
    if value is not None and not in_range(value, least, most, above):
        low = f"> {least:g}" if above else f">= {least:g}"
        raise SpecError(column, f"must be {low} and <= {most:g}, got {value!r}")
    return value


def load_history(path: str | Path, name: str = "history", skip_invalid: bool = False) -> Trace:
    replay: dict[str, dict] = {}  # job -> what its run measured
    trace = Trace(name, [], replay=replay)

    def convert(row_number: int, row: dict[str, str]) -> JobSpec:
        job_id = (row["job_id"] or "").strip()
        if not job_id:
            raise SpecError("job_id", "empty")
        if job_id in replay:
            raise SpecError("job_id", f"'{job_id}' appears twice")
        iterations = number(row, "iterations", integer=True)
        iteration_s = number(row, "iteration_s")
        if not iteration_s > 0:
            raise SpecError("iteration_s", f"must be > 0, got {iteration_s!r}")
        spec = JobSpec(
            job_id=job_id,
            tenant=(row["tenant"] or "").strip() or "default",
            submit_time_s=number(row, "submit_s", "submit_time_s"),
            num_gpus=number(row, "gpus", "num_gpus", integer=True),
            duration_s=iterations * iteration_s,
            iterations=iterations,
            batch_size=number(row, "batch_size", integer=True),
            model=(row["model"] or "").strip() or None,
            priority=_optional_whole(row, "priority") or 0,
            min_gpus=_optional_whole(row, "min_gpus"),
            max_gpus=_optional_whole(row, "max_gpus"),
            deadline_s=_optional(row, "deadline_s"),
            qos_class="given" if _optional(row, "deadline_s") is not None else None,
            startup_s=number(row, "startup_s"),
            restart_s=number(row, "restart_s"),
            estimate_s=_optional(row, "estimate_s"),
        )
        measured: dict = {k: _measured(row, k) for k in PROFILE}
        profile = measured if all(v is not None for v in measured.values()) else None
        if profile is not None and (placements := (row.get("placements") or "").strip()):
            profile["placements"] = parse_placements(placements)
        replay[job_id] = {
            "profile": profile,
            "slowdown": _measured(row, "slowdown"),
            "profile_s": _measured(row, "profile_s"),
            "status": (row.get("status") or "").strip(),
            "preemptions": _measured(row, "preemptions", integer=True),
            **{k: _optional(row, k) for k in OUTCOME},
        }
        return spec

    return collect(trace, read_rows(path, REQUIRED, name), convert, skip_invalid)
