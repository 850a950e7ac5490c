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
import math
from bisect import bisect_right
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from typing import Protocol

from ..jobs import CANCELLED, JobView
from ..state.drifting import rounding_margin
from ..state.free import FreeGpus
from ..view import DriftingJobs, JobQueue, RunningJobs
from .base import Plan, Policy, PolicyView
from .queued import size_kind


class _EveryJob:
    """A container of every job id."""

    def __contains__(self, job_id: object) -> bool:
        return True


EVERY_JOB = _EveryJob()


class PreemptiveOrder:
    """How a preemptive policy ranks jobs. ``policy`` is set by the policy that uses it."""

    policy: PreemptivePolicy

    # True when running jobs' order drifts with time (SRTF: jobs progress at different speeds,
    # and not at all while they pause to restart). The state then keeps running jobs by
    # ``linear_key`` (:mod:`dlsched.state.drifting`) and the policy compares them by
    # ``exact_worst_first``; such an order's ``outranks`` must follow ``rank`` (a pass relies
    # on it to stop asking).
    drifting_keys = False

    def rank(self, job: JobView, now: float) -> tuple:
        raise NotImplementedError

    def worst_first(self, job: JobView) -> tuple:
        """The key the state keeps running jobs by (:mod:`dlsched.state.running`), worst
        first; when it changes for a running job, the order says so
        (``policy.running_order(view).rekey(job)``)."""
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

    def preemptible_gpus(self, job: JobView, enough: float = math.inf) -> float:
        """An upper bound on the GPUs that preempting could free for ``job``, or any number of
        at least ``enough`` once that bound reaches it (the pass asks only whether preempting
        could free ``enough``); lets a pass skip a futile search. By default no bound."""
        return math.inf

    def low_priority(self) -> Container[str]:
        """For elastic growth: the ids of the jobs that shrink first when many jobs wait (by
        default every job). Asked once a pass: the part tests each job against it."""
        return EVERY_JOB

    def on_timers(self, view: PolicyView) -> None:
        """Apply rank changes that are due at ``view.now``."""

    def begin_pass(self, running: RunningJobs) -> None:
        """A pass begins (after the timers) over these running jobs (an order without drifting
        keys)."""

    def next_timer(self) -> float | None:
        return None

    def started(self, job: JobView, now: float) -> None:
        """``job`` was just put in a plan to start."""

    def resized(self, job: JobView, gpus: int, now: float) -> None:
        """The pass put ``job`` (to start, or running) on ``gpus`` GPUs, not the number it
        asked for or held: the elastic part grew it, or the admission stage changed it (0: its
        start withdrawn)."""

    def stopped(self, job: JobView, now: float) -> None:
        """``job`` was put in a plan to be preempted, or was requeued or finished."""

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
        self.resizes_elastic = elastic is not None
        if elastic is not None:
            elastic.attach(self)
        # the state's index of running jobs in the order's worst-first order, and the key
        # functions it is asked by (one object each: the state keeps an index per key)
        self._ordered: RunningJobs | None = None
        self._drifting: DriftingJobs | None = None
        self._worst_first = order.worst_first
        self._linear_key = order.linear_key
        # the pass under way's: its time, its running jobs (a what-if view's, with the quota
        # stage), the victims chosen so far, and a count of victims chosen or spared (it tells
        # whether a cached worst job still is)
        self._now = 0.0
        self._plan: Plan | None = None  # the plan returned (the stage may resize its jobs)
        self._live: Mapping[str, JobView] | None = None
        self._victims: set[str] = set()
        self._moves = 0
        # (moves, job): the worst running job found at that count; and the count at which a
        # job of the pass could not outrank it (drifting keys)
        self._worst: tuple[int, JobView | None] | None = None
        self._cannot_outrank: int | None = None
        # (moves, bound): the preemptible GPUs bound of the last job asked whose count did not
        # stop at what it needed (drifting keys)
        self._bound: tuple[int, float] | None = None
        self._rank = self.pending_rank  # the queue's key: one object, asked for every pass
        # the pass's view's GPUs of a running job (a job the quota stage scales in this pass
        # holds fewer than job.gpus says)
        self._gpus_of: Callable[[JobView], tuple[int, ...]] = lambda job: job.gpus

    def params(self) -> dict:
        params = {**super().params(), **self.order.params()}
        return params if self.elastic is None else {**params, **self.elastic.params()}

    # -- indexes ---------------------------------------------------------------------------
    def running_order(self, view: PolicyView) -> RunningJobs:
        """The state's index of the running jobs in the order's ``worst_first`` order (an
        order without drifting keys)."""
        return view.running_order(self._worst_first)

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
        if not plan.start and not plan.preempt:
            return len(queue), queue
        started = {job.job_id for job, _ in plan.start}
        count = len(queue) - len(started) + len(plan.preempt)
        if not plan.preempt:
            return count, (e[2] for e in queue.merged() if e[2].job_id not in started)
        victims = sorted((self.order.rank(v, view.now), v.seq, v) for v in plan.preempt)
        return count, _with_victims(queue.merged(), started, victims)

    def _take(self, job: JobView) -> None:
        """The running job is a victim of the pass under way."""
        self._victims.add(job.job_id)
        self._moves += 1

    def _spare(self, job: JobView) -> None:
        """A victim chosen in the pass runs on after all."""
        self._victims.remove(job.job_id)
        self._moves += 1

    def _peek_worst(self) -> JobView | None:
        """The worst running job that is not yet a victim of the pass."""
        cached = self._worst
        if cached is not None and cached[0] == self._moves:
            return cached[1]
        if self._drifting is not None:
            job = self._drifting.worst(
                self.order.exact_worst_first, self._now, self._victims, self._live
            )
        else:
            assert self._ordered is not None  # asked in a pass
            job = self._ordered.worst(self._victims, self._live)
        self._worst = (self._moves, job)
        return job

    def drifting_gpus_from(self, badness: float, now: float, enough: float = math.inf) -> int:
        """With drifting keys: an upper bound on the GPUs held by the running jobs whose
        badness (in ``linear_key``'s units) is at least ``badness`` at ``now``, counted up to
        ``enough`` (``preemptible_gpus``); a margin covers the rounding of keys computed
        differently."""
        assert self._drifting is not None  # asked in a pass, by an order with drifting keys
        return self._drifting.gpus_from(
            badness - rounding_margin(badness, now), now, self._victims, enough
        )

    # -- notifications ---------------------------------------------------------------------
    def job_finished(self, job: JobView, now: float) -> None:
        self.order.stopped(job, now)

    def job_requeued(self, job: JobView, now: float) -> None:
        self.order.stopped(job, now)

    def job_resized(self, job: JobView, gpus: tuple[int, ...], now: float) -> None:
        self.order.resized(job, len(gpus), now)
        # the order's timers moved: the wake-up of this pass's plan with them (the stage also
        # tells of a scale-in it decides when it admits, before the pass: its plan asks anew)
        if self._plan is not None and now == self._now:
            self._plan.wakeup_at = self.order.next_timer()

    def job_cancelled(self, job: JobView, now: float) -> None:
        # (a job the quota stage evicts before it started is told so too, and waits on)
        if job.status is CANCELLED:  # the order forgets it (a server runs for months)
            self.order.stopped(job, now)

    # -- the decision ----------------------------------------------------------------------
    def schedule(self, view: PolicyView) -> Plan:
        now = view.now
        self._now = now
        self._gpus_of = view.gpus_of
        self._victims, self._worst, self._cannot_outrank = set(), None, None
        self._bound = None
        self.order.on_timers(view)
        running: DriftingJobs | RunningJobs
        if self.order.drifting_keys:  # (after the timers: SRTF's now moved)
            running = self._drifting = view.running_drift(self._linear_key)
        else:
            running = self._ordered = self.running_order(view)
            self.order.begin_pass(running)
        # the state's index holds every running job; a what-if view (the quota stage's) has
        # fewer, and then each job the index offers is checked against the view's
        self._live = None if len(view.running) == len(running) else view.running
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
        # Without drifting keys, the GPU count a job could make room for is its order's own
        # bound, tested here: most jobs a pass looks at fail it (1.2M of 1.24M in a Tiresias
        # replay of Philly), so a call for each would cost more than the test.
        preemptible = None if self.order.drifting_keys else self.order.preemptible_gpus
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
            if gpus is None and (not blocked or self.scan == "greedy"):
                room = free.total + (0 if elastic is None else elastic.extra_gpus)
                if preemptible is None:
                    # (past a job that cannot outrank the worst running one, none can until the
                    # running jobs change: tested here, as most jobs the scan asks about fail it)
                    can_preempt = self._cannot_outrank != self._moves and (
                        self._can_preempt_with_drift(job, now, room)
                    )
                else:
                    can_preempt = room + preemptible(job) >= job.num_gpus
                    can_preempt = can_preempt and self._outranks_worst(job, now)
                if can_preempt:
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
                if not free.total and preemptible is None and self._cannot_outrank == self._moves:
                    break  # no later job can start (no GPU is free) or preempt (see above)
                blocked = True
                dropped.append((entry, kind))
                continue
            if scratch is None:
                scratch = view.free.copy()
            scratch.take(gpus)
            plan.start.append((job, gpus))
            self._push_next(by_kind, heads, entry, kind)
            self.order.started(job, now)
        if elastic is not None:
            assert scratch is not None  # made before the pass for the elastic part
            elastic.after_pass(view, plan, scratch)
        plan.wakeup_at = self.order.next_timer()
        self._plan = plan
        return plan

    @staticmethod
    def _push_next(by_kind: Mapping, heads: list, entry: tuple, kind: tuple) -> None:
        """The kind's next job after ``entry`` joins the scan (if it has one)."""
        same = by_kind[kind]
        j = bisect_right(same, entry)
        if j < len(same):
            heapq.heappush(heads, (same[j], kind))

    def _can_preempt_with_drift(self, job: JobView, now: float, room: int) -> bool:
        """Whether preempting could make room for ``job`` (``room``: GPUs free, and held above
        requests), for an order with drifting keys, asked unless an earlier job of the scan
        could not outrank the worst running job since the running jobs last changed (the scan
        goes best ranked first, so none can)."""
        # A job later in the scan outranks no running job an earlier one does not, so the
        # earlier one's bound holds for it too while the running jobs stay. A new bound costs
        # more than a look at the worst job, which comes first.
        bound = self._bound
        if bound and bound[0] == self._moves and room + bound[1] < job.num_gpus:
            return False
        worst = self._peek_worst()
        if worst is None or not self.order.outranks(job, worst, now):
            self._cannot_outrank = self._moves
            return False
        enough = job.num_gpus - room
        gpus = self.order.preemptible_gpus(job, enough)
        if gpus < enough:  # counted whole (a count stopped at ``enough`` bounds nothing)
            self._bound = (self._moves, gpus)
            return False
        return True

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
        planned = self._gpus_of if self.elastic is None else self.elastic.planned_gpus
        worst_before = self._peek_worst()
        while gpus is None:
            worst = self._peek_worst()
            if worst is None or not self.order.outranks(job, worst, now):
                break
            self._take(worst)
            popped.append(worst)
            scratch.release(planned(worst))
            if job.num_gpus <= scratch.total:
                gpus = self.place(scratch, job.num_gpus, job.spec.gpu_types)
        if gpus is None:
            spared = popped
            for victim in spared:
                scratch.take_back(planned(victim))
        else:
            spared = []
            # Spare every victim the job can do without, the best ranked first (the last one
            # popped is needed: the job did not fit before it). Placement only gets harder as
            # GPUs are taken back, so one try each leaves no victim that could be spared, and
            # the last placement found uses every victim's GPUs.
            for victim in reversed(popped[:-1]):
                scratch.take_back(planned(victim))
                again = self.place(scratch, job.num_gpus, job.spec.gpu_types)
                if again is None:
                    scratch.release(planned(victim))
                else:
                    spared.append(victim)
                    gpus = again
        for victim in spared:
            self._spare(victim)
        if gpus is None:  # the same running jobs as before: the same worst
            self._worst = (self._moves, worst_before)
            return None
        for victim in popped:
            if victim in spared:
                continue
            if self.elastic is not None:
                self.elastic.victim_preempted(victim, plan)
            plan.preempt.append(victim)
            self.order.stopped(victim, now)
        return gpus
