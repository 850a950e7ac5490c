"""Microsoft Philly jobs, as the Pollux artifact ships them (``philly_jobs.csv``):
``timestamp,duration,num_gpus,gpu_time,cluster``. Times become seconds after the first
submission; the virtual cluster (``cluster``) is the tenant. Rows are not sorted by time."""

from __future__ import annotations

from pathlib import Path

from ..errors import SpecError, quoted
from ..jobs import JobSpec
from .base import Trace, collect, earliest, epoch_s, number, read_rows

COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")


def _epoch_s(raw: str) -> float:
    try:
        return epoch_s(raw.strip())
    except ValueError:
        raise SpecError(
            "submit_time_s", f"{quoted(raw)} in column 'timestamp' is not a date and time"
        ) from None


def load_philly(path: str | Path, name: str = "philly", skip_invalid: bool = False) -> Trace:
    # Two passes over the file (the first for the earliest time), its rows not kept: a list of
    # its 82,247 rows as dicts of strings raised a replay's peak memory by about 25 MiB (the
    # allocator keeps what they held); the second read costs 0.2-0.4 s.
    t0 = earliest(read_rows(path, COLUMNS, name), lambda row: _epoch_s(row["timestamp"] or ""))
    tenants: dict[str, str] = {}

    def convert(row_number: int, row: dict[str, str]) -> JobSpec:
        tenant = (row["cluster"] or "").strip() or "unknown"
        return JobSpec(
            job_id=f"{name}-{row_number}",
            submit_time_s=_epoch_s(row["timestamp"] or "") - t0,
            num_gpus=number(row, "num_gpus", integer=True),
            duration_s=number(row, "duration", "duration_s"),
            tenant=tenants.setdefault(tenant, tenant),  # one string per tenant, not per job
        )

    return collect(Trace(name, []), read_rows(path, COLUMNS, name), convert, skip_invalid)
