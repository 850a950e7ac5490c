"""Preemptive priority scheduling, shared by SRTF and Tiresias.

Every active job has a rank at time ``now`` (lower is better). The best pending job starts if
it can be placed; otherwise running jobs of strictly worse rank are preempted, worst first,
until it can be placed (if even all of them would not make room, nobody is preempted). Strict
by default: a pending job that cannot start blocks those behind it; with ``backfill=True``
they may still take free GPUs, without preempting anyone.

Subclasses give ``rank(job, now)`` and ``worst_first(job)``, a key that orders running jobs
worst first and stays valid while a job runs unless the subclass calls :meth:`_rekey_running`.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort

from ..jobs import JobState
from .base import PolicyView, Plan, Policy


class PreemptivePolicy(Policy):
    uses_pass_hooks = False   # subclasses with before_pass / after_pass set it

    def __init__(self, placement: str = "best-fit", backfill: bool = False) -> None:
        super().__init__(placement, backfill)
        self.queue: list[tuple] = []          # (rank..., seq, job), best first
        self.running: list[tuple] = []        # heap of (worst_first..., stamp, job)
        self._entry: dict[str, tuple] = {}    # job id -> its entry in queue
        self._stamp: dict[str, int] = {}      # job id -> stamp of its valid running entry
        self._next_stamp = 0

    # -- subclass interface ----------------------------------------------------------------
    def rank(self, job: JobState, now: float) -> tuple:
        raise NotImplementedError

    def worst_first(self, job: JobState) -> tuple:
        raise NotImplementedError

    def outranks(self, job: JobState, victim: JobState, now: float) -> bool:
        """May ``job`` preempt ``victim``? By default when its rank is strictly better."""
        return self.rank(victim, now) > self.rank(job, now)

    def preemptible_gpus(self, job: JobState) -> float:
        """An upper bound on the GPUs that preempting could free for ``job``; lets a pass skip
        a futile search. By default no bound."""
        return float("inf")

    def on_timers(self, view: PolicyView) -> None:
        """Hook: apply rank changes that are due at ``view.now``."""

    def before_pass(self, view: PolicyView, plan: Plan, scratch) -> None:
        """Hook: add to the plan (e.g. resizes) before jobs are started; ``scratch`` is a copy
        of the free-GPU index to keep in step."""

    def after_pass(self, view: PolicyView, plan: Plan, scratch) -> None:
        """Hook: use what the pass left free."""

    def planned_gpus(self, job: JobState) -> tuple[int, ...]:
        """The GPUs a running job holds once this pass's plan is applied (its current ones
        unless a hook resized it)."""
        return job.gpus

    def victim_preempted(self, victim: JobState, plan: Plan) -> None:
        """Hook: ``victim`` is preempted by this pass's plan."""

    def next_timer(self) -> float | None:
        return None

    def started(self, job: JobState, now: float) -> None:
        """Hook: ``job`` was just put in a plan to start."""

    def stopped(self, job: JobState, now: float) -> None:
        """Hook: ``job`` was preempted, requeued or finished."""

    # -- indexes ---------------------------------------------------------------------------
    def _enqueue(self, job: JobState, now: float) -> None:
        entry = (*self.rank(job, now), job.seq, job)
        self._entry[job.job_id] = entry
        insort(self.queue, entry)

    def _push_running(self, job: JobState) -> None:
        self._next_stamp += 1
        self._stamp[job.job_id] = self._next_stamp
        heapq.heappush(self.running, (*self.worst_first(job), self._next_stamp, job))

    def is_running(self, job_id: str) -> bool:
        """The job runs and is not a victim of the pass under way."""
        return job_id in self._stamp

    def _rekey_running(self, job: JobState) -> None:
        self._push_running(job)  # the old entry goes stale

    def _requeue_pending(self, job: JobState, now: float) -> None:
        """Re-rank a pending job (its rank changed)."""
        i = bisect_left(self.queue, self._entry.pop(job.job_id))
        del self.queue[i]
        self._enqueue(job, now)

    def _pop_worst(self) -> JobState | None:
        while self.running:
            entry = heapq.heappop(self.running)
            job = entry[-1]
            if self._stamp.get(job.job_id) == entry[-2]:
                del self._stamp[job.job_id]
                return job
        return None

    def _peek_worst(self) -> JobState | None:
        while self.running:
            entry = self.running[0]
            job = entry[-1]
            if self._stamp.get(job.job_id) == entry[-2]:
                return job
            heapq.heappop(self.running)
        return None

    # -- notifications ---------------------------------------------------------------------
    def job_arrived(self, job: JobState, now: float) -> None:
        self._enqueue(job, now)

    def job_finished(self, job: JobState, now: float) -> None:
        self._stamp.pop(job.job_id, None)
        self.stopped(job, now)

    def job_cancelled(self, job: JobState, now: float) -> None:
        del self.queue[bisect_left(self.queue, self._entry.pop(job.job_id))]

    def job_requeued(self, job: JobState, now: float) -> None:
        self._stamp.pop(job.job_id, None)
        self.stopped(job, now)
        self._enqueue(job, now)

    # -- the decision ----------------------------------------------------------------------
    def schedule(self, view: PolicyView) -> Plan:
        now = view.now
        self.on_timers(view)
        plan = Plan()
        scratch = None
        if self.uses_pass_hooks:
            scratch = view.free.copy()
            self.before_pass(view, plan, scratch)
        blocked = False
        victims_now: set[str] = set()
        i = 0
        while i < len(self.queue):
            job: JobState = self.queue[i][-1]
            if job.job_id in victims_now:    # just preempted: it cannot start again now
                if not self.backfill:
                    break
                blocked = True
                i += 1
                continue
            free = view.free if scratch is None else scratch
            gpus = None
            if job.num_gpus <= free.total:
                gpus = self.place(free, job.num_gpus, job.spec.gpu_types)
            if gpus is None and not blocked and self._can_preempt_for(job, now, free.total):
                if scratch is None:
                    scratch = free = view.free.copy()
                gpus = self._make_room(job, now, scratch, plan, victims_now)
            if gpus is None:
                if not self.backfill:
                    break
                blocked = True
                i += 1
                continue
            if scratch is None:
                scratch = view.free.copy()
            scratch.take(gpus)
            plan.start.append((job, gpus))
            del self.queue[i]
            del self._entry[job.job_id]
            self.started(job, now)
            self._push_running(job)
        if self.uses_pass_hooks:
            self.after_pass(view, plan, scratch if scratch is not None else view.free.copy())
        plan.wakeup_at = self.next_timer()
        return plan

    def _can_preempt_for(self, job: JobState, now: float, free_total: int) -> bool:
        if free_total + self.preemptible_gpus(job) < job.num_gpus:
            return False
        worst = self._peek_worst()
        return worst is not None and self.outranks(job, worst, now)

    def _make_room(self, job: JobState, now: float, scratch, plan: Plan,
                   victims_now: set[str]) -> tuple[int, ...] | None:
        """Preempt worse-ranked running jobs, worst first, until ``job`` can be placed.
        Leaves everything as it was if that is impossible."""
        popped: list[JobState] = []
        gpus = None
        while gpus is None:
            worst = self._peek_worst()
            if worst is None or not self.outranks(job, worst, now):
                break
            popped.append(self._pop_worst())
            scratch.release(self.planned_gpus(worst))
            if job.num_gpus <= scratch.total:
                gpus = self.place(scratch, job.num_gpus, job.spec.gpu_types)
        if gpus is None:
            for victim in popped:
                scratch.take(self.planned_gpus(victim))
                self._push_running(victim)
            return None
        for victim in popped:
            self.victim_preempted(victim, plan)
            plan.preempt.append(victim)
            victims_now.add(victim.job_id)
            self.stopped(victim, now)
            self._enqueue(victim, now)   # ranks worse than job: it lands behind the cursor
        return gpus
