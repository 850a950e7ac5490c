"""The job spec users and traces give (validated), and a job's state over its life.

A job's work is measured in *solo seconds*: the time it takes alone on its requested GPUs.
A running job progresses at ``rate`` solo seconds per wall second (1.0 alone at its requested
size; the performance model changes it when a job is spread, shares or is resized).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Protocol, TypeGuard

from .errors import SpecError


@dataclass(slots=True, frozen=True)
class JobSpec:
    job_id: str
    submit_time_s: float
    num_gpus: int
    duration_s: float  # solo run time at num_gpus
    tenant: str = "default"
    model: str | None = None
    batch_size: int | None = None  # global batch (all GPUs together)
    iterations: int | None = None
    priority: int = 0
    min_gpus: int | None = None  # elastic jobs only
    max_gpus: int | None = None
    deadline_s: float | None = None  # absolute QoS deadline
    qos_class: str | None = (
        None  # how the deadline was set (dlsched.qos): tight, normal, loose, given
    )
    gpu_milli: int = 1000  # share of one GPU when num_gpus == 1 (Alibaba openb)
    gpu_types: tuple[str, ...] | None = None  # allowed GPU types, None = any
    # measured pauses of this job (a replayed runtime history, dlsched.replay): before its first
    # iteration at a first start and at a restart; None: the simulation's costs
    startup_s: float | None = None
    restart_s: float | None = None
    # what policies believe its duration is until it first runs (a user's or a profiling run's
    # estimate, as a real scheduler has); None: they see duration_s
    estimate_s: float | None = None

    def __post_init__(self) -> None:
        validate_spec(self)

    def __reduce__(self) -> tuple:
        # pickled as its fields and rebuilt through the constructor (validated again), faster
        # than the slots' state; a cached workload keeps its specs as columns (prepare.py)
        return (JobSpec, _all_fields(self))

    def evolve(self, **changes: object) -> JobSpec:
        """A copy with ``changes``, validated as a new spec is: ``dataclasses.replace`` without
        its introspection of the fields on every call (4-5 us against 6-7 us here)."""
        return JobSpec(*self._fields_with(changes))

    def evolve_unchecked(self, **changes: object) -> JobSpec:
        """A copy with ``changes`` the caller made valid by construction, *not validated*: a
        spec filled in by this package's own rules (:func:`dlsched.perf.assign.assign_models`:
        about half the time of :meth:`evolve`). Only for fields no other field constrains
        (``model``, ``batch_size``, ``iterations``)."""
        for name in changes:
            if name not in _UNCONSTRAINED:
                raise TypeError(f"{name!r} is checked against other fields: use evolve")
        new = object.__new__(JobSpec)
        for set_field, value in zip(_SETTERS, self._fields_with(changes)):
            set_field(new, value)
        return new

    def _fields_with(self, changes: dict[str, object]) -> list:
        """Its fields' values in ``JOB_SPEC_FIELDS``' order, ``changes`` made."""
        values = list(_all_fields(self))
        for name, value in changes.items():
            index = _FIELD_INDEX.get(name)
            if index is None:
                raise TypeError(f"JobSpec has no field {name!r}")
            values[index] = value
        return values

    @property
    def elastic(self) -> bool:
        return self.min_gpus is not None or self.max_gpus is not None

    @property
    def gpu_range(self) -> tuple[int, int]:
        """The GPU counts it may run on: min..max for an elastic job, else its request."""
        return (self.min_gpus or self.num_gpus, self.max_gpus or self.num_gpus)

    def start_range(self, moldable: bool) -> tuple[int, int]:
        """The GPU counts it may start on: its range, or 1..its request under a policy that
        chooses a rigid job's size (GENIE; the global batch is kept)."""
        low, high = self.gpu_range
        return (1 if moldable and not self.elastic else low, high)


JOB_SPEC_FIELDS = tuple(f.name for f in fields(JobSpec))
_FIELD_INDEX = {name: i for i, name in enumerate(JOB_SPEC_FIELDS)}
_all_fields = operator.attrgetter(*JOB_SPEC_FIELDS)
# each field's slot setter, in JOB_SPEC_FIELDS' order (specs built without the constructor)
_SETTERS = tuple(getattr(JobSpec, name).__set__ for name in JOB_SPEC_FIELDS)
# the fields whose validity does not depend on another field's value (validate_spec)
_UNCONSTRAINED = frozenset({"model", "batch_size", "iterations"})


def specs_from_columns(columns: list) -> list[JobSpec]:
    """Specs from their fields as columns (``JOB_SPEC_FIELDS``' order), *not validated*: only
    for specs this package validated and wrote itself (a cached workload whose checksum and key
    matched, :mod:`dlsched.workload_cache`). Filled a column at a time through the slots'
    setters: about half the time of the constructor with its validation (0.15 against 0.35 s
    for Philly's 82,247 specs here)."""
    count = len(columns[0]) if columns else 0
    new = object.__new__
    specs = [new(JobSpec) for _ in range(count)]
    for name, set_field, column in zip(JOB_SPEC_FIELDS, _SETTERS, columns, strict=True):
        if len(column) != count:
            raise ValueError(f"column {name!r} has {len(column)} values, not {count}")
        for spec, value in zip(specs, column):
            set_field(spec, value)
    return specs


# Chosen: the largest time a spec may give, about 317 years after the trace's origin (and as a
# length): any trace's span and any job's length fit, and times derived from them (a finish,
# an iteration count at the performance model's speed) stay finite and exact to microseconds,
# where a finite time near 1e308 overflowed them.
MAX_TIME_S = 1e10


# Chosen: the longest job id, tenant or model name (a trace cell may be 128 KiB, which every
# message and output naming the job would repeat)
MAX_NAME_CHARS = 256


def finite_number(v: object) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def in_range(
    v: object, low: float, high: float, above: bool = False, whole: bool = False
) -> TypeGuard[int | float]:
    """A finite number in [low, high] (above ``low`` with ``above``; a whole number with
    ``whole``)."""
    return (
        finite_number(v)
        and (v > low if above else v >= low)
        and v <= high
        and (not whole or float(v).is_integer())
    )


def check_time(name: str, v: object, positive: bool = False, least: float = 0.0) -> None:
    """Refuse (SpecError) a time or duration that is not a number in [least, MAX_TIME_S] (above
    ``least`` with ``positive``): a finite one past the bound makes times that overflow or
    never move on."""
    if not in_range(v, least, MAX_TIME_S, above=positive):
        low = f"> {least:g}" if positive else f">= {least:g}"
        raise SpecError(name, f"must be a number {low} and <= {MAX_TIME_S:g}, got {v!r}")


def _int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def validate_spec(s: JobSpec) -> None:
    """Raise :class:`SpecError` naming the first invalid field."""
    for name in ("job_id", "tenant"):
        v = getattr(s, name)
        if not isinstance(v, str) or not 0 < len(v) <= MAX_NAME_CHARS:
            raise SpecError(name, f"must be a string of 1..{MAX_NAME_CHARS} characters")
    check_time("submit_time_s", s.submit_time_s)
    if not _int(s.num_gpus) or s.num_gpus < 1:
        raise SpecError("num_gpus", f"must be an integer >= 1, got {s.num_gpus!r}")
    check_time("duration_s", s.duration_s, positive=True)
    for name in ("model", "qos_class"):
        v = getattr(s, name)
        if v is not None and (not isinstance(v, str) or not 0 < len(v) <= MAX_NAME_CHARS):
            raise SpecError(name, f"must be a string of 1..{MAX_NAME_CHARS} characters when given")
    for name in ("batch_size", "iterations"):
        v = getattr(s, name)
        if v is not None and (not _int(v) or v < 1):
            raise SpecError(name, f"must be an integer >= 1 when given, got {v!r}")
    if not _int(s.priority):
        raise SpecError("priority", f"must be an integer, got {s.priority!r}")
    for name in ("min_gpus", "max_gpus"):
        v = getattr(s, name)
        if v is not None and (not _int(v) or v < 1):
            raise SpecError(name, f"must be an integer >= 1 when given, got {v!r}")
    if s.min_gpus is not None and s.min_gpus > s.num_gpus:
        raise SpecError("min_gpus", f"{s.min_gpus} is above num_gpus {s.num_gpus}")
    if s.max_gpus is not None and s.max_gpus < s.num_gpus:
        raise SpecError("max_gpus", f"{s.max_gpus} is below num_gpus {s.num_gpus}")
    if s.deadline_s is not None:
        # (a deadline at or before its submission is a job late on arrival: a replayed job
        # whose profiling outlasted its deadline arrives so, dlsched.replay.with_profiling)
        check_time("deadline_s", s.deadline_s)
    if s.estimate_s is not None:
        check_time("estimate_s", s.estimate_s, positive=True)
    for name in ("startup_s", "restart_s"):
        if getattr(s, name) is not None:
            check_time(name, getattr(s, name))
    if not _int(s.gpu_milli) or not 0 < s.gpu_milli <= 1000:
        raise SpecError("gpu_milli", f"must be an integer in 1..1000, got {s.gpu_milli!r}")
    if s.gpu_milli < 1000 and s.num_gpus != 1:
        raise SpecError("gpu_milli", "a fractional GPU request needs num_gpus == 1")
    if s.gpu_types is not None and (
        not isinstance(s.gpu_types, tuple)
        or not s.gpu_types
        or not all(isinstance(t, str) and t for t in s.gpu_types)
    ):
        raise SpecError("gpu_types", "must be a non-empty tuple of GPU type names when given")


class Status(Enum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"  # the runtime: a user cancelled it


# The members under plain names, for the simulator's hot paths: Python 3.11 looks an enum's
# member up through its metaclass, 0.15 us a time against 0.04 us for a plain class attribute
# (``Status.RUNNING`` is asked millions of times a replay)
PENDING, RUNNING, DONE, CANCELLED = Status.PENDING, Status.RUNNING, Status.DONE, Status.CANCELLED


@dataclass(slots=True, eq=False)
class JobState:
    """A job's state as a backend tracks it. Policies read it and never write it."""

    spec: JobSpec
    seq: int  # arrival order, a stable tie-breaker
    job_id: str = field(init=False)
    # its request, copied from the spec (a Tiresias replay of Philly reads it 4.4 million
    # times); a spec replaced later keeps its request (only durations change)
    num_gpus: int = field(init=False)
    elastic: bool = field(init=False)  # its spec's, as the state asks at every start and stop
    status: Status = Status.PENDING
    gpus: tuple[int, ...] = ()  # global GPU ids while running
    done_s: float = 0.0  # solo seconds of work completed (as of progress_at)
    rate: float = 0.0  # solo seconds per wall second while running
    progress_at: float = 0.0  # wall time done_s was last brought up to date
    resume_at: float = 0.0  # progress starts here (after a start-up / restart pause)
    segment_start: float = 0.0  # wall time the current run began
    gpus_since: float = 0.0  # wall time its current set of GPUs began (resizes move it)
    finish_time: float = math.inf  # projected, while running
    version: int = 0  # bumped whenever finish_time is recomputed
    attained_gpu_s: float = 0.0  # GPU-seconds held before the current run
    executed_gpu_s: float = 0.0  # of which making progress (not paused to restart)
    first_start: float | None = None
    finish: float | None = None
    preemptions: int = 0  # stopped by the policy
    failures: int = 0  # stopped by a node failure or crash
    pending_since: float = 0.0  # when it last entered the queue
    # the fewest GPUs it runs on: its request; an elastic job's minimum, raised to where its
    # memory per GPU fits (set by the cluster state on arrival)
    base_gpus: int = 0
    admitted: bool = True  # may be scheduled (an admission stage, quotas, may hold it back)
    run_time_s: float = 0.0  # wall time it has held GPUs, all runs together
    # GPU sharing: gradient accumulation over k sub-batches, memory per GPU, and the slowdown
    # from its partners (1.0 alone) with the time it has spent sharing
    accumulation: int = 1
    memory_mib: float | None = None
    sharing: bool = False
    slowdown: float = 1.0
    slowdown_since: float = 0.0
    shared_s: float = 0.0
    shared_slowdown_s: float = 0.0  # integral of the slowdown over the time spent sharing
    # elastic resizing: how many, the GPU-time they cost, and a background scale-out's switch
    resizes: int = 0
    resize_lost_gpu_s: float = 0.0
    switch_at: float | None = None  # when a background resize's new workers take over
    # GPUs a background move leaves: its old workers hold them until the switch
    leaving: tuple[int, ...] = ()
    actual_s: float | None = None  # its true duration while the policy sees its estimate

    def __post_init__(self) -> None:
        self.job_id = self.spec.job_id
        self.num_gpus = self.spec.num_gpus
        self.elastic = self.spec.elastic

    @property
    def remaining_s(self) -> float:
        """Solo seconds of work left, as of ``progress_at``."""
        return self.spec.duration_s - self.done_s

    def remaining_at(self, now: float) -> float:
        """Solo seconds of work left at ``now`` (counting progress since ``progress_at``)."""
        # (remaining_s and max inlined: SRTF and Aryl ask this millions of times a replay)
        left = self.spec.duration_s - self.done_s
        if self.status is RUNNING:
            since = self.progress_at if self.progress_at >= self.resume_at else self.resume_at
            if now > since:
                return left - self.rate * (now - since)
        return left

    def executed_at(self, now: float) -> float:
        """GPU-seconds spent making progress up to ``now`` (pauses to restart excluded)."""
        since = self.gpus_since if self.gpus_since > self.resume_at else self.resume_at
        if self.status is RUNNING and now > since:
            return self.executed_gpu_s + len(self.gpus) * (now - since)
        return self.executed_gpu_s


class JobView(Protocol):
    """A job as a policy sees it: :class:`JobState` without a way to change it (the type
    checker holds policies to this; only the cluster state changes a job)."""

    @property
    def spec(self) -> JobSpec: ...
    @property
    def seq(self) -> int: ...
    @property
    def job_id(self) -> str: ...
    @property
    def status(self) -> Status: ...
    @property
    def gpus(self) -> tuple[int, ...]: ...
    @property
    def num_gpus(self) -> int: ...
    @property
    def base_gpus(self) -> int: ...
    @property
    def done_s(self) -> float: ...
    @property
    def rate(self) -> float: ...
    @property
    def progress_at(self) -> float: ...
    @property
    def resume_at(self) -> float: ...
    @property
    def segment_start(self) -> float: ...
    @property
    def finish_time(self) -> float: ...
    @property
    def version(self) -> int: ...
    @property
    def attained_gpu_s(self) -> float: ...
    @property
    def executed_gpu_s(self) -> float: ...
    @property
    def first_start(self) -> float | None: ...
    @property
    def preemptions(self) -> int: ...
    @property
    def failures(self) -> int: ...
    @property
    def pending_since(self) -> float: ...
    @property
    def admitted(self) -> bool: ...
    @property
    def accumulation(self) -> int: ...
    @property
    def memory_mib(self) -> float | None: ...
    @property
    def sharing(self) -> bool: ...
    @property
    def slowdown(self) -> float: ...
    @property
    def resizes(self) -> int: ...
    @property
    def switch_at(self) -> float | None: ...
    @property
    def leaving(self) -> tuple[int, ...]: ...
    @property
    def remaining_s(self) -> float: ...
    def remaining_at(self, now: float) -> float: ...
    def executed_at(self, now: float) -> float: ...
