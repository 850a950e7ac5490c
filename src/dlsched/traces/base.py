"""Shared machinery for trace adapters: reading rows, validating them, and accounting for
every row that was dropped (and why)."""

from __future__ import annotations

import csv
import gzip
import io
import math
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal, overload

from ..errors import SpecError, quoted
from ..jobs import JobSpec

MAX_EXAMPLES = 5


@dataclass(slots=True)
class Trace:
    """Jobs read from a trace, with what was left out."""

    name: str
    jobs: list[JobSpec]
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> rows
    examples: list[str] = field(default_factory=list)  # the first few drop messages
    rows: int = 0  # data rows read
    # a server's exported history (dlsched.traces.history): per job, what its runs measured
    # (profile, slowdown, profiling time) and the outcome the server got; None for other traces
    replay: dict[str, dict] | None = None

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    def drop(self, reason: str, message: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(message)


def open_text(path: str | Path, option: str = "trace") -> io.TextIOBase:
    path = Path(path)
    if not path.is_file():
        raise SpecError(option, f"no such file: {path}")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", newline="")
    return open(path, newline="")


# what reading a file that is not UTF-8 text, or a broken gzip, raises
_UNREADABLE = (UnicodeDecodeError, gzip.BadGzipFile, EOFError, zlib.error)


@contextmanager
def readable(path: str | Path, option: str = "trace") -> Iterator[None]:
    """A file that cannot be read as text stops with an error naming it (and the ``option``
    that gave it), not a traceback."""
    try:
        yield
    except _UNREADABLE as err:
        raise SpecError(
            option, f"{path} cannot be read as a UTF-8 CSV file, plain or gzipped: {err}"
        ) from None


def read_rows(
    path: str | Path,
    required: Iterable[str],
    source: str,
    delimiter: str = ",",
    option: str = "trace",
) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield (data row number, row) after checking the header names every required column
    (``option``: the option that named the file, for errors about the whole file)."""
    with readable(path, option), open_text(path, option) as f:
        reader = csv.reader(f, delimiter=delimiter)
        header = next(reader, None) or []
        missing = [c for c in required if c not in header]
        if missing:
            raise SpecError(
                missing[0],
                f"column missing from the header ({', '.join(header) or 'empty file'})",
                source=source,
            )
        try:
            yield from enumerate(_as_dicts(reader, header), start=1)
        except csv.Error as err:  # a cell over the csv module's limit (128 KiB), a stray NUL
            raise SpecError(
                option, f"cannot be read as CSV at line {reader.line_num}: {err}", source=source
            ) from None


def _as_dicts(reader: Iterator[list[str]], header: list[str]) -> Iterator[dict[str, str]]:
    """Rows as ``csv.DictReader`` gives them (blank lines skipped, values past the header's
    columns as a list under the key None, columns past the values None), without its
    per-row method call: Philly's 82,247 rows are read twice."""
    columns = len(header)
    for row in reader:
        if not row:
            continue
        values = dict(zip(header, row))
        if len(row) != columns:
            if len(row) > columns:
                values[None] = row[columns:]  # type: ignore[index,assignment]
            else:
                for name in header[len(row) :]:
                    values[name] = None  # type: ignore[assignment]
        yield values


def collect(
    trace: Trace,
    rows: Iterable[tuple[int, dict[str, str]]],
    convert: Callable[[int, dict[str, str]], JobSpec | None],
    skip_invalid: bool,
) -> Trace:
    """Convert rows to specs. A row whose conversion raises SpecError stops the load (the error
    names the row and field) unless ``skip_invalid``, in which case it is counted by field.
    ``convert`` returning None drops a row the adapter deliberately leaves out; it has called
    ``trace.drop`` itself. A job id seen on an earlier row is such an error (the earlier row's
    job is kept)."""
    first_row: dict[str, int] = {}  # job id -> the row that has it
    for number, row in rows:
        trace.rows += 1
        try:
            check_shape(row)
            spec = convert(number, row)
            if spec is not None and first_row.setdefault(spec.job_id, number) != number:
                first = first_row[spec.job_id]
                raise SpecError("job_id", f"duplicate job id {spec.job_id!r}, first on row {first}")
        except SpecError as e:
            err = e.at(row=number, source=trace.name)
            if not skip_invalid:
                raise err from None
            trace.drop(f"invalid {e.field}", str(err))
            continue
        if spec is not None:
            trace.jobs.append(spec)
    return trace


def check_shape(row: dict) -> None:
    """A CSV row (from :func:`read_rows`) with more or fewer values than its header has columns
    is a SpecError naming ``columns`` (csv.DictReader keeps the excess under the key None, and
    fills what is missing with None)."""
    if None not in row and None not in row.values():
        return
    columns = sum(1 for k in row if k is not None)
    extra = row.get(None)
    values = columns + len(extra) if extra else sum(1 for v in row.values() if v is not None)
    raise SpecError("columns", f"{values} values for the header's {columns} columns")


@overload
def number(
    row: dict[str, str],
    column: str,
    field_name: str | None = None,
    *,
    integer: Literal[True],
    scale: float = 1.0,
) -> int: ...
@overload
def number(
    row: dict[str, str],
    column: str,
    field_name: str | None = None,
    *,
    integer: Literal[False] = False,
    scale: float = 1.0,
) -> float: ...
def number(
    row: dict[str, str],
    column: str,
    field_name: str | None = None,
    *,
    integer: bool = False,
    scale: float = 1.0,
) -> float:
    """A numeric cell, or SpecError naming the column."""
    raw = (row.get(column) or "").strip()
    name = field_name or column
    if raw == "":
        raise SpecError(name, f"empty value in column '{column}'")
    try:
        value = float(raw)
    except ValueError:
        raise SpecError(name, f"{quoted(raw)} in column '{column}' is not a number") from None
    if not math.isfinite(value):
        raise SpecError(name, f"{quoted(raw)} in column '{column}' is not finite")
    if integer:
        if value != int(value):
            raise SpecError(name, f"{quoted(raw)} in column '{column}' is not a whole number")
        return int(value)
    return value * scale


_EPOCH = datetime(1970, 1, 1)


def epoch_s(raw: str) -> float:
    """Seconds since 1970 of an ISO 8601 date and time: at its offset when it gives one (a
    trace in local time crosses daylight saving time), else UTC. ValueError when it is none.
    (A naive time's difference from the epoch, as ``timestamp()`` computes it for UTC, in a
    third of the time: Philly's 82,247 times are read twice.)"""
    t = datetime.fromisoformat(raw)
    return (t - _EPOCH).total_seconds() if t.tzinfo is None else t.timestamp()


def earliest(
    rows: Iterable[tuple[int, dict[str, str]]], parse: Callable[[dict[str, str]], float]
) -> float:
    """The earliest parseable time in ``rows``: absolute dates become seconds after it.
    Unparseable rows are left for the row-by-row conversion to report."""
    t0 = math.inf
    for _, row in rows:
        try:
            t0 = min(t0, parse(row))
        except SpecError:
            pass
    return 0.0 if t0 == math.inf else t0
