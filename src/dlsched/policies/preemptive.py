"""Preemptive priority scheduling: an order (SRTF's, Tiresias') plus optional elastic growth.

Every active job has a rank at time ``now`` (lower is better). The best pending job starts if
it can be placed; otherwise running jobs the order lets it preempt are preempted, worst first,
until it can be placed (if even all of them would not make room, nobody is preempted); then
those it can be placed without are spared, the best ranked first. Past a job that cannot start, the
scan (``scan``) goes on as the Tiresias simulator's does ("greedy": later jobs start where
they fit and may preempt jobs they outrank), or lets later jobs take only free GPUs
("backfill"), or stops ("strict").

The order (:class:`PreemptiveOrder`) gives ``rank(job, now)`` and ``worst_first(job)``, a key
that orders running jobs worst first and stays valid while a job runs unless the order asks its
policy to re-key the job. An elastic part (:class:`~dlsched.policies.elastic.ElasticGrowth`)
may resize jobs before and after the pass.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple, Protocol

from ..jobs import JobView, Status
from ..state.free import FreeGpus
from ..view import JobQueue
from .base import Plan, Policy, PolicyView
from .drifting import DriftingIndex, rounding_margin
from .queued import size_kind


class RunningEntry(NamedTuple):
    """A running job in the worst-first heap; stale once its job's stamp moved on."""

    worst_first: tuple
    stamp: int  # unique: comparisons stop here
    job: JobView


class PreemptiveOrder:
    """How a preemptive policy ranks jobs. ``policy`` is set by the policy that uses it."""

    policy: PreemptivePolicy

    # True when running jobs' order drifts with time (SRTF: jobs progress at different speeds,
    # and not at all while they pause to restart). The policy then keeps running jobs by
    # ``linear_key`` (:mod:`.drifting`) and compares them by ``exact_worst_first``; such an
    # order's ``outranks`` must follow ``rank`` (a pass relies on it to stop asking).
    drifting_keys = False

    def rank(self, job: JobView, now: float) -> tuple:
        raise NotImplementedError

    def worst_first(self, job: JobView) -> tuple:
        raise NotImplementedError

    def exact_worst_first(self, job: JobView) -> tuple:
        """With ``drifting_keys``: the job's worst-first key at the time of the pass."""
        raise NotImplementedError

    def linear_key(self, job: JobView) -> tuple[float, float, float]:
        """With ``drifting_keys``: (slope, intercept, until) such that, from the pass under way
        until ``until`` while the job runs, its badness is slope x time + intercept, in the
        order ``exact_worst_first`` sorts by (worse: larger). Jobs of one slope keep their
        order; the policy compares only the worst of each slope."""
        raise NotImplementedError

    def outranks(self, job: JobView, victim: JobView, now: float) -> bool:
        """May ``job`` preempt ``victim``? By default when its rank is strictly better."""
        return self.rank(victim, now) > self.rank(job, now)

    def preemptible_gpus(self, job: JobView) -> float:
        """An upper bound on the GPUs that preempting could free for ``job``; lets a pass skip
        a futile search. By default no bound."""
        return float("inf")

    def is_low_priority(self, job: JobView) -> bool:
        """For elastic growth: a job that shrinks first when many jobs wait."""
        return True

    def on_timers(self, view: PolicyView) -> None:
        """Apply rank changes that are due at ``view.now``."""

    def next_timer(self) -> float | None:
        return None

    def started(self, job: JobView, now: float) -> None:
        """``job`` was just put in a plan to start."""

    def stopped(self, job: JobView, now: float) -> None:
        """``job`` was preempted, requeued or finished."""

    def resync(self, view: PolicyView) -> None:
        """The last plan was not applied: recount what ``started`` and ``stopped`` count from
        the running jobs of ``view``."""

    def progressed(self, job: JobView, now: float) -> None:
        """A running job's measured progress replaced the prediction."""

    def params(self) -> dict:
        return {}


class ResizingPart(Protocol):
    """What a preemptive policy asks of a part that resizes elastic jobs around its pass
    (:class:`~dlsched.policies.elastic.ElasticGrowth`)."""

    extra_gpus: int  # GPUs held above requests in the pass: preempting could free them too

    def attach(self, policy: PreemptivePolicy) -> None: ...
    def params(self) -> dict: ...
    def before_pass(self, view: PolicyView, plan: Plan, scratch: FreeGpus) -> None: ...
    def after_pass(self, view: PolicyView, plan: Plan, scratch: FreeGpus) -> None: ...
    def planned_gpus(self, job: JobView) -> tuple[int, ...]: ...
    def victim_preempted(self, victim: JobView, plan: Plan) -> None: ...


def _with_victims(
    entries: Iterable[tuple], started: set[str], victims: list[tuple]
) -> Iterator[JobView]:
    """The queue's jobs but those started, with the (few, sorted) victims at their places."""
    v, last = 0, len(victims)
    for entry in entries:
        if entry[2].job_id in started:
            continue
        while v < last and victims[v] < entry:
            yield victims[v][2]
            v += 1
        yield entry[2]
    for victim in victims[v:]:
        yield victim[2]


class PreemptivePolicy(Policy):
    def __init__(
        self,
        order: PreemptiveOrder,
        placement: str = "best-fit",
        scan: str = "strict",
        elastic: ResizingPart | None = None,
    ) -> None:
        super().__init__(placement, scan)
        self.order = order
        order.policy = self
        self.elastic = elastic
        if elastic is not None:
            elastic.attach(self)
        self.running: list[RunningEntry] = []  # heap, worst first
        self._drifting = DriftingIndex()  # instead, with drifting keys
        self._now = 0.0  # the pass under way's
        # started by the last plan: they join the heap at the next pass, once running (a job
        # started in a pass is never a victim in it: later jobs in the scan rank worse; and a
        # drifting key (its speed) is known only once the job runs)
        self._starting: dict[str, JobView] = {}
        self._stamp: dict[str, int] = {}  # job id -> stamp of its valid running entry
        self._next_stamp = 0
        # drifting keys: (stamp, job) found worst since the last push or pop, and such a worst
        # job that a job of the pass could not outrank
        self._worst: tuple | None = None
        self._cannot_outrank: tuple | None = None
        self._rank = self.pending_rank  # the queue's key: one object, asked for every pass
        self.resyncs = 0  # passes that found the last plan not applied

    def params(self) -> dict:
        params = {**super().params(), **self.order.params()}
        return params if self.elastic is None else {**params, **self.elastic.params()}

    # -- indexes ---------------------------------------------------------------------------
    def is_running(self, job_id: str) -> bool:
        """The job runs and is not a victim of the pass under way."""
        return job_id in self._stamp

    def rekey_running(self, job: JobView) -> None:
        """The running job's rank changed (the old heap entry goes stale)."""
        self._push_running(job)

    def pending_rank(self, job: JobView) -> tuple:
        """A waiting job's rank: the key of the state's queue (fixed while it waits; an order
        that changes it, Tiresias' promotion, re-ranks the job through ``queue.rerank``)."""
        return self.order.rank(job, job.pending_since)

    def queue(self, view: PolicyView) -> JobQueue:
        """The admitted waiting jobs, best first, bucketed by size and GPU types."""
        return view.queue(self._rank, size_kind)

    def waiting_after(self, view: PolicyView, plan: Plan) -> tuple[int, Iterable[JobView]]:
        """How many jobs wait once ``plan`` applies, and those jobs best first: the queue
        without the jobs it starts, with the jobs it preempts at their ranks."""
        queue = self.queue(view)
        entries = queue.entries
        if not plan.start and not plan.preempt:
            return len(entries), queue
        started = {job.job_id for job, _ in plan.start}
        count = len(entries) - len(started) + len(plan.preempt)
        if not plan.preempt:
            return count, (e[2] for e in entries if e[2].job_id not in started)
        victims = sorted((self.order.rank(v, view.now), v.seq, v) for v in plan.preempt)
        return count, _with_victims(entries, started, victims)

    def _push_running(self, job: JobView) -> None:
        self._worst = None
        self._next_stamp += 1
        stamp = self._stamp[job.job_id] = self._next_stamp
        if self.order.drifting_keys:
            self._drifting.add(job, *self.order.linear_key(job))
            return
        heapq.heappush(self.running, RunningEntry(self.order.worst_first(job), stamp, job))
        if len(self.running) > 2 * len(self._stamp) + 64:  # mostly stale: compact
            self.running = [e for e in self.running if self._stamp.get(e.job.job_id) == e.stamp]
            heapq.heapify(self.running)

    def _forget(self, job_id: str) -> None:
        """The job no longer runs, or is a victim of the pass under way."""
        self._stamp.pop(job_id, None)  # its heap entry is stale now
        self._drifting.remove(job_id)

    def _pop_worst(self) -> JobView | None:
        job = self._peek_worst()
        if job is not None:
            self._forget(job.job_id)
        return job

    def _is_worst(self, found: tuple) -> bool:
        """Whether ``found`` (stamp, job) is still the worst: nothing was pushed or popped."""
        return self._stamp.get(found[1].job_id) == found[0]

    def _peek_worst(self) -> JobView | None:
        stamps = self._stamp
        if self.order.drifting_keys:
            cached = self._worst
            if cached is not None and self._is_worst(cached):
                return cached[1]
            best = self._drifting.worst(self.order.exact_worst_first, self._now)
            if best is not None:
                self._worst = (stamps[best.job_id], best)
            return best
        running = self.running
        while running and stamps.get(running[0].job.job_id) != running[0].stamp:
            heapq.heappop(running)
        return running[0].job if running else None

    def drifting_gpus_from(self, badness: float, now: float) -> int:
        """With drifting keys: an upper bound on the GPUs held by the running jobs whose
        badness (in ``linear_key``'s units) is at least ``badness`` at ``now``; a margin covers
        the rounding of keys computed differently."""
        return self._drifting.gpus_from(badness - rounding_margin(badness, now), now)

    def _resync(self, view: PolicyView) -> None:
        """The last plan was not applied (the state refused it, or the runtime skipped it): its
        starts did not happen and its victims still run. Rebuild the running jobs' heaps, and
        the order's counts, from the state."""
        self.resyncs += 1
        self.running, self._drifting, self._stamp = [], DriftingIndex(), {}
        self.order.resync(view)
        for job in view.running.values():
            self._push_running(job)

    # -- notifications ---------------------------------------------------------------------
    def job_finished(self, job: JobView, now: float) -> None:
        self._forget(job.job_id)
        self._starting.pop(job.job_id, None)
        self.order.stopped(job, now)

    def job_requeued(self, job: JobView, now: float) -> None:
        self._forget(job.job_id)
        self._starting.pop(job.job_id, None)
        self.order.stopped(job, now)

    def job_progressed(self, job: JobView, now: float) -> None:
        if self.is_running(job.job_id):
            self.order.progressed(job, now)

    # -- the decision ----------------------------------------------------------------------
    def schedule(self, view: PolicyView) -> Plan:
        now = view.now
        unstarted = False
        for job in self._starting.values():
            if job.status is Status.RUNNING:
                self._push_running(job)
            else:
                unstarted = True
        self._starting = {}
        if unstarted or len(self._stamp) != len(view.running):
            self._resync(view)
        self._worst = None
        self._now = now
        self.order.on_timers(view)
        if self.order.drifting_keys:
            for job in self._drifting.ended(now):  # a pause over: its speed is known now
                self._push_running(job)
        plan = Plan()
        scratch = None
        elastic = self.elastic
        if elastic is not None:
            scratch = view.free.copy()
            elastic.before_pass(view, plan, scratch)
        blocked = False
        # A kind of job (its GPUs and GPU types) that could neither start nor make room cannot
        # later in the pass either, until a preemption frees GPUs: free GPUs only shrink
        # meanwhile, and later jobs rank worse (they outrank fewer running jobs). So the scan
        # merges the kinds' queues in rank order and drops a kind once it fails: a pass costs
        # the jobs that start plus one failure per kind, not the whole queue.
        by_kind = self.queue(view).buckets
        heads = [(same[0], kind) for kind, same in by_kind.items()]
        heapq.heapify(heads)
        dropped: list[tuple[tuple, tuple]] = []
        # preempted in this pass, as queue entries: they wait again (once the plan applies), at
        # their rank, so a scan that passes one is blocked as by any waiting job
        victims: list[tuple] = []
        while heads:
            entry, kind = heapq.heappop(heads)
            job = entry[2]
            if victims and victims[0] < entry:  # the scan passes a victim: it blocks as any job
                if not self.backfill:
                    break
                blocked = True
                while victims and victims[0] < entry:
                    heapq.heappop(victims)
            free = view.free if scratch is None else scratch
            gpus = None
            if job.num_gpus <= free.total:
                gpus = self.place(free, job.num_gpus, job.spec.gpu_types)
            if (
                gpus is None
                and (not blocked or self.scan == "greedy")
                and self._can_preempt_for(job, now, free.total)
            ):
                if scratch is None:
                    scratch = free = view.free.copy()
                preempted = len(plan.preempt)
                gpus = self._make_room(job, now, scratch, plan)
                for victim in plan.preempt[preempted:]:
                    rank = self.order.rank(victim, now)
                    heapq.heappush(victims, (rank, victim.seq, victim))
                if gpus is not None and dropped:  # the victims may free more than it takes
                    for head in dropped:
                        heapq.heappush(heads, head)
                    dropped = []
            if gpus is None:
                if not self.backfill:
                    break
                blocked = True
                dropped.append((entry, kind))
                continue
            if scratch is None:
                scratch = view.free.copy()
            scratch.take(gpus)
            plan.start.append((job, gpus))
            self._push_next(by_kind, heads, entry, kind)
            self.order.started(job, now)
            self._starting[job.job_id] = job
        if elastic is not None:
            assert scratch is not None  # made before the pass for the elastic part
            elastic.after_pass(view, plan, scratch)
        plan.wakeup_at = self.order.next_timer()
        return plan

    @staticmethod
    def _push_next(by_kind: Mapping, heads: list, entry: tuple, kind: tuple) -> None:
        """The kind's next job after ``entry`` joins the scan (if it has one)."""
        same = by_kind[kind]
        j = bisect_right(same, entry)
        if j < len(same):
            heapq.heappush(heads, (same[j], kind))

    def _can_preempt_for(self, job: JobView, now: float, free_total: int) -> bool:
        extra = 0 if self.elastic is None else self.elastic.extra_gpus
        if self.order.drifting_keys:  # its bound costs more than a look at the worst job
            # The scan goes best ranked first: past a job that cannot outrank the worst running
            # job, none can until the running jobs change.
            beaten = self._cannot_outrank
            if beaten is not None and beaten is self._worst and self._is_worst(beaten):
                return False
            if not self._outranks_worst(job, now):
                self._cannot_outrank = self._worst
                return False
            return free_total + self.order.preemptible_gpus(job) + extra >= job.num_gpus
        if free_total + self.order.preemptible_gpus(job) + extra < job.num_gpus:
            return False
        return self._outranks_worst(job, now)

    def _outranks_worst(self, job: JobView, now: float) -> bool:
        worst = self._peek_worst()
        return worst is not None and self.order.outranks(job, worst, now)

    def _make_room(
        self, job: JobView, now: float, scratch: FreeGpus, plan: Plan
    ) -> tuple[int, ...] | None:
        """Preempt worse-ranked running jobs, worst first, until ``job`` can be placed; then
        spare those it can be placed without. Leaves everything as it was if no placement is
        possible."""
        popped: list[JobView] = []
        gpus = None
        planned = (lambda j: j.gpus) if self.elastic is None else self.elastic.planned_gpus
        worst_before = self._peek_worst()
        while gpus is None:
            worst = self._peek_worst()
            if worst is None or not self.order.outranks(job, worst, now):
                break
            self._pop_worst()  # it is ``worst``: just peeked
            popped.append(worst)
            scratch.release(planned(worst))
            if job.num_gpus <= scratch.total:
                gpus = self.place(scratch, job.num_gpus, job.spec.gpu_types)
        if gpus is None:
            spared = popped
            for victim in spared:
                scratch.take(planned(victim))
        else:
            spared = []
            # Spare every victim the job can do without, the best ranked first (the last one
            # popped is needed: the job did not fit before it). Placement only gets harder as
            # GPUs are taken back, so one try each leaves no victim that could be spared, and
            # the last placement found uses every victim's GPUs.
            for victim in reversed(popped[:-1]):
                scratch.take(planned(victim))
                again = self.place(scratch, job.num_gpus, job.spec.gpu_types)
                if again is None:
                    scratch.release(planned(victim))
                else:
                    spared.append(victim)
                    gpus = again
        for victim in spared:
            self._push_running(victim)
        if gpus is None:
            if worst_before is not None:  # the same running jobs as before: the same worst
                self._worst = (self._stamp[worst_before.job_id], worst_before)
            return None
        for victim in popped:
            if victim in spared:
                continue
            if self.elastic is not None:
                self.elastic.victim_preempted(victim, plan)
            plan.preempt.append(victim)
            self.order.stopped(victim, now)
        return gpus
