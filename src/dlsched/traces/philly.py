"""Microsoft Philly jobs, as the Pollux artifact ships them (``philly_jobs.csv``):
``timestamp,duration,num_gpus,gpu_time,cluster``. Times become seconds after the first
submission; the virtual cluster (``cluster``) is the tenant. Rows are not sorted by time."""

from __future__ import annotations

from datetime import UTC, datetime

from ..errors import SpecError
from ..jobs import JobSpec
from .base import Trace, collect, earliest, number, read_rows

COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")


def _epoch_s(raw: str) -> float:
    try:
        return datetime.fromisoformat(raw.strip()).replace(tzinfo=UTC).timestamp()
    except ValueError:
        raise SpecError(
            "submit_time_s", f"'{raw}' in column 'timestamp' is not a date and time"
        ) from None


def load_philly(path, name: str = "philly", skip_invalid: bool = False) -> Trace:
    rows = list(read_rows(path, COLUMNS, name))
    t0 = earliest(rows, lambda row: _epoch_s(row["timestamp"] or ""))

    def convert(row_number: int, row: dict[str, str]) -> JobSpec:
        return JobSpec(
            job_id=f"{name}-{row_number}",
            submit_time_s=_epoch_s(row["timestamp"] or "") - t0,
            num_gpus=number(row, "num_gpus", integer=True),
            duration_s=number(row, "duration", "duration_s"),
            tenant=(row["cluster"] or "").strip() or "unknown",
        )

    return collect(Trace(name, []), rows, convert, skip_invalid)
