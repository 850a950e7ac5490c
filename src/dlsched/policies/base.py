"""The policy base class, shared by the simulator and the runtime (policies by name:
:mod:`.catalog`).

A policy sees a read-only :class:`~dlsched.view.PolicyView` and returns a
:class:`~dlsched.view.Plan`. The cluster state tells the policy about what happens outside its
control (arrivals, completions, involuntary requeues, cancels, measured progress) and applies
each plan whole or not at all (checked first; then preemptions, resizes, starts). A policy
reads what the state keeps (``view.queue(key)``, ``view.tenant_gpus``) rather than copying it;
it may still keep indexes of its own updated from the notifications, and then must not assume
a plan it returned was applied.
"""

from __future__ import annotations

from ..errors import SpecError
from ..jobs import JobView
from ..view import Plan, PolicyView
from .placement import PLACEMENTS, Placement

__all__ = ["Plan", "Policy", "PolicyView"]


# How a pass goes on past a job that cannot start: "strict", it stops (later jobs wait behind
# it); "backfill", later jobs may take the GPUs it cannot use but preempt nobody; "greedy", later
# jobs may also preempt jobs they outrank (the Tiresias simulator's in-order scan). Without
# preemption, greedy and backfill are the same.
SCANS = ("strict", "backfill", "greedy")


class Policy:
    """Base class: override :meth:`schedule`, and the hooks when the policy keeps indexes."""

    # class attributes of each policy
    name: str = ""
    description: str = ""
    shares_gpus: bool = False  # may put two jobs on one GPU (needs their memory)
    moldable: bool = False  # may start a job on fewer GPUs than it asked for (GENIE)
    # orders jobs by their deadlines: a simulated workload where no job has one is refused
    needs_deadlines: bool = False
    loans_servers: bool = False  # borrows idle inference servers (Aryl)
    # grows or shrinks elastic jobs: a simulated workload where no job is elastic is refused
    resizes_elastic: bool = False
    # shares the GPUs between tenants: a simulated workload of one tenant is refused
    between_tenants: bool = False

    def __init__(self, placement: str = "best-fit", scan: str = "strict") -> None:
        if placement not in PLACEMENTS:
            raise SpecError(
                "placement", f"unknown placement '{placement}': choose from {', '.join(PLACEMENTS)}"
            )
        self.placement_name = placement
        self.place: Placement = PLACEMENTS[placement]
        if scan not in SCANS:
            raise SpecError("scan", f"unknown scan '{scan}': choose from {', '.join(SCANS)}")
        self.scan = scan
        self.backfill = scan != "strict"  # later jobs may start past one that cannot

    # -- notifications from the backend ----------------------------------------------------
    def job_arrived(self, job: JobView, now: float) -> None:
        """A job entered the queue for the first time."""

    def job_finished(self, job: JobView, now: float) -> None:
        """A running job completed and released its GPUs."""

    def job_requeued(self, job: JobView, now: float) -> None:
        """A running job was stopped by something other than this policy's plan (node failure,
        a worker crash, a failed start) and is pending again."""

    def job_cancelled(self, job: JobView, now: float) -> None:
        """A pending job left the queue for good (a user cancelled it; the runtime only). A
        cancelled running job is reported as finished."""

    def job_progressed(self, job: JobView, now: float) -> None:
        """A running job's measured progress replaced the prediction (the runtime only): its
        remaining work and projected finish changed."""

    def job_resized(self, job: JobView, gpus: tuple[int, ...], now: float) -> None:
        """The admission stage (quotas, :mod:`dlsched.admission`) changed the size this policy
        planned for a job, or shrank a running job, in this pass: it runs (or starts) on
        ``gpus`` instead (none: the start is withdrawn, the job waits). The view shows a
        scale-in decided before the pass (``gpus_of``), and the next pass the sizes applied;
        a policy whose timers depend on sizes (Tiresias') may move the wake-up of the plan it
        returned (``wakeup_at``): the stage reads it after telling."""

    # -- the decision ----------------------------------------------------------------------
    def schedule(self, view: PolicyView) -> Plan:
        raise NotImplementedError

    def reclaim(self, view: PolicyView, count: int) -> tuple[list[int], Plan]:
        """Which ``count`` loaned servers to hand back to inference, and the plan that takes
        their jobs off them. Only a policy that loans servers is asked."""
        raise NotImplementedError(f"policy {self.name} does not loan servers")

    def params(self) -> dict:
        """The parameters in force, for reports."""
        return {"placement": self.placement_name, "scan": self.scan}
