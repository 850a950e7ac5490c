"""The policy base class and registry, shared by the simulator and the runtime.

A policy sees a read-only :class:`~dlsched.view.PolicyView` and returns a
:class:`~dlsched.view.Plan`. The cluster state tells the policy about what happens outside its
control (arrivals, completions, involuntary requeues, cancels, measured progress) and applies
every plan it gets, in full: preemptions first, then resizes, then starts. A policy may keep its
own indexes (heaps, queues) updated from those notifications and from the plans it returns.
"""

from __future__ import annotations

import inspect
from typing import ClassVar

from ..errors import SpecError
from ..jobs import JobState
from ..view import Plan, PolicyView
from .placement import PLACEMENTS, Placement

__all__ = ["Plan", "Policy", "PolicyView", "register", "make_policy", "available_policies"]


# How a pass goes on past a job that cannot start: "strict", it stops (later jobs wait behind
# it); "backfill", later jobs may take the GPUs it cannot use but preempt nobody; "greedy", later
# jobs may also preempt jobs they outrank (the Tiresias simulator's in-order scan). Without
# preemption, greedy and backfill are the same.
SCANS = ("strict", "backfill", "greedy")


class Policy:
    """Base class: override :meth:`schedule`, and the hooks when the policy keeps indexes."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    shares_gpus: ClassVar[bool] = False   # may put two jobs on one GPU (needs their memory)

    def __init__(self, placement: str = "best-fit", scan: str = "strict") -> None:
        if placement not in PLACEMENTS:
            raise SpecError("placement", f"unknown placement '{placement}': choose from {', '.join(PLACEMENTS)}")
        self.placement_name = placement
        self.place: Placement = PLACEMENTS[placement]
        if scan not in SCANS:
            raise SpecError("scan", f"unknown scan '{scan}': choose from {', '.join(SCANS)}")
        self.scan = scan
        self.backfill = scan != "strict"     # later jobs may start past a blocked one

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

    def job_progressed(self, job: JobState, now: float) -> None:
        """A running job's measured progress replaced the prediction (the runtime only): its
        remaining work and projected finish changed."""

    # -- the decision ----------------------------------------------------------------------
    def schedule(self, view: PolicyView) -> Plan:
        raise NotImplementedError

    def params(self) -> dict:
        """The parameters in force, for reports."""
        return {"placement": self.placement_name, "scan": self.scan}


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
