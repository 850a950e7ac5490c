"""Errors that name what was wrong with an input, so users can fix it."""

from __future__ import annotations


class SpecError(ValueError):
    """An invalid value in a job spec, cluster spec, trace row or API call.

    ``field`` names the offending field; ``row`` (when reading a file) the 1-based data row;
    ``source`` the file or trace it came from.
    """

    def __init__(
        self, field: str, reason: str, *, row: int | None = None, source: str | None = None
    ) -> None:
        self.field = field
        self.reason = reason
        self.row = row
        self.source = source
        super().__init__(self._message())

    def _message(self) -> str:
        where = []
        if self.source:
            where.append(self.source)
        if self.row is not None:
            where.append(f"row {self.row}")
        prefix = (", ".join(where) + ": ") if where else ""
        return f"{prefix}field '{self.field}': {self.reason}"

    def __reduce__(self) -> tuple:
        # its own arguments: it crosses processes (compare, sweeps on Ray)
        return _spec_error, (self.field, self.reason, self.row, self.source)

    def at(self, *, row: int | None = None, source: str | None = None) -> SpecError:
        """The same error located at a row / source (keeps whatever was already known)."""
        return SpecError(
            self.field,
            self.reason,
            row=self.row if row is None else row,
            source=self.source if source is None else source,
        )


def _spec_error(field: str, reason: str, row: int | None, source: str | None) -> SpecError:
    return SpecError(field, reason, row=row, source=source)


# Chosen: the most of a user's value an error message quotes (a trace cell may be 128 KiB)
MAX_QUOTED_CHARS = 60


def quoted(text: str) -> str:
    """``text`` in single quotes for a message, cut to :data:`MAX_QUOTED_CHARS` with its
    length said."""
    if len(text) <= MAX_QUOTED_CHARS:
        return f"'{text}'"
    return f"'{text[:MAX_QUOTED_CHARS]}...' ({len(text):,} characters)"


class PlanError(RuntimeError):
    """A policy returned a plan the backend cannot apply (a policy bug, never user input)."""


def option_name(field: str) -> str:
    """The command-line option of a setting named by its Python name (``cpus_per_run`` ->
    ``--cpus-per-run``), for errors about options."""
    return "--" + field.replace("_", "-")
