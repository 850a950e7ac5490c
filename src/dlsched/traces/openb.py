"""Alibaba GPU cluster trace 2023 (``openb_pod_list_*.csv``, the FGD ATC'23 trace): pods with a
fractional GPU request (``gpu_milli``, thousandths of one GPU) and optional GPU model
constraints (``gpu_spec``, '|'-separated). Times are seconds. A pod's run time is
``deletion_time - scheduled_time``; pods that ask for no GPU, or that the trace never
scheduled (no run time), are dropped and counted."""

from __future__ import annotations

from pathlib import Path

from ..jobs import JobSpec
from .base import Trace, collect, number, read_rows

COLUMNS = (
    "name",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)


def load_openb(path: str | Path, name: str = "openb", skip_invalid: bool = False) -> Trace:
    trace = Trace(name, [])

    def convert(row_number: int, row: dict[str, str]) -> JobSpec | None:
        gpus = number(row, "num_gpu", "num_gpus", integer=True)
        if gpus == 0:
            trace.drop("no GPU requested", f"{name}: row {row_number}: num_gpu is 0 (a CPU pod)")
            return None
        if not (row["scheduled_time"] or "").strip():
            trace.drop(
                "never scheduled", f"{name}: row {row_number}: no scheduled_time, so no run time"
            )
            return None
        created = number(row, "creation_time", "submit_time_s")
        started = number(row, "scheduled_time")
        ended = number(row, "deletion_time", "duration_s")
        milli = number(row, "gpu_milli", integer=True)
        spec = (row["gpu_spec"] or "").strip()
        return JobSpec(
            job_id=(row["name"] or "").strip() or f"{name}-{row_number}",
            submit_time_s=created,
            num_gpus=gpus,
            duration_s=ended - started,
            tenant=(row["qos"] or "").strip() or "default",
            gpu_milli=milli if gpus == 1 else 1000,
            gpu_types=tuple(spec.split("|")) if spec else None,
        )

    return collect(trace, read_rows(path, COLUMNS, name), convert, skip_invalid)
