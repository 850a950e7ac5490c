"""Any CSV trace, with the columns mapped by the user.

A mapping is ``FIELD=COLUMN[:UNIT]`` pairs separated by commas, e.g.
``submit=start_ts:datetime,duration=runtime:min,gpus=n_gpu,tenant=user``. Fields: submit and
duration and gpus (required), id, tenant, model, batch, priority, deadline, class (the
deadline's QoS class, as ``--deadlines`` names them; none: ``given``). Units for times:
s (default), ms, us, min, h; ``datetime`` for ISO dates (submit, and deadline beside a
submit that is one; at their offset when they give one, else UTC; made relative to the first
submission).

A CSV whose columns carry dlsched's own names (a job spec's fields, or the ``jobs.csv`` a
simulation wrote) needs no mapping: the ``dlsched`` format (:func:`load_own`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import SpecError, quoted
from ..jobs import JobSpec
from .base import Trace, collect, earliest, epoch_s, number, open_text, read_rows, readable

FIELDS = {
    "submit": "submit_time_s",
    "duration": "duration_s",
    "gpus": "num_gpus",
    "id": "job_id",
    "tenant": "tenant",
    "model": "model",
    "batch": "batch_size",
    "priority": "priority",
    "deadline": "deadline_s",
    "class": "qos_class",  # the deadline's QoS class (dlsched.qos); none: "given"
}
REQUIRED = ("submit", "duration", "gpus")
# dlsched's own column names for each field, in seconds: JobSpec's, then jobs.csv's where other
OWN_COLUMNS = {
    "id": ("job_id",),
    "submit": ("submit_time_s", "submit_s"),
    "duration": ("duration_s",),
    "gpus": ("num_gpus",),
    "tenant": ("tenant",),
    "model": ("model",),
    "batch": ("batch_size",),
    "priority": ("priority",),
    "deadline": ("deadline_s",),
    "class": ("qos_class",),
}
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "min": 60.0, "h": 3600.0}
TIME_FIELDS = ("submit", "duration", "deadline")
DATETIME_FIELDS = ("submit", "deadline")  # instants (a duration is not one)


def parse_mapping(text: str) -> dict[str, tuple[str, str | None]]:
    """``FIELD=COLUMN[:UNIT],...`` -> {field: (column, unit)}; SpecError on anything unknown."""
    mapping: dict[str, tuple[str, str | None]] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if "=" not in part:
            raise SpecError("mapping", f"'{part}' is not FIELD=COLUMN[:UNIT]")
        key, target = (s.strip() for s in part.split("=", 1))
        if key not in FIELDS:
            raise SpecError("mapping", f"unknown field '{key}': use {', '.join(FIELDS)}")
        if key in mapping:  # (the last one silently won)
            raise SpecError("mapping", f"field '{key}' is mapped twice")
        column, _, given_unit = target.partition(":")
        if not column:
            raise SpecError("mapping", f"field '{key}' maps to an empty column name")
        unit = given_unit or None
        if unit is not None:
            allowed = list(TIME_UNITS) + (["datetime"] if key in DATETIME_FIELDS else [])
            if key not in TIME_FIELDS or unit not in allowed:
                raise SpecError(
                    "mapping",
                    f"unit '{unit}' does not apply to field '{key}'"
                    + (f" (use {', '.join(allowed)})" if key in TIME_FIELDS else ""),
                )
        mapping[key] = (column, unit)
    missing = [f for f in REQUIRED if f not in mapping]
    if missing:
        raise SpecError("mapping", f"required field(s) not mapped: {', '.join(missing)}")
    deadline_unit = mapping["deadline"][1] if "deadline" in mapping else None
    if deadline_unit == "datetime" and mapping["submit"][1] != "datetime":
        # (dates are made relative to the first submission: a submit in seconds gives none)
        raise SpecError("mapping", "a deadline as a datetime needs submit as one too")
    return mapping


def load_generic(
    path: str | Path,
    mapping: str | dict,
    name: str = "csv",
    skip_invalid: bool = False,
    delimiter: str = ",",
) -> Trace:
    m = parse_mapping(mapping) if isinstance(mapping, str) else mapping

    def rows() -> Iterator[tuple[int, dict[str, str]]]:
        # read as converted, not kept: a list of every row (dicts of strings) raised a large
        # trace's peak memory by several times its jobs' own (philly.py)
        return read_rows(path, [c for c, _ in m.values()], name, delimiter)

    t0 = 0.0
    tenants: dict[str, str] = {}

    def time_value(row: dict[str, str], key: str) -> float:
        column, unit = m[key]
        if unit == "datetime":
            raw = (row[column] or "").strip()
            try:
                return epoch_s(raw) - t0
            except ValueError:
                raise SpecError(
                    FIELDS[key], f"{quoted(raw)} in column '{column}' is not a date and time"
                ) from None
        return number(row, column, FIELDS[key], scale=TIME_UNITS[unit or "s"])

    def text(row: dict[str, str], key: str) -> str | None:
        return (row[m[key][0]] or "").strip() or None if key in m else None

    def convert(row_number: int, row: dict[str, str]) -> JobSpec:
        kwargs: dict[str, Any] = {}
        if "batch" in m:
            kwargs["batch_size"] = number(row, m["batch"][0], "batch_size", integer=True)
        if "priority" in m:
            kwargs["priority"] = number(row, m["priority"][0], "priority", integer=True)
        if "deadline" in m and (row[m["deadline"][0]] or "").strip():  # empty: no deadline
            kwargs["deadline_s"] = time_value(row, "deadline")
        tenant = text(row, "tenant") or "default"
        return JobSpec(
            job_id=text(row, "id") or f"{name}-{row_number}",
            submit_time_s=time_value(row, "submit"),
            duration_s=time_value(row, "duration"),
            num_gpus=number(row, m["gpus"][0], "num_gpus", integer=True),
            tenant=tenants.setdefault(tenant, tenant),  # one string per tenant, not per job
            model=text(row, "model"),
            qos_class=text(row, "class"),
            **kwargs,
        )

    if m["submit"][1] == "datetime":  # a first pass over the file
        t0 = earliest(rows(), lambda row: time_value(row, "submit"))
    return collect(Trace(name, []), rows(), convert, skip_invalid)


def header(path: str | Path) -> list[str]:
    """A CSV file's column names."""
    with readable(path), open_text(path) as f:
        return [c.strip() for c in f.readline().strip().split(",")]


def own_mapping(columns: list[str] | set[str]) -> dict[str, tuple[str, str | None]] | None:
    """The mapping of a CSV whose columns carry dlsched's own names (each field that has one),
    or None when a required field's is missing."""
    mapping: dict[str, tuple[str, str | None]] = {
        field: (column, None)
        for field, names in OWN_COLUMNS.items()
        if (column := next((n for n in names if n in columns), None))
    }
    return mapping if all(f in mapping for f in REQUIRED) else None


def load_own(path: str | Path, name: str = "csv", skip_invalid: bool = False) -> Trace:
    """A CSV with dlsched's own column names: a job spec's fields (``job_id, submit_time_s,
    num_gpus, duration_s``, ...) or a simulation's ``jobs.csv`` (``submit_s``): the same jobs
    replayed, as they were asked for (not as they ran)."""
    mapping = own_mapping(header(path))
    if mapping is None:
        needed = " and ".join("/".join(OWN_COLUMNS[f]) for f in REQUIRED)
        raise SpecError("format", f"the dlsched format needs the columns {needed}")
    return load_generic(path, mapping, name=name, skip_invalid=skip_invalid)
