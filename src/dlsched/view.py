"""The contract between policies and the cluster state: what a policy may read
(:class:`PolicyView`), what it returns (:class:`Plan`) and what it is told
(:class:`PolicyHooks`).

A policy sees a read-only view and returns a plan; the state applies a plan in full or not at all
(checked first; then preemptions, resizes, starts) and tells the policy about what happens outside
its control (arrivals, completions, involuntary requeues, cancels, measured progress). The
simulator and the runtime both drive the same state, so a policy never knows which backend
it is talking to.
"""

from __future__ import annotations

from collections.abc import (
    Callable,
    Collection,
    Container,
    Hashable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Protocol

from .cluster import Cluster
from .jobs import JobState, JobView
from .state.free import FreeGpus
from .workload_model import WorkloadModel


@dataclass(slots=True)
class Plan:
    start: list[tuple[JobView, tuple[int, ...]]] = field(default_factory=list)
    preempt: list[JobView] = field(default_factory=list)
    resize: list[tuple[JobView, tuple[int, ...]]] = field(
        default_factory=list
    )  # elastic jobs' new GPUs
    # ask to be called again at this time even if nothing happens (a time after the pass's own:
    # one at it or before is not asked again; the next instant is ``math.nextafter(now, inf)``)
    wakeup_at: float | None = None
    accumulation: dict[str, int] = field(default_factory=dict)  # job id -> k sub-batches (sharing)

    def __bool__(self) -> bool:
        return bool(self.start or self.preempt or self.resize)


class Applied:
    """What a plan changed, as :meth:`ClusterState.apply` returns it: the jobs it preempted,
    resized and started (the state's own), each read after the commit (a started or resized
    job's GPUs and sub-batch count are ``job.gpus`` and ``job.accumulation``)."""

    __slots__ = ("preempted", "resized", "started")

    def __init__(
        self,
        preempted: list[JobState] | None = None,
        resized: list[JobState] | None = None,
        started: list[JobState] | None = None,
    ) -> None:
        self.preempted = preempted or []
        self.resized = resized or []
        self.started = started or []

    def __bool__(self) -> bool:
        return bool(self.preempted or self.resized or self.started)


class IdleGpus(Protocol):
    """The idle GPUs as a policy reads them (:class:`~dlsched.state.free.FreeGpus` without its
    mutators): ``copy()`` gives an index of its own to plan against."""

    @property
    def cluster(self) -> Cluster: ...
    @property
    def total(self) -> int: ...
    @property
    def free(self) -> Sequence[Sequence[int]]: ...  # per node, its idle GPU ids
    @property
    def buckets(self) -> Sequence[AbstractSet[int]]: ...  # idle count (1..) -> nodes with that many
    @property
    def usable(self) -> AbstractSet[int]: ...

    def copy(self) -> FreeGpus: ...
    def is_free(self, g: int) -> bool: ...
    def free_on(self, nid: int) -> int: ...
    def nodes_with_at_least(self, need: int, types: tuple[str, ...] | None = None) -> list[int]: ...


class Holders(Protocol):
    """Which jobs hold each GPU (:class:`~dlsched.state.occupancy.GpuOccupancy`, read only)."""

    @property
    def max_jobs_per_gpu(self) -> int: ...
    @property
    def jobs(self) -> Sequence[Sequence[JobView]]: ...
    @property
    def memory(self) -> Sequence[float | None]: ...
    @property
    def leased(self) -> AbstractSet[int]: ...  # GPUs a profiling run holds

    def why_not_join(self, g: int, memory_mib: float | None) -> str | None: ...
    def why_not_join_holders(
        self, g: int, holders: int, used: float | None, memory_mib: float | None
    ) -> str | None: ...
    def partners(self, job: JobView) -> AbstractSet[JobView]: ...


class Loans(Protocol):
    """Inference servers loaned to training (:class:`~dlsched.state.loans.LoanBook`, read
    only)."""

    @property
    def loaned(self) -> Mapping[int, float]: ...  # node -> when loaned
    @property
    def reclaiming(self) -> Mapping[int, tuple[float, float]]: ...  # node -> (asked, deadline)


class JobQueue(Protocol):
    """Admitted pending jobs in a policy's order (:class:`~dlsched.state.queues.PendingQueue`,
    read only): iterate, ``len``, index; with buckets, each bucket's entries ``(key, seq,
    job)`` best first."""

    def __iter__(self) -> Iterator[JobView]: ...
    def __len__(self) -> int: ...
    def __getitem__(self, i: int) -> JobView: ...
    @property
    def sizes(self) -> Mapping[int, int]: ...  # GPUs asked for -> jobs waiting that ask so many
    @property
    def entries(self) -> Sequence[tuple]: ...
    def merged(self) -> Iterator[tuple]: ...  # the entries as read (a prefix costs less)
    def rerank(self, job: JobView) -> None: ...  # the policy's own key for the job changed
    def key_of(self, job: JobView) -> Any: ...
    def scan(self, skipped: Container[Hashable]) -> Iterator[tuple[JobView, Hashable]]: ...
    @property
    def buckets(self) -> Mapping[Any, Sequence[tuple]]: ...
    def bucket_totals(self, bucket: Hashable) -> tuple[float, ...]: ...  # sums of ``totals``


class RunningJobs(Protocol):
    """Running jobs in a policy's order, worst first (:mod:`dlsched.state.running`)."""

    def __iter__(self) -> Iterator[JobView]: ...
    def __len__(self) -> int: ...
    @property
    def head_gpus(self) -> Mapping[Any, int]: ...  # a key's first element -> GPUs asked
    def worst(
        self, skip: Container[str] = (), running: Mapping[str, JobView] | None = None
    ) -> JobView | None: ...
    def rekey(self, job: JobView) -> None: ...  # the policy's own key for the job changed


class DriftingJobs(Protocol):
    """Running jobs by a linear key that drifts with time (:mod:`dlsched.state.drifting`)."""

    def __len__(self) -> int: ...
    def worst(
        self,
        exact_worst_first: Callable[[JobView], tuple],
        now: float,
        skip: Container[str] = (),
        running: Container[str] | None = None,
    ) -> JobView | None: ...
    def gpus_from(
        self, badness: float, now: float, skip: Collection[str] = (), enough: float = ...
    ) -> int: ...
    def rekey(self, job: JobView) -> None: ...


class PolicyView(Protocol):
    """What a policy may read; the type checker holds policies to it (no mutator is part of it:
    ``free.copy()`` to plan)."""

    @property
    def now(self) -> float: ...
    @property
    def cluster(self) -> Cluster: ...
    @property
    def free(self) -> IdleGpus: ...  # idle GPUs of usable nodes
    @property
    def pending(self) -> Mapping[str, JobView]: ...  # in arrival order
    @property
    def running(self) -> Mapping[str, JobView]: ...
    @property
    def running_elastic(self) -> Mapping[str, JobView]: ...  # the elastic ones, by start
    @property
    def elastic_above_base(self) -> Mapping[str, JobView]: ...  # those above their base sizes
    @property
    def elastic_growable(self) -> Mapping[str, JobView]: ...  # those one more GPU speeds up
    @property
    def sharing_candidates(self) -> Mapping[str, JobView]: ...  # those a job may share with
    @property
    def elastic_extra_gpus(self) -> int: ...  # GPUs they hold above their base sizes
    @property
    def elastic_grown_gpus(self) -> int: ...  # GPUs they hold above their requests
    @property
    def occupancy(self) -> Holders: ...  # which jobs hold each GPU, their memory
    @property
    def workload(self) -> WorkloadModel: ...  # speed, memory, co-location
    @property
    def loans(self) -> Loans: ...  # inference servers loaned / reclaiming
    @property
    def cordoned(self) -> Collection[int]: ...  # nodes out of service: no new job goes there
    @property
    def tenant_gpus(self) -> Mapping[str, int]: ...  # GPUs its running jobs (and profiling) hold

    def queue(
        self,
        key: Callable[[JobView], Any],
        bucket: Callable[[JobView], Hashable] | None = None,
        totals: Callable[[JobView], tuple[float, ...]] | None = None,
    ) -> JobQueue:
        """The admitted pending jobs in the order of ``key`` (smallest first), split into
        buckets by ``bucket`` when given, with each bucket's sums of ``totals`` when given,
        kept by the state from the first call on (:mod:`dlsched.state.queues`): read it, do
        not copy or sort it. Pass the same functions every time (module-level functions or
        bound methods of the policy)."""

    def running_order(self, key: Callable[[JobView], tuple]) -> RunningJobs:
        """The running jobs in the order of ``key`` (worst first: the first to preempt), kept
        by the state from the first call on (:mod:`dlsched.state.running`). In a what-if view
        it still holds the jobs the view takes away: skip those not in ``running``."""

    def running_drift(
        self, linear_key: Callable[[JobView], tuple[float, float, float]]
    ) -> DriftingJobs:
        """The running jobs under a key that drifts with time (SRTF's work left), kept by the
        state (:mod:`dlsched.state.drifting`); as ``running_order`` in a what-if view."""

    def gpus_of(self, job: JobView) -> tuple[int, ...]:
        """The GPUs a running job holds as this view sees them (``job.gpus``, but in a
        what-if where the job scaled in)."""

    def projected_finish(self, job: JobView) -> float:
        """When a running job ends at its current speed (inf when not running)."""

    def executed_gpu_s(self, job: JobView) -> float:
        """GPU-seconds the job has spent making progress up to now (restart pauses excluded)."""

    def resizing(self, job: JobView) -> bool:
        """A background resize of the running job is under way."""

    def preemption_cost_gpu_s(self, job: JobView) -> float:
        """GPU-seconds a preemption of the running job now would waste."""

    def without(
        self, gone: Iterable[JobView] = (), freed: Iterable[tuple[JobView, tuple[int, ...]]] = ()
    ) -> PolicyView:
        """The view if the running jobs ``gone`` were off their GPUs and the ``freed`` GPUs of
        other running jobs were idle (a what-if; nothing changes)."""


class Admissions(Protocol):
    """The admitted live jobs, as the state keeps them for the admission stage
    (:mod:`dlsched.state.admitted`)."""

    @property
    def by_tenant(self) -> Mapping[str, Mapping[str, tuple[int, JobView]]]:
        """tenant -> job id -> (admission number, job), in the order of admission."""

    @property
    def priorities(self) -> Mapping[str, Mapping[int, int]]:
        """tenant -> priority class -> its admitted live jobs."""

    @property
    def lowest(self) -> Mapping[str, int]:
        """tenant -> the lowest priority class of its admitted live jobs."""

    @property
    def counted(self) -> Mapping[str, int]:
        """tenant -> the GPUs it counts against its quota: those it holds (``tenant_gpus``)
        and its waiting admitted jobs' base sizes (tenants counting none left out)."""


class AdmissionBooks(PolicyView, Protocol):
    """What the admission stage (:mod:`dlsched.admission`) reads and may change besides
    planning: which pending jobs the policy may schedule (its queues list only admitted jobs)."""

    @property
    def admissions(self) -> Admissions: ...

    def not_admitted(
        self, key: Callable[[JobView], Any], bucket: Callable[[JobView], Hashable] | None = None
    ) -> JobQueue:
        """The pending jobs not admitted (as :meth:`PolicyView.queue` orders them)."""

    def admit(self, job: JobView) -> None: ...
    def dismiss(self, job: JobView) -> None: ...


class AdmissionHooks(Protocol):
    """What the state tells the admission stage of the jobs it admitted (arrivals: all)."""

    def job_arrived(self, job: JobView, now: float) -> None: ...
    def job_finished(self, job: JobView, now: float) -> None: ...
    def job_requeued(self, job: JobView, now: float) -> None: ...
    def job_cancelled(self, job: JobView, now: float) -> None: ...
    # a refused plan took back the stage's admission (``admitted`` False) or eviction of ``job``
    def admission_undone(self, job: JobView, admitted: bool, now: float) -> None: ...


class PolicyHooks(Protocol):
    """What the state tells a policy (:class:`dlsched.policies.base.Policy` implements it)."""

    name: str
    moldable: bool  # may start a job on 1..its request GPUs (at its requested global batch)
    loans_servers: bool  # borrows the inference servers the inference side does not need

    def reclaim(self, view: PolicyView, count: int) -> tuple[list[int], Plan]:
        """Which ``count`` loaned servers to give back, and the plan that takes its jobs off
        them (shrinks and preemptions); called only when ``loans_servers``."""

    def job_arrived(self, job: JobView, now: float) -> None: ...
    def job_finished(self, job: JobView, now: float) -> None: ...
    def job_requeued(self, job: JobView, now: float) -> None: ...
    def job_cancelled(self, job: JobView, now: float) -> None: ...
    def job_progressed(self, job: JobView, now: float) -> None: ...
