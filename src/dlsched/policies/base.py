"""The policy interface, shared by the simulator and the runtime.

A policy sees a read-only :class:`ClusterView` and returns a :class:`Plan`. The backend tells the
policy about what happens outside its control (arrivals, completions, involuntary requeues) and
applies every plan it gets, in full: preemptions first, then resizes, then starts. A policy may keep its own
indexes (heaps, queues) updated from those notifications and from the plans it returns; it never
touches backend internals.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Mapping, Protocol

from ..cluster import Cluster
from ..errors import SpecError
from ..jobs import JobState
from .placement import PLACEMENTS, FreeGpus, Placement

if TYPE_CHECKING:
    from ..sim.engine import TraceSpeed
    from ..sim.occupancy import GpuOccupancy


@dataclass(slots=True)
class Plan:
    start: list[tuple[JobState, tuple[int, ...]]] = field(default_factory=list)
    preempt: list[JobState] = field(default_factory=list)
    resize: list[tuple[JobState, tuple[int, ...]]] = field(default_factory=list)  # elastic jobs' new GPUs
    wakeup_at: float | None = None  # ask to be called again at this time even if nothing happens
    accumulation: dict[str, int] = field(default_factory=dict)  # job id -> k sub-batches (sharing)

    def __bool__(self) -> bool:
        return bool(self.start or self.preempt or self.resize)


class ClusterView(Protocol):
    """What a policy may read. Backends implement it; policies must not mutate it."""

    now: float
    cluster: Cluster
    free: FreeGpus                       # never mutate: ``copy()`` it to plan placements
    pending: Mapping[str, JobState]      # in arrival order
    running: Mapping[str, JobState]
    occupancy: "GpuOccupancy"            # which jobs hold each GPU, and their memory
    speed: "TraceSpeed"                  # the workload model: speed, memory, co-location


class Policy:
    """Base class: override :meth:`schedule`, and the hooks when the policy keeps indexes."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    shares_gpus: ClassVar[bool] = False   # may put two jobs on one GPU (needs their memory)

    def __init__(self, placement: str = "best-fit", backfill: bool = False) -> None:
        if placement not in PLACEMENTS:
            raise SpecError("placement", f"unknown placement '{placement}': choose from {', '.join(PLACEMENTS)}")
        self.placement_name = placement
        self.place: Placement = PLACEMENTS[placement]
        self.backfill = backfill

    # -- notifications from the backend ----------------------------------------------------
    def job_arrived(self, job: JobState, now: float) -> None:
        """A job entered the queue for the first time."""

    def job_finished(self, job: JobState, now: float) -> None:
        """A running job completed and released its GPUs."""

    def job_requeued(self, job: JobState, now: float) -> None:
        """A running job was stopped by something other than this policy's plan (node failure,
        a worker crash, a failed start) and is pending again."""

    def job_cancelled(self, job: JobState, now: float) -> None:
        """A pending job left the queue for good (a user cancelled it; the runtime only). A
        cancelled running job is reported as finished."""
        raise NotImplementedError(f"policy {self.name} cannot drop a pending job")

    # -- the decision ----------------------------------------------------------------------
    def schedule(self, view: ClusterView) -> Plan:
        raise NotImplementedError

    def params(self) -> dict:
        """The parameters in force, for reports."""
        return {"placement": self.placement_name, "backfill": self.backfill}


POLICIES: dict[str, type[Policy]] = {}


def register(cls: type[Policy]) -> type[Policy]:
    if not cls.name or cls.name in POLICIES:
        raise ValueError(f"policy name '{cls.name}' is empty or taken")
    POLICIES[cls.name] = cls
    return cls


def make_policy(name: str, **params) -> Policy:
    from . import elastic, fifo, sharing, sjf, tiresias  # noqa: F401  (registers the built-in policies)

    if name not in POLICIES:
        raise SpecError("policy", f"unknown policy '{name}': choose from {', '.join(sorted(POLICIES))}")
    cls = POLICIES[name]
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    unknown = sorted(set(params) - accepted)
    if unknown:
        raise SpecError("param", f"policy '{name}' has no parameter '{unknown[0]}' "
                                 f"(it takes {', '.join(sorted(accepted))})")
    return cls(**params)


def available_policies() -> dict[str, type[Policy]]:
    from . import elastic, fifo, sharing, sjf, tiresias  # noqa: F401

    return dict(sorted(POLICIES.items()))
