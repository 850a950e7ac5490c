"""The cluster state: every transition of every job, in one place, for both backends.

The simulator drives it with exact virtual time, the runtime's service with the wall clock and
the executor's reports; neither reaches into the other. Every transition (start, stop by policy,
failure, finish, cancel, resize, switch, node down / up, progress observed) keeps the free-GPU
index, the sharing partners (their speeds and sub-batch counts), each job's projected finish and
``version``, the policy's hooks and the per-job accounting consistent.

A running job's work advances at ``rate`` solo seconds per second from ``resume_at`` (after a
start-up, restart or resize pause). Its projected finish is recomputed only when its rate or its
measured progress changes, and the owner finds it in ``changes.finishes`` (the simulator
keeps a heap with lazy invalidation by ``version``; the runtime needs none). The state holds
only live jobs (pending or running): a finished job leaves it, and its owner keeps or drops it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, cast

from ..cluster import Cluster
from ..errors import PlanError, SpecError
from ..inference import DEFAULT_RECLAIM_NOTICE_S
from ..jobs import CANCELLED, DONE, PENDING, RUNNING, JobSpec, JobState, JobView
from ..view import AdmissionHooks, Applied, Plan, PolicyHooks, PolicyView
from ..workload_model import TRACE_MODEL, WorkloadModel, one_more_gpu_helps
from .admitted import AdmittedJobs
from .costs import Costs
from .drifting import LinearKey, RunningDrift
from .free import FreeGpus
from .loans import LoanBook
from .occupancy import GpuOccupancy
from .plan_check import PlanCheck
from .queues import BucketKey, PendingQueue, QueueKey, Totals
from .running import RunningKey, RunningOrder
from .tenant_log import TenantLog
from .whatif import WhatIfView

INF = math.inf


def unplaceable(spec: JobSpec, cluster: Cluster) -> str | None:
    """Why ``spec`` could never run on ``cluster``'s training pool, or None."""
    capacity = cluster.capacity_for(spec.gpu_types)
    if spec.num_gpus <= capacity:
        return None
    kind = f" of type {'|'.join(spec.gpu_types)}" if spec.gpu_types else ""
    return f"job '{spec.job_id}' asks for {spec.num_gpus} GPUs{kind}; the cluster has {capacity}"


@dataclass(slots=True)
class Changes:
    """What the state scheduled since its owner last took these lists (each owner empties
    them: the simulator into its event heaps, the runtime after each pass)."""

    # (finish time, seq, version, job): a running job's projected finish moved (stale once
    # the job's version moves on)
    finishes: list[tuple[float, int, int, JobState]] = field(default_factory=list)
    # (switch time, seq, version, job): a background scale-out's new workers take over then
    switches: list[tuple[float, int, int, JobState]] = field(default_factory=list)
    # (node, asked, deadline): a reclaimed inference server no job holds any more
    returned: list[tuple[int, float, float]] = field(default_factory=list)


class ClusterState:
    """Implements :class:`~dlsched.view.PolicyView` for the policy it drives."""

    def __init__(
        self,
        cluster: Cluster,
        policy: PolicyHooks,
        costs: Costs | None = None,
        workload: WorkloadModel = TRACE_MODEL,
        max_jobs_per_gpu: int = 2,
        restore_full_batch: bool = True,
        now: float = 0.0,
        reclaim_notice_s: float = DEFAULT_RECLAIM_NOTICE_S,
        admission: AdmissionHooks | None = None,
        scale_in_switch_reported: bool = False,
    ) -> None:
        self.cluster = cluster
        # one tuple per GPU for the jobs that run on one: a job keeps its GPUs once it ends,
        # and a replay of Philly's 82,247 jobs made 77,000 of them (3.6 MiB)
        self._one_gpu = [(g,) for g in range(len(cluster.gpu_node))]
        # Whether a background scale-in's switch is reported (the runtime's executor does):
        # until then the job counts as resizing, so no other resize is planned over the one
        # under way. Its leaving workers exit at their next mini-batch boundary and the GPUs
        # they leave are free at once (on Ray, the GPU's units bound what runs there meanwhile:
        # a worker that finds them taken waits); the simulator has no such switch.
        self.scale_in_switch_reported = scale_in_switch_reported
        self.policy = policy
        # the admission stage (quotas, :mod:`dlsched.admission`): the policy's queues hold
        # only the jobs it admitted; without one every arrival is admitted
        self.admission = admission
        self.admissions = AdmittedJobs()  # the stage's books (kept only with a stage)
        # the stage's admissions (None) and evictions (the admission number the job had) since
        # the last plan applied: a refused plan takes them back (_undo_admissions)
        self._admission_journal: list[tuple[JobState, int | None]] = []
        # jobs the stage took back after the policy heard of them, waiting to be admitted
        # again: a policy may remember them (Tiresias, a job's queue), so it hears of their
        # cancel too
        self._dismissed: set[str] = set()
        self.costs = costs or Costs()
        self.workload = workload
        # GPU sharing: how many jobs one GPU may hold, and whether a job that no longer shares
        # any GPU goes back to its full batch (no gradient accumulation).
        self.restore_full_batch = restore_full_batch
        self.free = FreeGpus(cluster)
        self.occupancy = GpuOccupancy(cluster, max_jobs_per_gpu)
        self.now = now
        self.pending: dict[str, JobState] = {}
        self.running: dict[str, JobState] = {}
        # the running elastic jobs (in start order); those holding more than their base sizes;
        # those below their maximum that one GPU more makes faster; and the GPUs held above base
        # sizes (what shrinking them could free) and above requests, together (_size_elastic)
        self.running_elastic: dict[str, JobState] = {}
        self.elastic_above_base: dict[str, JobState] = {}
        self.elastic_growable: dict[str, JobState] = {}
        self.elastic_extra_gpus = 0
        self.elastic_grown_gpus = 0
        self.down_nodes: set[int] = set()
        # nodes the operator took out of service (cordon, drain): nothing new is placed there
        self.cordoned: set[int] = set()
        # GPUs held outside any plan, by owner (the runtime's profiling runs): not free, not a
        # job's, until released
        self.leases: dict[str, tuple[int, ...]] = {}
        self.changes = Changes()
        # capacity loaning: inference servers lent to training and asked back (Aryl)
        self.loans = LoanBook.for_cluster(cluster, reclaim_notice_s)
        # GPUs each tenant's running jobs and profiling runs (leases) hold; with a
        # ``tenant_log``, every change is appended to it as (time, tenant, GPUs held)
        self.tenant_gpus: dict[str, int] = {}
        self._lease_tenants: dict[str, str] = {}  # lease owner -> the tenant it counts for
        self.tenant_log: TenantLog | None = None
        # the orders (and buckets) policies asked for, of the admitted pending jobs
        self._queues: dict[tuple[QueueKey, BucketKey | None, Totals | None], PendingQueue] = {}
        # the same of the pending jobs not admitted, for the admission stage
        self._held_back: dict[tuple[QueueKey, BucketKey | None, Totals | None], PendingQueue] = {}
        # the orders of running jobs policies asked for (preemptive policies' victims)
        self._running_orders: dict[RunningKey, RunningOrder] = {}
        self._running_drifts: dict[LinearKey, RunningDrift] = {}
        # the running jobs a sharing policy may pair a job with (``may_take_partner``), kept
        # from the first ask on (``sharing_candidates``)
        self._candidates: dict[str, JobState] | None = None
        self._next_seq = 0

    # -- the view ------------------------------------------------------------------------------
    def gpus_of(self, job: JobView) -> tuple[int, ...]:
        return job.gpus

    def projected_finish(self, job: JobView) -> float:
        return job.finish_time

    def executed_gpu_s(self, job: JobView) -> float:
        return job.executed_at(self.now)

    def resizing(self, job: JobView) -> bool:
        return job.switch_at is not None

    def preemption_cost_gpu_s(self, job: JobView) -> float:
        """GPU-seconds a preemption of the running job now would waste: its restart pause, and
        the work since its last checkpoint unless preemptions checkpoint first."""
        lost = self.costs.start_pause_s(job.spec, first=False)
        interval = self.costs.checkpoint_interval_s
        if (
            not self.costs.checkpoint_on_preempt
            and interval is not None
            and self.now > job.resume_at
        ):
            lost += (self.now - job.resume_at) % interval
        return len(job.gpus) * lost

    def queue(
        self, key: QueueKey, bucket: BucketKey | None = None, totals: Totals | None = None
    ) -> PendingQueue:
        queue = self._queues.get((key, bucket, totals))  # asked several times a pass
        if queue is None:
            queue = self._order(self._queues, key, bucket, True, totals)
        return queue

    def running_order(self, key: RunningKey) -> RunningOrder:
        order = self._running_orders.get(key)
        if order is None:
            order = self._running_orders[key] = RunningOrder(key, self.running.values())
        return order

    @property
    def sharing_candidates(self) -> Mapping[str, JobState]:
        if self._candidates is None:
            self._candidates = {
                jid: job for jid, job in self.running.items() if may_take_partner(job)
            }
        return self._candidates

    def running_drift(self, linear_key: LinearKey) -> RunningDrift:
        drift = self._running_drifts.get(linear_key)
        if drift is None:
            drift = self._running_drifts[linear_key] = RunningDrift(
                linear_key, self.running.values()
            )
        drift.settle(self.now)
        return drift

    def _order(
        self,
        orders: dict,
        key: QueueKey,
        bucket: BucketKey | None,
        admitted: bool,
        totals: Totals | None = None,
    ) -> PendingQueue:
        """The queue in ``orders`` for (key, bucket, totals), made from the pending jobs at
        first ask."""
        queue = orders.get((key, bucket, totals))
        if queue is None:
            jobs = (j for j in self.pending.values() if j.admitted is admitted)
            queue = orders[(key, bucket, totals)] = PendingQueue(key, jobs, bucket, totals)
        return queue

    # -- admission (the stage that runs before the policy: dlsched.admission) ----------------------
    def not_admitted(self, key: QueueKey, bucket: BucketKey | None = None) -> PendingQueue:
        """The pending jobs not admitted, as :meth:`queue` orders and buckets them."""
        return self._order(self._held_back, key, bucket, admitted=False)

    def admit(self, job: JobView) -> None:
        """The admission stage lets the policy schedule the waiting ``job``: the policy hears
        of it as an arrival."""
        own = self._own(job)
        if not own.admitted:
            self._set_admitted(own, True)
            self.admissions.add(own)
            self._admission_journal.append((own, None))
            self.policy.job_arrived(own, self.now)

    def dismiss(self, job: JobView) -> None:
        """The admission stage takes ``job`` back (evicted): it leaves the policy's queues
        (a running one leaves its GPUs by the stage's plan, and waits to be admitted again).
        The policy hears of it as a job that finished, or was cancelled before it started."""
        own = self._own(job)
        if own.admitted:
            self._set_admitted(own, False)
            self._admission_journal.append((own, self.admissions.remove(own)))
            if own.status is RUNNING:
                self.policy.job_finished(own, self.now)
            else:
                self.policy.job_cancelled(own, self.now)

    def _own(self, job: JobView) -> JobState:
        """The state's own record of a live job a policy names."""
        jid = job.job_id
        own = self.pending.get(jid) or self.running.get(jid)
        if own is not job:
            raise PlanError(f"policy {self.policy.name} named job {jid}, not a live job here")
        return own

    def _set_admitted(self, job: JobState, admitted: bool) -> None:
        """Move a waiting job between the policy's queues and the admission stage's."""
        if job.admitted is admitted:
            return
        waiting = job.status is PENDING
        if waiting:
            self._unqueue(job)
        job.admitted = admitted
        if admitted:
            self._dismissed.discard(job.job_id)
        else:
            self._dismissed.add(job.job_id)
        if waiting:
            self._queue(job)

    def without(
        self, gone: Iterable[JobView] = (), freed: Iterable[tuple[JobView, tuple[int, ...]]] = ()
    ) -> PolicyView:
        return WhatIfView(self, gone, freed)

    # -- arrivals --------------------------------------------------------------------------------
    def advance_to(self, now: float) -> None:
        """Move the clock (never backwards: the wall clock may step back)."""
        if now > self.now:
            self.now = now

    def submit(self, spec: JobSpec) -> JobState:
        """A new job arrives now; returns its state."""
        problem = unplaceable(spec, self.cluster)
        if problem:
            raise SpecError("num_gpus", problem)
        job = JobState(spec=spec, seq=self._next_seq)
        self.arrive(job)
        return job

    def arrive(self, job: JobState) -> None:
        """A job whose state the owner made (the simulator numbers its jobs in trace order)."""
        if job.seq >= self._next_seq:
            self._next_seq = job.seq + 1
        job.pending_since = self.now
        job.admitted = self.admission is None
        job.base_gpus = self._base_gpus(job.spec)
        if job.spec.estimate_s is not None:
            # the policy sees the estimate until the job runs and its speed is measured
            job.actual_s = job.spec.duration_s
            job.spec = job.spec.evolve(duration_s=job.spec.estimate_s, estimate_s=None)
        self._wait(job)
        if self.admission is None:
            self.policy.job_arrived(job, self.now)
        else:  # the policy hears of it once admitted
            self.admission.job_arrived(job, self.now)

    def _base_gpus(self, spec: JobSpec) -> int:
        """An elastic job's minimum, or the fewest GPUs above it at which its memory per GPU
        (its global batch kept) fits the cluster's smallest GPU; its request if none below it
        does. (At its minimum a job may be over its GPUs' memory.)"""
        if not spec.elastic:
            return spec.num_gpus
        for n in range(spec.gpu_range[0], spec.num_gpus):
            memory = self.workload.memory_mib(spec, n)
            if memory is None or memory <= self.cluster.smallest_gpu_mib:
                return n
        return spec.num_gpus

    # -- a policy's plan -------------------------------------------------------------------------
    def apply(self, plan: Plan) -> Applied:
        """Apply the whole plan, or nothing of it: every entry is checked first (statuses, GPU
        ids and counts, free GPUs, memory and partners of shared GPUs), and a
        :class:`PlanError` naming the job and the reason leaves the state as it was before the
        pass: the admission stage's admissions and evictions since the last plan applied are
        taken back with it."""
        if not isinstance(plan, Plan):  # (a plug-in's schedule may return anything)
            self._undo_admissions()
            raise PlanError(f"policy {self.policy.name} returned {type(plan).__name__}, not a Plan")
        journal = self._admission_journal
        if not plan:
            if journal:
                journal.clear()
            return Applied()
        check = PlanCheck(self)
        try:
            check.run(plan)
        except PlanError:
            self._undo_admissions()
            raise
        except (TypeError, ValueError, AttributeError) as e:  # an entry of another shape
            self._undo_admissions()
            raise PlanError(
                f"policy {self.policy.name} returned a malformed plan ({type(e).__name__}: {e}):"
                " starts and resizes are (job, GPU ids) pairs, preemptions jobs, all the view's"
            ) from e
        if journal:
            journal.clear()
        return self._commit(plan, check)

    def _undo_admissions(self) -> None:
        """Take back the admission stage's admissions (the job waits to be admitted again) and
        evictions (the job is admitted again at its place in admission order) since the last
        plan applied, latest first. The policy and the stage hear of it as of any admission
        and withdrawal."""
        journal, self._admission_journal = self._admission_journal, []
        for job, number in reversed(journal):
            if job.status not in (PENDING, RUNNING):
                continue
            admitted = number is not None  # evicted in the pass: admitted again
            self._set_admitted(job, admitted)
            if admitted:
                self.admissions.add(job, number)
                self.policy.job_arrived(job, self.now)
            else:
                self.admissions.remove(job)
                self.policy.job_cancelled(job, self.now)
            if self.admission is not None:
                self.admission.admission_undone(job, admitted, self.now)

    def _commit(self, plan: Plan, check: PlanCheck) -> Applied:
        """Apply a checked plan: the check found each entry's job to be the state's own record
        of it (not a copy), so the plan's jobs are changed as they are."""
        # (a plan of starts alone is the common one: the empty parts cost nothing)
        own = cast("_CheckedPlan", plan)
        preempted, resized, started = own.preempt, own.resize, own.start
        for job in preempted:
            self._stop(job, by_policy=True)
        for job, gpus in resized:
            self._resize(job, tuple(gpus))
        accumulation, memory, joined = plan.accumulation, check.memory, check.joined
        for job, gpus in started:
            jid = job.job_id
            k = accumulation.get(jid, 1) if accumulation else 1
            self._start(job, tuple(gpus), k, memory[jid], joined.get(jid) if joined else None)
            if job.actual_s is not None:  # its true length, as a real run's first progress tells
                actual, job.actual_s = job.actual_s, None
                self.observe_progress(job, 0.0, actual)
        self._settle_reclaims()
        return Applied(
            preempted, [j for j, _ in resized] if resized else None, [j for j, _ in started]
        )

    # -- capacity loaning ----------------------------------------------------------------------
    def set_inference_demand(self, servers: int) -> Applied:
        """The inference side announces how many of its servers it needs (by the end of the
        notice): servers it does not need are loaned to training when the policy loans; when
        it needs more than it holds, the policy picks loaned servers to reclaim and plans how
        their jobs leave (scale in or preempt), and each must be back by now + notice. Returns
        what that plan changed (nothing when nothing is reclaimed)."""
        book = self.loans
        total = len(book.inference_nodes)
        if isinstance(servers, bool) or not isinstance(servers, int) or not 0 <= servers <= total:
            raise SpecError(
                "servers",
                f"must be an integer in 0..{total} (the inference servers), got {servers!r}",
            )
        book.announced = servers
        short = servers - book.held
        if short > 0 and book.loaned:
            count = min(short, len(book.loaned))
            nodes, plan = self.policy.reclaim(self, count)
            if len(set(nodes)) != count or any(n not in book.loaned for n in nodes):
                raise PlanError(
                    f"policy {self.policy.name} picked {sorted(nodes)} to reclaim; it "
                    f"must pick {count} distinct loaned servers of {sorted(book.loaned)}"
                )
            check = PlanCheck(self, retiring=nodes)
            check.run(plan)
            deadline = self.now + book.notice_s
            for nid in nodes:
                del book.loaned[nid]
                book.reclaiming[nid] = (self.now, deadline)
                self.free.retire_node(nid)
            book.stats.reclaims += count
            book.stats.reclaim_preemptions += len(plan.preempt)
            book.stats.reclaim_scale_ins += len(plan.resize)
            return self._commit(plan, check)
        if short < 0 and self.policy.loans_servers:
            for nid in book.lendable(-short, self.down_nodes | self.cordoned):
                self.free.add_node(nid)
                book.loaned[nid] = self.now
                book.stats.loans += 1
        return Applied()

    def enforce_reclaims(self) -> list[JobState]:
        """Servers whose notice ran out: the jobs still on them are preempted now (returned)."""
        book = self.loans
        preempted = []
        for nid, (_, deadline) in list(book.reclaiming.items()):
            if deadline <= self.now:
                for job in self.jobs_on(nid):
                    self._stop(job, by_policy=True)
                    book.stats.forced_preemptions += 1
                    self._requeued(job)
                    preempted.append(job)
        self._settle_reclaims()
        return preempted

    def _settle_reclaims(self) -> None:
        """Hand back every reclaiming server no job holds any more."""
        book, jobs = self.loans, self.occupancy.jobs
        if not book.reclaiming:
            return
        for nid, (asked, deadline) in list(book.reclaiming.items()):
            if not any(jobs[g] for g in self.cluster.nodes[nid].gpu_ids):
                del book.reclaiming[nid]
                book.stats.returned += 1
                book.stats.returned_late += self.now > deadline
                book.stats.return_wait_s += self.now - asked
                self.changes.returned.append((nid, asked, deadline))

    # -- what happens outside the policy's control ------------------------------------------------
    def finish(self, job: JobState) -> None:
        """A running job ended by itself."""
        now = self.now
        job.done_s = job.spec.duration_s
        job.progress_at = now
        partners = self._leave_gpus(job)
        job.status = DONE
        job.finish = now
        job.finish_time = now
        self._leave_admission(job)
        for partner in partners:
            self._refresh(partner)
        if self.admission is not None:
            self.admission.job_finished(job, now)
        self.policy.job_finished(job, now)
        self._settle_reclaims()
        # as a stopped job's: a finished job keeps no float of its speed (1.9 MiB over a replay
        # of Philly's 82,247 jobs); its GPUs stay, where it last ran
        job.rate = 0.0

    def fail(self, job: JobState, counted: bool = True) -> None:
        """A running job failed (crash, lost worker, failed start, lost node): it waits again,
        losing the work since its last periodic checkpoint. Not ``counted`` in its failures: a
        failure the runtime puts on the cluster, not on the job."""
        self._stop(job, by_policy=False, counted=counted)
        self._requeued(job)
        self._settle_reclaims()

    def cancel(self, job: JobState) -> None:
        """A user cancelled the job: it leaves the queue, or its GPUs (its partners get their
        speed and full batch back)."""
        if job.status is RUNNING:
            self._advance(job)
            partners = self._leave_gpus(job)
            job.gpus, job.status = (), CANCELLED
            job.finish_time = INF
            job.version += 1
            self._leave_admission(job)
            for partner in partners:
                self._refresh(partner)
            if self.admission is not None:
                self.admission.job_finished(job, self.now)
            self.policy.job_finished(job, self.now)
            self._settle_reclaims()
        elif job.status is PENDING:
            self._unwait(job)
            job.status = CANCELLED
            if job.admitted:  # (one the stage never admitted the policy never heard of)
                self._leave_admission(job)
                if self.admission is not None:
                    self.admission.job_cancelled(job, self.now)
                self.policy.job_cancelled(job, self.now)
            elif job.job_id in self._dismissed:  # evicted: the policy heard of it
                self._dismissed.discard(job.job_id)
                self.policy.job_cancelled(job, self.now)

    def observe_progress(
        self, job: JobState, fraction_done: float, duration_s: float | None = None
    ) -> None:
        """A running job's measured progress (and re-estimated solo duration) replaces the
        prediction: its projected finish and version move, and the policy is told."""
        if job.status is not RUNNING:
            return
        if duration_s is not None and duration_s > 0:
            job.spec = job.spec.evolve(duration_s=duration_s)
        job.done_s = min(1.0, max(0.0, fraction_done)) * job.spec.duration_s
        job.progress_at = self.now
        self._schedule_completion(job)
        self.policy.job_progressed(job, self.now)

    def switch(self, job: JobState) -> None:
        """A background resize's new workers are ready: everyone switches to the new group, and
        the GPUs the leaving workers held are free."""
        if job.status is not RUNNING or job.switch_at is None:
            return
        self._advance(job)
        job.switch_at = None
        pause = self.costs.background_switch_fraction * self.resize_pause_s(job.spec)
        job.resume_at = max(job.resume_at, self.now) + pause
        job.rate = self._rate(job)
        self._schedule_completion(job)
        if job.leaving:  # the old workers are gone
            self.free.release(self.occupancy.drop_leaving(job))
            job.leaving = ()
            self._settle_reclaims()

    def lease(self, owner: str, gpus: tuple[int, ...], tenant: str | None = None) -> None:
        """Hold GPUs of the training pool outside any plan (a profiling run) until
        :meth:`release`: each free GPU whole, or the second place on a GPU that one job holds
        and another could join (:meth:`GpuOccupancy.why_not_join` with no memory asked). No
        job starts on or joins them meanwhile, and a leased GPU its job leaves stays held.
        With ``tenant``, each GPU counts in the tenant's ``tenant_gpus`` (its quota's use, fair
        share) until the release, as a running job's would."""
        if owner in self.leases:
            raise ValueError(f"{owner} already holds GPUs {self.leases[owner]}")
        occupancy = self.occupancy
        for g in gpus:
            if self.cluster.nodes[self.cluster.gpu_node[g]].pool != "training":
                raise ValueError(f"GPU {g} is a loaned server's: a reclaim could not wait for it")
            if not self.free.is_free(g):
                why = occupancy.why_not_join(g, 0.0)
                if why or len(occupancy.jobs[g]) != 1:
                    raise ValueError(why or f"GPU {g} is neither free nor held by one job")
        self.free.take([g for g in gpus if self.free.is_free(g)])
        occupancy.leased.update(gpus)
        self.leases[owner] = tuple(gpus)
        if tenant is not None:
            self._lease_tenants[owner] = tenant
            self._held(tenant, len(gpus))

    def release(self, owner: str) -> None:
        """Give the owner's leased GPUs back (nothing if it holds none)."""
        gpus = self.leases.pop(owner, ())
        self.occupancy.leased.difference_update(gpus)
        self.free.release([g for g in gpus if not self.occupancy.jobs[g]])
        if (tenant := self._lease_tenants.pop(owner, None)) is not None:
            self._held(tenant, -len(gpus))

    def node_down(self, nid: int) -> None:
        """A node left: its jobs fail and wait again; its GPUs are not usable until it returns.
        A lease on it ends (its run failed with the node)."""
        self._check_node(nid)
        if nid in self.down_nodes:
            return
        for owner, gpus in list(self.leases.items()):
            if any(self.cluster.gpu_node[g] == nid for g in gpus):
                self.release(owner)
        for job in self.jobs_on(nid):
            self.fail(job)
        if nid in self.free.usable:
            self.free.remove_node(nid)
        self.down_nodes.add(nid)

    def node_up(self, nid: int) -> None:
        self._check_node(nid)
        if nid in self.down_nodes:
            self.down_nodes.discard(nid)
            self._offer_node(nid)

    def cordon(self, nid: int, drain: bool = False) -> list[JobState]:
        """The operator takes a node out of service: nothing new is placed on it (nor lent, an
        inference server) until ``uncordon``; its jobs run on to their ends, or with ``drain``
        are preempted now (each checkpoints, as a policy's preemption, and waits again).
        Returns the jobs preempted. A profiling run there ends by itself."""
        self._check_node(nid)
        if nid not in self.cordoned:
            self.cordoned.add(nid)
            if nid in self.free.usable:
                self.free.retire_node(nid)
        if not drain:
            return []
        victims = self.jobs_on(nid)
        for job in victims:
            self._stop(job, by_policy=True)
            self._requeued(job)
        self._settle_reclaims()
        return victims

    def uncordon(self, nid: int) -> None:
        """The node is in service again: its GPUs no job holds are offered (if it is up)."""
        self._check_node(nid)
        if nid in self.cordoned:
            self.cordoned.discard(nid)
            self._offer_node(nid)

    def _offer_node(self, nid: int) -> None:
        """Offer a node's GPUs to training if it may take work: up, in service, and a
        training node or a loaned server."""
        if nid in self.down_nodes or nid in self.cordoned:
            return
        if self.cluster.nodes[nid].pool == "training" or nid in self.loans.loaned:
            occupancy = self.occupancy
            busy = [
                g
                for g in self.cluster.nodes[nid].gpu_ids
                if occupancy.jobs[g] or g in occupancy.leased
            ]
            self.free.add_node(nid, busy)

    def jobs_on(self, nid: int) -> list[JobState]:
        """The jobs holding any GPU of the node, each once."""
        jobs = self.occupancy.jobs
        return list(dict.fromkeys(j for g in self.cluster.nodes[nid].gpu_ids for j in jobs[g]))

    def _check_node(self, nid: int) -> None:
        if not 0 <= nid < len(self.cluster.nodes):
            raise SpecError("node_events", f"no node {nid}")

    def leaving_workers_wait(self, scales_out: bool) -> bool:
        """Whether the workers a resize removes hold their GPUs until its switch: a background
        resize that also adds GPUs (a move) trains on its old workers until the new ones are
        ready."""
        return scales_out and self.costs.resize_mechanism != "stop-resume"

    def resize_pause_s(self, spec: JobSpec) -> float:
        """A stop-resume of ``spec``: the restart, plus saving and loading its checkpoint."""
        return self.costs.resize_pause_s(self.workload.checkpoint_mib(spec))

    # -- transitions -----------------------------------------------------------------------------
    def _advance(self, job: JobState) -> None:
        since = job.progress_at if job.progress_at > job.resume_at else job.resume_at
        if self.now > since:
            job.done_s += job.rate * (self.now - since)
        job.progress_at = self.now

    def _schedule_completion(self, job: JobState) -> None:
        job.version += 1
        begin = job.resume_at if job.resume_at > self.now else self.now
        job.finish_time = begin + max(0.0, job.spec.duration_s - job.done_s) / job.rate
        self.changes.finishes.append((job.finish_time, job.seq, job.version, job))
        if self._running_drifts:  # its speed or work left changed
            for drift in self._running_drifts.values():
                drift.put(job)

    def _set_rate(self, job: JobState, rate: float) -> None:
        if not rate > 0:
            raise PlanError(f"job {job.job_id}: speed must be > 0, got {rate}")
        self._advance(job)
        job.rate = rate
        self._schedule_completion(job)

    def _start(
        self,
        job: JobState,
        gpus: tuple[int, ...],
        accumulation: int,
        memory: float | None,
        joined: list[int] | None,
    ) -> None:
        """Put a pending job on ``gpus``, beside the jobs on ``joined`` (as :class:`PlanCheck`
        found them), using ``memory`` MiB per GPU."""
        self.free.take([g for g in gpus if g not in joined] if joined else gpus)
        now = self.now
        pause = self.costs.start_pause_s(job.spec, first=job.first_start is None)
        if job.first_start is None:
            job.first_start = now
        job.status = RUNNING
        job.gpus = self._one_gpu[gpus[0]] if len(gpus) == 1 else tuple(gpus)
        self._held(job.spec.tenant, len(gpus))
        job.accumulation = accumulation
        job.memory_mib = memory
        job.segment_start = job.gpus_since = now
        job.progress_at = now
        job.resume_at = now + pause
        partners = self.occupancy.attach(job)
        job.rate = self._rate(job, partners)  # (its sharing state from now on, too)
        self._unwait(job)
        self.running[job.job_id] = job
        if job.elastic:
            self._size_elastic(job, 0, len(gpus))
        self._schedule_completion(job)
        if self._running_orders:
            for order in self._running_orders.values():
                order.add(job)
        for partner in partners:
            self._refresh(partner)

    def _rate(self, job: JobState, partners: set[JobState] | None = None) -> float:
        """Solo speed at its placement and sub-batch, divided by the worst slowdown any of its
        partners (when not given, those the occupancy finds) causes: a multi-GPU job runs at the
        pace of its slowest worker."""
        if partners is None:
            partners = self.occupancy.partners(job)
        slowdown = 1.0
        for partner in partners:
            xi = self.workload.slowdown(job, partner)
            if xi is None:
                raise PlanError(
                    f"jobs {job.job_id} and {partner.job_id} share a GPU without a "
                    "co-location measurement"
                )
            slowdown = max(slowdown, xi)
        self._note_sharing(job, bool(partners), slowdown)
        return self.workload(job, job.gpus) / slowdown

    def _note_sharing(self, job: JobState, sharing: bool, slowdown: float) -> None:
        """Add the interval since the job's last change to its sharing totals, then record
        its new state."""
        now = self.now
        if job.sharing and now > job.slowdown_since:
            job.shared_s += now - job.slowdown_since
            job.shared_slowdown_s += job.slowdown * (now - job.slowdown_since)
        job.sharing, job.slowdown, job.slowdown_since = sharing, slowdown, now
        candidates = self._candidates
        if candidates is not None:
            if may_take_partner(job):  # (a job leaving its GPUs too: _leave_gpus takes it out)
                candidates[job.job_id] = job
            else:
                candidates.pop(job.job_id, None)

    def _refresh(self, job: JobState) -> None:
        """Recompute a running job's speed after its partners changed."""
        if self.restore_full_batch and job.accumulation > 1 and not self.occupancy.partners(job):
            job.accumulation = 1
            job.memory_mib = self.workload.memory_mib(job.spec, len(job.gpus), 1)
            self.occupancy.recount(job)
        self._set_rate(job, self._rate(job))

    def _resize(self, job: JobState, gpus: tuple[int, ...]) -> None:
        """Change a running elastic job's GPUs (checked by :class:`PlanCheck`), charging the
        configured mechanism."""
        spec, costs, now = job.spec, self.costs, self.now
        old = set(job.gpus)
        added = [g for g in gpus if g not in old]
        moving = self.leaving_workers_wait(bool(added))
        self.free.take(added)
        self._advance(job)
        self._account(job)
        old_memory = job.memory_mib
        # it shares no GPU (PlanCheck); the GPUs it keeps, and those a move's old workers hold
        # until its switch, stay taken
        _, idle = self.occupancy.detach(job)
        # (its memory first: the sharing candidates are kept as its sharing is noted)
        job.memory_mib = self.workload.memory_mib(spec, len(gpus), job.accumulation)
        self._note_sharing(job, False, 1.0)
        new = set(gpus)
        if moving:
            job.leaving = tuple(g for g in job.gpus if g not in new)
        else:
            self.free.release([g for g in idle if g not in new])
        self._held(job.spec.tenant, len(gpus) - len(old))
        if spec.elastic:
            self._size_elastic(job, len(old), len(gpus))
        job.gpus = tuple(gpus)
        self.occupancy.attach(job)
        if job.leaving:
            self.occupancy.hold_leaving(job, old_memory)
        job.resizes += 1
        pause = self.resize_pause_s(spec)
        if costs.resize_mechanism == "stop-resume":
            job.resume_at = max(job.resume_at, now) + pause
            job.resize_lost_gpu_s += pause * len(gpus)
        elif added:  # background scale-out: the old workers go on meanwhile
            job.switch_at = switch_at = now + pause
            job.resize_lost_gpu_s += pause * len(
                added
            ) + costs.background_switch_fraction * pause * len(gpus)
            self._schedule_completion(job)  # at the old speed, until the switch
            self.changes.switches.append((switch_at, job.seq, job.version, job))
            return
        elif self.scale_in_switch_reported:  # background scale-in: the executor reports it
            job.switch_at = now
        job.rate = self._rate(job)  # (a background scale-in: no pause for the stayers)
        self._schedule_completion(job)

    def _stop(self, job: JobState, by_policy: bool, counted: bool = True) -> None:
        """Take a running job off its GPUs and put it back in the queue: a policy's preemption
        (which checkpoints first when ``checkpoint_on_preempt``) or a failure."""
        if job.status is not RUNNING:
            raise PlanError(
                f"policy {self.policy.name} preempted job {job.job_id}, which is {job.status.value}"
            )
        now = self.now
        self._advance(job)
        interval = self.costs.checkpoint_interval_s
        graceful = by_policy and self.costs.checkpoint_on_preempt
        if not graceful and interval is not None and now > job.resume_at:
            lost_wall = (now - job.resume_at) % interval
            job.done_s = max(0.0, job.done_s - job.rate * lost_wall)
        partners = self._leave_gpus(job)
        job.gpus = ()
        job.status = PENDING
        job.rate = 0.0
        job.finish_time = INF
        job.version += 1
        if by_policy:
            job.preemptions += 1
        elif counted:
            job.failures += 1
        job.pending_since = now
        self._wait(job)
        for partner in partners:
            self._refresh(partner)

    def _wait(self, job: JobState) -> None:
        self.pending[job.job_id] = job
        self._queue(job)

    def _unwait(self, job: JobState) -> None:
        del self.pending[job.job_id]
        self._unqueue(job)

    def _queue(self, job: JobState) -> None:
        queues = self._queues if job.admitted else self._held_back
        if queues:
            for queue in queues.values():
                queue.add(job)
        if self.admission is not None and job.admitted:
            self.admissions.waits(job, +1)

    def _unqueue(self, job: JobState) -> None:
        queues = self._queues if job.admitted else self._held_back
        if queues:
            for queue in queues.values():
                queue.remove(job)
        if self.admission is not None and job.admitted:
            self.admissions.waits(job, -1)

    def _leave_admission(self, job: JobState) -> None:
        if self.admission is not None and job.admitted:
            self.admissions.remove(job)

    def _requeued(self, job: JobState) -> None:
        """The job stopped by no plan of the policy's (failure, reclaim's deadline)."""
        if self.admission is not None:
            self.admission.job_requeued(job, self.now)
        self.policy.job_requeued(job, self.now)

    # -- accounting ------------------------------------------------------------------------------
    def _account(self, job: JobState) -> None:
        """Add the GPU-time since the job's GPUs last changed to its totals."""
        now = self.now
        job.attained_gpu_s += len(job.gpus) * (now - job.gpus_since)
        since = job.gpus_since if job.gpus_since > job.resume_at else job.resume_at
        if now > since:
            job.executed_gpu_s += len(job.gpus) * (now - since)
        job.gpus_since = now

    def _account_run(self, job: JobState) -> None:
        """Add the run that ends now to the job's GPU-time totals."""
        self._account(job)
        job.run_time_s += self.now - job.segment_start

    def _held(self, tenant: str, change: int) -> None:
        held = self.tenant_gpus[tenant] = self.tenant_gpus.get(tenant, 0) + change
        if self.admission is not None:
            self.admissions.count(tenant, change)
        if self.tenant_log is not None and change:
            self.tenant_log.append(self.now, tenant, held)

    def _leave_gpus(self, job: JobState) -> set[JobState]:
        """The job's run ends now (finished, stopped or cancelled): account it, take the job off
        its GPUs and out of the running jobs; return its former partners."""
        self._held(job.spec.tenant, -len(job.gpus))
        if job.elastic:
            self._size_elastic(job, len(job.gpus), 0)
        self._account_run(job)
        partners = self._vacate(job)
        job.switch_at = None
        del self.running[job.job_id]
        if self._candidates is not None:
            self._candidates.pop(job.job_id, None)
        if self._running_orders:
            for order in self._running_orders.values():
                order.remove(job)
        if self._running_drifts:
            for drift in self._running_drifts.values():
                drift.remove(job.job_id)
        return partners

    def _size_elastic(self, job: JobState, old: int, new: int) -> None:
        """An elastic job's GPUs went from ``old`` to ``new`` (0: not running): its place in
        the indexes of running elastic jobs."""
        jid, base, request = job.job_id, job.base_gpus, job.num_gpus
        if old:
            self.elastic_extra_gpus -= old - base
            self.elastic_grown_gpus -= max(0, old - request)
        if new:
            self.elastic_extra_gpus += new - base
            self.elastic_grown_gpus += max(0, new - request)
            self.running_elastic[jid] = job  # (a resized job keeps its place)
        else:
            del self.running_elastic[jid]
        if new > base:
            self.elastic_above_base[jid] = job
        else:
            self.elastic_above_base.pop(jid, None)
        if new and one_more_gpu_helps(self.workload, job.spec, new):
            self.elastic_growable[jid] = job
        else:
            self.elastic_growable.pop(jid, None)

    def _vacate(self, job: JobState) -> set[JobState]:
        """Take the job off its GPUs; free those nobody else holds; return its partners."""
        partners, idle = self.occupancy.detach(job)
        self.free.release(idle)
        if job.leaving:  # a background move's old workers stop with it
            self.free.release(self.occupancy.drop_leaving(job))
            job.leaving = ()
        self._note_sharing(job, False, 1.0)
        return partners


def may_take_partner(job: JobView) -> bool:
    """Whether a sharing policy may pair a job with this running one: it shares no GPU, and
    its model and memory are known (the measurements a pairing needs)."""
    return not job.sharing and job.memory_mib is not None and job.spec.model is not None


if TYPE_CHECKING:

    def _policies_read_the_state(state: ClusterState) -> PolicyView:
        return state  # the type checker holds the state to the view's Protocol here

    class _CheckedPlan(Protocol):
        """A plan the check passed: its jobs are the state's own."""

        start: list[tuple[JobState, tuple[int, ...]]]
        preempt: list[JobState]
        resize: list[tuple[JobState, tuple[int, ...]]]
