"""A runtime job spec: the simulator's validated :class:`~dlsched.jobs.JobSpec` plus what it
takes to run the program. Given as a mapping (from YAML or JSON)::

    entrypoint: dlsched.workloads.resnet:build   # module:function or file.py:function (required)
    gpus: 2                                      # required
    batch_size: 64                               # global batch, all GPUs together (required)
    iterations: 500                              # or epochs: 3 (one of the two is required)
    args: {lr: 0.05}                             # passed to the entrypoint
    name: my-run
    duration_s: 120         # your estimate of its run time alone, for SJF/SRTF; default below
    min_gpus: 1             # elastic jobs
    max_gpus: 4
    priority: 0
    checkpoint_every: 50    # iterations between checkpoints (0: only when stopped)
    log_every: 10
    seed: 0
    record_samples: false   # write each iteration's sample indices to the job's folder (checks)
"""

from __future__ import annotations

import time
from typing import Any, Mapping

from ..errors import SpecError
from ..jobs import JobSpec

# Chosen: a job's duration estimate when its user gives none: iterations x this (an epochs job
# counts 100 iterations per epoch, its data set's size being known only to its workers).
DEFAULT_ITERATION_S = 0.1
DEFAULT_ITERATIONS_PER_EPOCH = 100
DEFAULT_CHECKPOINT_EVERY = 50

_FIELDS = {"entrypoint", "gpus", "batch_size", "iterations", "epochs", "args", "name", "duration_s", "min_gpus",
           "max_gpus", "priority", "checkpoint_every", "log_every", "seed", "record_samples"}


def _positive_int(spec: Mapping, name: str, required: bool = True, minimum: int = 1) -> int | None:
    value = spec.get(name)
    if value is None:
        if required:
            raise SpecError(name, "is required")
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise SpecError(name, f"must be an integer >= {minimum}, got {value!r}")
    return value


def validate_run_spec(spec: Any, capacity_gpus: int) -> dict:
    """The normalized spec, or :class:`SpecError` naming the first bad field."""
    if not isinstance(spec, Mapping):
        raise SpecError("spec", f"must be a mapping of fields, got {type(spec).__name__}")
    unknown = sorted(set(spec) - _FIELDS)
    if unknown:
        raise SpecError(unknown[0], f"unknown field (known: {', '.join(sorted(_FIELDS))})")
    entrypoint = spec.get("entrypoint")
    if not isinstance(entrypoint, str) or ":" not in entrypoint.strip(":"):
        raise SpecError("entrypoint", f"must be 'module:function' or 'file.py:function', got {entrypoint!r}")
    out = {"entrypoint": entrypoint}
    for name in ("gpus", "batch_size"):
        out[name] = _positive_int(spec, name)
    if (spec.get("iterations") is None) == (spec.get("epochs") is None):
        raise SpecError("iterations", "give either iterations or epochs")
    for name in ("iterations", "epochs"):
        if spec.get(name) is not None:
            out[name] = _positive_int(spec, name)
    for name, minimum in (("min_gpus", 1), ("max_gpus", 1), ("log_every", 1), ("checkpoint_every", 0),
                          ("seed", 0)):
        value = _positive_int(spec, name, required=False, minimum=minimum)
        if value is not None:
            out[name] = value
    out.setdefault("checkpoint_every", DEFAULT_CHECKPOINT_EVERY)
    args = spec.get("args", {})
    if not isinstance(args, Mapping):
        raise SpecError("args", "must be a mapping")
    out["args"] = dict(args)
    if spec.get("name") is not None:
        if not isinstance(spec["name"], str):
            raise SpecError("name", "must be a string")
        out["name"] = spec["name"]
    if spec.get("record_samples") is not None:
        if not isinstance(spec["record_samples"], bool):
            raise SpecError("record_samples", "must be true or false")
        out["record_samples"] = spec["record_samples"]
    for name in ("duration_s", "priority"):
        if spec.get(name) is not None:
            out[name] = spec[name]
    high = max(out["gpus"], out.get("max_gpus") or 0)
    if high > capacity_gpus:
        field = "gpus" if out["gpus"] > capacity_gpus else "max_gpus"
        raise SpecError(field, f"asks for {high} GPUs; the cluster has {capacity_gpus}")
    if out["batch_size"] < high:
        raise SpecError("batch_size", f"must be at least the GPU count ({high}): every worker needs a sample")
    to_job_spec(out, "check", "check", time.time())      # the simulator's own checks
    return out


def to_job_spec(spec: dict, job_id: str, tenant: str, submit_time_s: float,
                profile: dict | None = None) -> JobSpec:
    """The policy's view of a run spec. The duration is the user's estimate, else iterations
    times the iteration time its profiling run measured (or the default). A profiled job's
    model is its entrypoint (the sharing policies group jobs by model)."""
    iteration_s = None
    if profile is not None:
        iteration_s = profile["c0_s"] + profile["c1_s"] * profile["local_batch"]
    iterations = spec.get("iterations") or spec["epochs"] * DEFAULT_ITERATIONS_PER_EPOCH
    duration = spec.get("duration_s")
    if duration is None:
        duration = iterations * (iteration_s or DEFAULT_ITERATION_S)
    return JobSpec(job_id=job_id, submit_time_s=submit_time_s, num_gpus=spec["gpus"], duration_s=duration,
                   tenant=tenant, model=spec["entrypoint"] if profile else None, batch_size=spec["batch_size"], iterations=iterations,
                   priority=spec.get("priority", 0), min_gpus=spec.get("min_gpus"), max_gpus=spec.get("max_gpus"))
