"""A runtime job spec: the simulator's validated :class:`~dlsched.jobs.JobSpec` plus what it
takes to run the program. Given as a mapping (from YAML or JSON)::

    entrypoint: dlsched.workloads.resnet:build   # module:function or file.py:function (required)
    gpus: 2                                      # required
    batch_size: 64                               # global batch, all GPUs together (required)
    iterations: 500                              # or epochs: 3 (one of the two is required)
    args: {lr: 0.05}                             # passed to the entrypoint
    name: my-run
    duration_s: 120         # your estimate of its run time alone, for SJF/SRTF until measured
    min_gpus: 1             # elastic jobs
    max_gpus: 4
    priority: 0
    checkpoint_every: 50    # iterations between checkpoints (0: only when stopped)
    log_every: 10
    seed: 0
    record_samples: false   # write each iteration's sample indices to the job's folder (checks)
    deadline: 2026-11-23T18:00:00Z   # finish by (ISO 8601 with a zone, or Unix seconds); or
    within: 2h                       # finish within this of submission (s, min, h, d)
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import SpecError
from ..jobs import JobSpec
from .limits import MAX_BATCH_SIZE, MAX_ITERATIONS, MAX_JOB_GPUS

# Chosen: a job's duration estimate when its user gives none: iterations x this (an epochs job
# counts 100 iterations per epoch, its data set's size being known only to its workers).
DEFAULT_ITERATION_S = 0.1
DEFAULT_ITERATIONS_PER_EPOCH = 100
DEFAULT_CHECKPOINT_EVERY = 50

# Bounds on every number a tenant sends (documented defaults; a value outside is a 422); the
# ones a run's own reports are checked against too are in .limits
MAX_EPOCHS = 100_000
MAX_DURATION_S = 10**8  # about three years
MAX_TEXT = 256  # entrypoint and name
MAX_ARGS_DEPTH = 32  # nesting of ``args``: hyperparameters, not data (254 levels broke reads)
MAX_ARGS_BYTES = 64 * 1024  # ``args`` as JSON: a job's row is read on every listing


class JobRequest(BaseModel):
    """A job as a tenant submits it (the API's request body; its OpenAPI schema)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    entrypoint: str = Field(
        min_length=3,
        max_length=MAX_TEXT,
        pattern=r"^[^:]+:[A-Za-z_][A-Za-z0-9_]*$",
        description="module:function or file.py:function returning model, optimizer, data, loss",
    )
    gpus: int = Field(ge=1, le=MAX_JOB_GPUS)
    batch_size: int = Field(ge=1, le=MAX_BATCH_SIZE, description="global batch, all GPUs together")
    iterations: int | None = Field(
        None, ge=1, le=MAX_ITERATIONS, description="give iterations or epochs"
    )
    epochs: int | None = Field(None, ge=1, le=MAX_EPOCHS)
    args: dict[str, Any] = Field(
        default_factory=dict,
        description=f"passed to the entrypoint (at most {MAX_ARGS_DEPTH} levels deep, "
        f"{MAX_ARGS_BYTES // 1024} KiB as JSON)",
    )
    name: str | None = Field(None, max_length=MAX_TEXT)
    duration_s: float | None = Field(
        None,
        gt=0,
        le=MAX_DURATION_S,
        allow_inf_nan=False,
        description="estimated run time alone, for SJF/SRTF until the job is measured running",
    )
    min_gpus: int | None = Field(None, ge=1, le=MAX_JOB_GPUS, description="elastic jobs")
    max_gpus: int | None = Field(None, ge=1, le=MAX_JOB_GPUS)
    priority: int = Field(0, ge=-1000, le=1000)
    checkpoint_every: int = Field(
        DEFAULT_CHECKPOINT_EVERY,
        ge=0,
        le=MAX_ITERATIONS,
        description="iterations between checkpoints (0: only when stopped)",
    )
    log_every: int | None = Field(None, ge=1, le=MAX_ITERATIONS)
    seed: int | None = Field(None, ge=0, le=2**31 - 1)
    record_samples: bool | None = None
    deadline: float | str | None = Field(
        None, description="finish by: ISO 8601 time with a zone, or Unix seconds"
    )
    within: float | str | None = Field(
        None,
        description="finish within this of submission: '2h', '90min', '45s', '1.5d', or seconds",
    )


def _args_problem(args: dict) -> str | None:
    """Why ``args`` is too deep or too large to keep, or None (checked without recursion)."""
    stack: list[tuple[Any, int]] = [(args, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_ARGS_DEPTH:
            return f"nested more than {MAX_ARGS_DEPTH} levels deep"
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    try:
        size = len(json.dumps(args, allow_nan=False))
    except (TypeError, ValueError) as e:
        return f"not JSON: {e}"
    if size > MAX_ARGS_BYTES:
        return f"{size} bytes as JSON; at most {MAX_ARGS_BYTES}"
    return None


REQUEST_PARTS = ("body", "query", "path", "header", "cookie")  # FastAPI's error locations


def spec_error(errors: Sequence[Mapping[str, Any]]) -> SpecError:
    """The first problem pydantic found, as the field it names and the reason."""
    first = errors[0]
    loc = [str(p) for p in first["loc"]]
    if loc and loc[0] in REQUEST_PARTS:  # the API's errors say where first: name the field
        loc = loc[1:]
    field = loc[0] if loc else "spec"
    reason = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
    return SpecError(field, reason)


def validate_run_spec(
    spec: Any, capacity_gpus: int, elastic_capacity_gpus: int | None = None
) -> dict:
    """The normalized spec, or :class:`SpecError` naming the first bad field. A job may ask for
    at most ``capacity_gpus`` (the training pool); an elastic job may grow to
    ``elastic_capacity_gpus`` (with the inference servers it may borrow; default the same)."""
    if not isinstance(spec, Mapping):
        raise SpecError("spec", f"must be a mapping of fields, got {type(spec).__name__}")
    try:
        out = JobRequest.model_validate(dict(spec)).model_dump(exclude_none=True)
    except ValidationError as e:
        raise spec_error(e.errors()) from None
    if ("iterations" in out) == ("epochs" in out):
        raise SpecError("iterations", "give either iterations or epochs")
    if problem := _args_problem(out.get("args", {})):
        raise SpecError("args", problem)
    high = max(out["gpus"], out.get("max_gpus") or 0)
    if out["gpus"] > capacity_gpus:
        raise SpecError("gpus", f"asks for {out['gpus']} GPUs; the cluster has {capacity_gpus}")
    if high > (elastic_capacity_gpus or capacity_gpus):
        raise SpecError(
            "max_gpus",
            f"asks for {high} GPUs; the cluster has {elastic_capacity_gpus or capacity_gpus}",
        )
    if out["batch_size"] < high:
        raise SpecError(
            "batch_size", f"must be at least the GPU count ({high}): every worker needs a sample"
        )
    now = time.time()
    deadline = absolute_deadline(out.pop("deadline", None), out.pop("within", None), now)
    if deadline is not None:
        out["deadline"] = deadline
    to_job_spec(out, "check", "check", now)  # the simulator's own checks
    return out


UNITS_S = {"s": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
WITHIN = re.compile(r"^\s*(?P<n>\d+(\.\d+)?)\s*(?P<unit>s|min|m|h|d)\s*$")


def absolute_deadline(
    deadline: float | str | None, within: float | str | None, now: float
) -> float | None:
    """The deadline as Unix seconds from ``deadline`` (absolute) or ``within`` (from now);
    :class:`SpecError` naming the field when it cannot be read or is not in the future."""
    if deadline is not None and within is not None:
        raise SpecError("within", "give deadline or within, not both")
    if within is not None:
        if isinstance(within, str):
            m = WITHIN.match(within)
            if not m:
                raise SpecError(
                    "within", f"expected a duration such as '2h', '90min' or '45s', got {within!r}"
                )
            within = float(m["n"]) * UNITS_S[m["unit"]]
        if not (math.isfinite(within) and 0 < within <= MAX_DURATION_S):
            raise SpecError("within", f"must be more than 0 s and at most {MAX_DURATION_S:g} s")
        return now + within
    if deadline is None:
        return None
    if isinstance(deadline, str):
        try:
            parsed = datetime.fromisoformat(deadline.strip().replace("Z", "+00:00"))
            timestamp = parsed.timestamp()
        except (ValueError, OverflowError, OSError):
            raise SpecError(
                "deadline",
                f"expected an ISO 8601 time such as 2026-11-23T18:00:00Z, got {deadline[:64]!r}",
            ) from None
        if parsed.tzinfo is None:  # (a SpecError is a ValueError: raised out of the try)
            raise SpecError(
                "deadline", f"give the time zone of {deadline[:64]!r} (e.g. a trailing Z for UTC)"
            )
        deadline = timestamp
    if not math.isfinite(deadline) or deadline <= now:
        raise SpecError("deadline", "must be a time after submission")
    if deadline > now + MAX_DURATION_S:
        raise SpecError("deadline", f"is more than {MAX_DURATION_S:g} s away")
    return float(deadline)


def to_job_spec(
    spec: dict, job_id: str, tenant: str, submit_time_s: float, profile: dict | None = None
) -> JobSpec:
    """The policy's view of a run spec. The duration is the user's estimate, else iterations
    times the iteration time its profiling run measured (or the default), until the service
    measures the job running (``SchedulerService._job_progress``). A profiled job's
    model is its entrypoint (the sharing policies group jobs by model)."""
    iteration_s = None
    if profile is not None:
        iteration_s = profile["c0_s"] + profile["c1_s"] * profile["local_batch"]
    iterations = spec.get("iterations") or spec["epochs"] * DEFAULT_ITERATIONS_PER_EPOCH
    duration = spec.get("duration_s")
    if duration is None:
        duration = iterations * (iteration_s or DEFAULT_ITERATION_S)
    return JobSpec(
        job_id=job_id,
        submit_time_s=submit_time_s,
        num_gpus=spec["gpus"],
        duration_s=duration,
        tenant=tenant,
        model=spec["entrypoint"] if profile else None,
        batch_size=spec["batch_size"],
        iterations=iterations,
        priority=spec.get("priority", 0),
        min_gpus=spec.get("min_gpus"),
        max_gpus=spec.get("max_gpus"),
        deadline_s=spec.get("deadline"),
        qos_class="given" if spec.get("deadline") else None,
    )
