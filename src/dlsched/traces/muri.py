"""The Muri / Tiresias trace schema (Rivendile/Muri ``simulator/trace-data``), also read by the
SJF-BSBF authors' testbed: ``job_id,num_gpu,submit_time,iterations,model_name,batch_size,
duration,...,priority`` with times in milliseconds. ``duration`` is the solo run time.
``batch_size`` is per GPU (the SJF-BSBF testbed lists the same per-GPU batches with their
memory); the job spec's batch is global, so it is multiplied by the GPU count."""

from __future__ import annotations

from pathlib import Path

from ..jobs import JobSpec
from .base import Trace, collect, number, read_rows

COLUMNS = ("job_id", "num_gpu", "submit_time", "iterations", "model_name", "batch_size", "duration")
MS = 1e-3


def load_muri(path: str | Path, name: str = "muri", skip_invalid: bool = False) -> Trace:
    def convert(row_number: int, row: dict[str, str]) -> JobSpec:
        priority = row.get("priority")
        return JobSpec(
            job_id=f"{name}-{(row['job_id'] or '').strip() or row_number}",
            submit_time_s=number(row, "submit_time", "submit_time_s", scale=MS),
            num_gpus=number(row, "num_gpu", "num_gpus", integer=True),
            duration_s=number(row, "duration", "duration_s", scale=MS),
            iterations=number(row, "iterations", integer=True),
            model=(row["model_name"] or "").strip() or None,
            batch_size=number(row, "batch_size", integer=True)
            * number(row, "num_gpu", integer=True),
            priority=number(row, "priority", integer=True) if priority not in (None, "") else 0,
        )

    return collect(Trace(name, []), read_rows(path, COLUMNS, name), convert, skip_invalid)
