"""What a tenant's process reports about its own progress, checked before anything reads it.

The worker asks the tenant process for ``{"iteration", "iterations", "iteration_s", "loss"}``;
that process runs the tenant's code, so every value may be anything JSON carries (NaN and
infinity included). A report is used only when each value is a finite number in its range;
otherwise it is dropped whole, and the reason is named (the service counts it and writes it to
the job's events), so a false report reaches neither the state nor the store.
"""

from __future__ import annotations

import math

from .jobspec import MAX_ITERATIONS

# Chosen: the slowest iteration a report may claim (an hour). Longer is no real training
# step, and a huge value would stretch the job's re-estimated duration without bound.
MAX_ITERATION_S = 3600.0


def checked_progress(report: object, iterations: int | None) -> tuple[dict | None, str | None]:
    """(the report with valid values, None) or (None, why it is dropped). ``iterations`` is the
    job's own count when its spec gives one (an epochs job's count is its workers' to say)."""
    if report is None:
        return None, None  # no report yet: nothing to drop
    if not isinstance(report, dict):
        return None, f"not a mapping: {type(report).__name__}"
    total = report.get("iterations")
    if total is not None and not _whole(total, 1, MAX_ITERATIONS):
        return None, f"iterations {total!r} is not a whole number in 1..{MAX_ITERATIONS}"
    if iterations is not None and total is not None and total != iterations:
        return None, f"iterations {total!r} is not the job's {iterations}"
    total = total or iterations
    iteration = report.get("iteration")
    high = total if total is not None else MAX_ITERATIONS
    if iteration is not None and not _whole(iteration, 0, high):
        return None, f"iteration {iteration!r} is not a whole number in 0..{high}"
    seconds = report.get("iteration_s")
    if seconds is not None and not (_number(seconds) and 0 < seconds <= MAX_ITERATION_S):
        return None, f"iteration_s {seconds!r} is not a number in (0, {MAX_ITERATION_S:g}]"
    loss = report.get("loss")
    if loss is not None and not _number(loss):
        return None, f"loss {loss!r} is not a finite number"
    return {
        "iteration": None if iteration is None else int(iteration),
        "iterations": None if total is None else int(total),
        "iteration_s": seconds,
        "loss": loss,
    }, None


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _whole(v: object, low: int, high: int) -> bool:
    return _number(v) and float(v).is_integer() and low <= v <= high  # type: ignore[arg-type, operator]
