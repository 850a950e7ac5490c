"""What a tenant's process reports about its own job, checked before anything reads it.

The worker asks the tenant process for ``{"iteration", "iterations", "iteration_s", "loss"}``,
and a profiling run for the job's profile; that process runs the tenant's code, so every value
may be anything JSON carries (NaN and infinity included). A progress report is used only when
each value is a finite number in its range; otherwise it is dropped whole, and the reason is
named (the service counts it and writes it to the job's events), so a false report reaches
neither the state nor the store. A profile that breaks its ranges fails the job's profiling.
"""

from __future__ import annotations

from typing import TypeGuard

from ..jobs import finite_number, in_range
from .limits import MAX_BATCH_SIZE, MAX_ITERATIONS, MAX_JOB_GPUS

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
    if total is None:  # an epochs job's run before it built its data: no count, no progress
        return None, None
    if iteration is not None and not _whole(iteration, 0, total):
        return None, f"iteration {iteration!r} is not a whole number in 0..{total}"
    seconds = report.get("iteration_s")
    if seconds is not None and not in_range(seconds, 0, MAX_ITERATION_S, above=True):
        return None, f"iteration_s {seconds!r} is not a number in (0, {MAX_ITERATION_S:g}]"
    loss = report.get("loss")
    if loss is not None and not finite_number(loss):
        return None, f"loss {loss!r} is not a finite number"
    return {
        "iteration": None if iteration is None else int(iteration),
        "iterations": int(total),
        "iteration_s": seconds,
        "loss": loss,
    }, None


def checked_iteration(iteration: object, iterations: int | None) -> int | None:
    """An iteration a run's process says it stopped at, if a whole number in 0..the job's
    iterations (or the API's bound); else None."""
    high = iterations if iterations is not None else MAX_ITERATIONS
    return int(iteration) if _whole(iteration, 0, high) else None


# Chosen: the most memory a profile may name (1 TiB, past any GPU's), in MiB
MAX_PROFILE_MIB = float(1 << 20)
MAX_PROFILE_POINTS = 16  # measured batches (a profiling run measures 2)
MAX_PROFILE_PLACEMENTS = 64  # GENIE's timed placements (a profiling run times 6)
PROFILE_REQUIRED = ("local_batch", "c0_s", "c1_s", "fixed_mib", "per_sample_mib")
PROFILE_KEYS = {*PROFILE_REQUIRED, "iteration_extra_mib", "points", "placements"}


class _Invalid(ValueError):
    pass


def checked_profile(profile: object) -> tuple[dict | None, str | None]:
    """(the profile, None) when every value is in its range, else (None, why): what a profiling
    run reports (:func:`dlsched.runtime.profile.profile_program`) sizes the job's memory grant
    and so who may share its GPU, GENIE's prediction of it, and its length until measured."""
    try:
        return _check_profile(profile), None
    except _Invalid as e:
        return None, f"an invalid profile: {e}"


def _check_profile(p: object) -> dict:
    if not isinstance(p, dict):
        raise _Invalid(f"not a mapping: {type(p).__name__}")
    if unknown := sorted(str(k)[:40] for k in p.keys() - PROFILE_KEYS):
        raise _Invalid(f"unknown keys: {', '.join(unknown[:5])}")
    if missing := [k for k in PROFILE_REQUIRED if k not in p]:
        raise _Invalid(f"missing: {', '.join(missing)}")
    _in("local_batch", p["local_batch"], 1, MAX_BATCH_SIZE, whole=True)
    _in("c0_s", p["c0_s"], 0, MAX_ITERATION_S, above=True)
    _in("c1_s", p["c1_s"], 0, MAX_ITERATION_S)
    _in("fixed_mib", p["fixed_mib"], -MAX_PROFILE_MIB, MAX_PROFILE_MIB)  # a fit: may be < 0
    _in("per_sample_mib", p["per_sample_mib"], 0, MAX_PROFILE_MIB)
    _in("iteration_extra_mib", p.get("iteration_extra_mib", 0), 0, MAX_PROFILE_MIB)
    if not p["fixed_mib"] + p["per_sample_mib"] * p["local_batch"] > 0:
        raise _Invalid(
            "its memory at its own batch (fixed_mib + per_sample_mib x local_batch) is not above 0"
        )
    for name, entry in _entries(
        p, "points", MAX_PROFILE_POINTS, {"batch", "iteration_s", "memory_mib"}
    ):
        _in(name + ".batch", entry["batch"], 0, MAX_BATCH_SIZE, above=True)
        _in(name + ".iteration_s", entry["iteration_s"], 0, MAX_ITERATION_S, above=True)
        _in(name + ".memory_mib", entry["memory_mib"], 0, MAX_PROFILE_MIB)
    fields = {"gpus", "nodes", "batch", "iteration_s"}
    for name, entry in _entries(p, "placements", MAX_PROFILE_PLACEMENTS, fields):
        _in(name + ".gpus", entry["gpus"], 1, MAX_JOB_GPUS, whole=True)
        _in(name + ".nodes", entry["nodes"], 1, entry["gpus"], whole=True)
        _in(name + ".batch", entry["batch"], 0, MAX_BATCH_SIZE, above=True)
        _in(name + ".iteration_s", entry["iteration_s"], 0, MAX_ITERATION_S, above=True)
    return p


def _entries(p: dict, key: str, most: int, fields: set[str]) -> list[tuple[str, dict]]:
    """The profile's list under ``key`` (none: empty), each entry a mapping of ``fields``."""
    listed = p.get(key, [])
    if not isinstance(listed, list) or len(listed) > most:
        raise _Invalid(f"{key} is not a list of at most {most} entries")
    for i, entry in enumerate(listed):
        if not isinstance(entry, dict) or entry.keys() != fields:
            raise _Invalid(f"{key}[{i}] is not a mapping of {', '.join(sorted(fields))}")
    return [(f"{key}[{i}]", entry) for i, entry in enumerate(listed)]


def _in(
    name: str, v: object, low: float, high: float, above: bool = False, whole: bool = False
) -> None:
    """Refuse ``v`` unless :func:`dlsched.jobs.in_range` (with ``name`` in the reason)."""
    if not in_range(v, low, high, above, whole):
        kind = "a whole number" if whole else "a number"
        bounds = f"{'(' if above else '['}{_shown(low)}, {_shown(high)}]"
        raise _Invalid(f"{name} {str(v)[:40]!r} is not {kind} in {bounds}")


def _shown(bound: float) -> str:
    return f"{int(bound):,}" if float(bound).is_integer() else f"{bound:g}"


def _whole(v: object, low: float, high: float) -> TypeGuard[int | float]:
    return in_range(v, low, high, whole=True)
