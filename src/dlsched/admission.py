"""The admission stage: tenant quotas (:mod:`dlsched.tenant_quotas`) with Kueue's semantics.

A scheduling pass runs it before the policy (:func:`schedule_pass`, which both backends call),
as Kueue's scheduler does: the heads of the queues of jobs not admitted, nominated one at a time,
admitted or preempting for room. The policy then orders and places jobs as it does alone, but
its queues hold only *admitted* jobs; afterwards the stage charges the policy's plan to the
tenants and cuts growth beyond what a tenant may take. The cluster state keeps the books (which
jobs are admitted, in what order, what the waiting ones reserve: :mod:`dlsched.state.admitted`),
and what a tenant uses is its admitted jobs' GPUs: a running job's as the state counts them (so
the use follows every change: a failure, a reclaim's scale-in, a cut), a waiting one's base size
(an elastic job's minimum, a rigid job's request); within a pass, the changes the pass plans. A
job is admitted when its tenant's use plus the job's base size fits:

- within the tenant's nominal quota; or
- borrowing: within nominal + borrowing limit, and within its cohort's nominal total (what
  the cohort's other tenants do not use).

A tenant's lending limit keeps the rest of its nominal quota for itself (Kueue's guaranteed
quota): the cohort's total counts only what each tenant may lend, and a tenant's use counts
against the cohort only beyond the part it keeps.

Waiting jobs are considered as Kueue's scheduler orders its entries: those that fit their
tenant's nominal quota before those that would borrow (beyond it, in a cohort), each by priority
class, then submit time (Kueue's BestEffortFIFO: one that does not fit does not hold back the
others). Preemption, as Kueue's ``reclaimWithinCohort: Any`` and ``withinClusterQueue:
LowerPriority``:

- **reclaim**: a job that fits its tenant's nominal quota but not the cohort (others borrowed
  it) takes it back from tenants above their nominal quota, never more than needed: first by
  shrinking their elastic jobs towards their minimum (background scale-in, nobody preempted);
  then by evicting their admitted jobs. Both in Kueue's order of candidates: lower priority
  class first, then (a class's jobs not started before its running ones) the most recently
  admitted.
- **priority**: a job that does not fit its own tenant's limits may take the place of the
  tenant's own jobs of a lower priority class, lowest class first, then youngest; in a
  cohort, only to be within its tenant's nominal quota (unlike Kueue: a job that would borrow
  even so takes only free room, see :meth:`QuotaAdmission._victims`).

Evicted jobs lose their admission and wait to be admitted again. The policy hears of them from
the state as if they finished (or were cancelled, not started), and sees their GPUs (and those
of shrunk jobs) free in the same pass. Growth the policy plans (an elastic job started or resized
larger) is cut to what the tenant may still take (a start beside another job: within its
nominal quota, as it could not scale in for a reclaim), and the policy is told
(``job_resized``): a start keeps its idle GPUs first, then those it would share, and waits
instead (told with no GPUs) when a GPU it keeps could not hold its memory on fewer GPUs beside
the jobs there.

The simulator runs the stage with ``--quotas``; ``dlsched server`` always (without a quota file
every tenant's quota is unlimited, so it only keeps the books the API and metrics read).

Not done: quotas per GPU type; a cohort's own quota and cohorts of cohorts.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field

from .jobs import RUNNING, JobView
from .policies.base import Policy
from .policies.elastic import keep_consolidated, smallest_fitting
from .tenant_quotas import TenantConfig, TenantQuota
from .view import AdmissionBooks, JobQueue, Plan, PolicyView

# When a plan gives quota back, the stage asks for another pass this much later to admit what
# now fits (a pass admits before the policy plans).
READMIT_AFTER_S = 1e-3


@dataclass(frozen=True, slots=True)
class TenantUsage:
    """A tenant's standing under its quota (what the server's API, metrics and dashboard show)."""

    quota: TenantQuota
    used: int  # GPUs its admitted jobs count: running jobs' held GPUs, waiting ones' base sizes
    held: int  # GPUs its running jobs (and profiling runs) hold
    waiting_for_quota: int  # its jobs not admitted yet

    @property
    def borrowed(self) -> int:
        return max(0, self.used - self.quota.nominal)


@dataclass(slots=True)
class Admitted:
    """What the admission step of one pass did besides admitting: running jobs evicted (the
    pass preempts them) and elastic jobs shrunk (job id -> (job, the GPUs it keeps))."""

    evicted: list[JobView] = field(default_factory=list)
    shrunk: dict[str, tuple[JobView, tuple[int, ...]]] = field(default_factory=dict)


def reservation(job: JobView) -> int:
    """What a job not running counts against its tenant's quota once admitted: its base size
    (an elastic job's minimum, raised to where its memory fits)."""
    return job.base_gpus


def admission_order(job: JobView) -> tuple:
    """Jobs waiting for admission: by priority class, then submit time (then arrival)."""
    return (-job.spec.priority, job.spec.submit_time_s)


def admission_bucket(job: JobView) -> tuple:
    """A pass looks at the head of each bucket: one tenant, priority class and size."""
    return (job.spec.tenant, job.spec.priority, reservation(job))


def schedule_pass(state: AdmissionBooks, policy: Policy, admission: QuotaAdmission | None) -> Plan:
    """One scheduling pass: admission (when there is a stage), the policy's plan on what it
    admitted, the plan charged to the tenants' quotas. The state applies the result."""
    if admission is None:
        return policy.schedule(state)
    admitted = admission.admit(state, policy)
    running_gone = [j for j in admitted.evicted if j.status is RUNNING]
    freed = [
        (job, tuple(g for g in job.gpus if g not in kept)) for job, kept in admitted.shrunk.values()
    ]
    view = state.without(running_gone, freed) if running_gone or freed else state
    return admission.charge(view, policy, policy.schedule(view), admitted, running_gone)


def _staying(view: PolicyView, plan: Plan, gpus: tuple[int, ...]) -> dict[int, list[JobView]]:
    """Those of ``gpus`` that other jobs hold once the plan's preemptions and resizes apply,
    with those jobs."""
    occupancy = view.occupancy
    leaving = set(plan.preempt)
    resized = {j.job_id: g for j, g in plan.resize}
    staying: dict[int, list[JobView]] = {}
    for g in gpus:
        if not view.free.is_free(g):
            holders = [
                h
                for h in occupancy.jobs[g]
                if h not in leaving and g in resized.get(h.job_id, h.gpus)
            ]
            if holders:
                staying[g] = holders
    return staying


def _cut_start(
    view: PolicyView,
    plan: Plan,
    job: JobView,
    gpus: tuple[int, ...],
    keep: int,
    staying: dict[int, list[JobView]],
) -> tuple[int, ...] | None:
    """``keep`` of the GPUs a start planned (``staying``: :func:`_staying` of them): the idle
    ones first (with those the plan's preemptions and scale-ins free), then those it would
    share, each the most consolidated; None when it would keep a shared GPU that cannot hold its
    memory on fewer GPUs (larger sub-batches) beside the jobs staying there."""
    occupancy, gpu_node = view.occupancy, view.cluster.gpu_node
    idle = tuple(g for g in gpus if g not in staying)
    if len(idle) >= keep:
        return keep_consolidated(idle, keep, gpu_node)
    joined = keep_consolidated(tuple(staying), keep - len(idle), gpu_node)
    memory = view.workload.memory_mib(job.spec, keep, plan.accumulation.get(job.job_id, 1))
    for g in joined:
        used = [h.memory_mib for h in staying[g]]
        total = None if None in used else sum(m or 0.0 for m in used)
        if occupancy.why_not_join_holders(g, len(used), total, memory):
            return None
    return idle + joined


class QuotaAdmission:
    """The stage: :meth:`admit` before the policy plans, :meth:`charge` after; the queries the
    server reads (:meth:`usage_by_tenant`, :meth:`usage`); the accounting of borrowed and lent
    GPU-hours and evictions (:func:`dlsched.metrics.quota_summary`). Its own fields are per-pass
    arithmetic: the books are the state's."""

    def __init__(self, config: TenantConfig) -> None:
        self.config = config
        # tenant -> GPUs its admitted jobs use: from the state's counts at the start of each
        # pass, then as the pass plans (between passes: as the last pass planned)
        self.used: dict[str, int] = {}
        self._changed = False  # a reservation was released or a job arrived since the last pass
        # per cohort: what its tenants may lend of their nominal quotas, and what they use of
        # it (their use beyond the part they keep), summed (tenants the config does not name
        # add the default's once seen)
        self.cohort_used: dict[str, int] = {}
        # GPUs of inference servers loaned to training now (Aryl): borrowable by every cohort,
        # nobody's nominal quota
        self.loaned_gpus = 0
        # tenant -> its room (_room), as the fields above stand: emptied when one changes
        self._rooms: dict[str, float] = {}
        self._seen: set[str] = set(config.tenants)
        self._sum_cohorts()
        # accounting: GPU-seconds above nominal (borrowed) and unused nominal lent, per tenant
        self.borrowed_gpu_s: dict[str, float] = {}
        self.lent_gpu_s: dict[str, float] = {}
        self.evictions: dict[str, int] = {}  # tenant -> its jobs evicted (reclaim or priority)
        # what each second charges (_rates), as ``used`` and the quotas stand: None when one
        # changed (the charge is made at every change of a job's standing, ``used`` less often)
        self._charges: tuple[list[tuple[str, int]], list[tuple[str, float]]] | None = None
        # for the runtime's metrics and events, drained by it: ("admitted", job, wait_s),
        # ("evicted", job, reason) and ("shrunk", job, "reclaim")
        self.log: list[tuple[str, JobView, float | str]] | None = None
        self._last_t: float | None = None

    def _sum_cohorts(self) -> None:
        """Each cohort's nominal total, of what its tenants may lend: its tenants', the
        default's for each unnamed one seen."""
        self.cohort_nominal: dict[str, int] = {}
        # cohort -> its tenants that may lend some of their nominal quotas, by name
        self._lenders: dict[str, list[tuple[str, TenantQuota]]] = {}
        self._rooms.clear()
        for tenant in self._seen | set(self.used):
            self._add_to_cohort(tenant, self.config.quota(tenant))

    def _add_to_cohort(self, tenant: str, q: TenantQuota) -> None:
        if q.cohort is not None:
            self.cohort_nominal[q.cohort] = (
                self.cohort_nominal.get(q.cohort, 0) + q.nominal - q.kept
            )
            if q.nominal > q.kept:
                lenders = self._lenders.setdefault(q.cohort, [])
                bisect.insort(lenders, (tenant, q), key=lambda lender: lender[0])

    def set_quota(self, tenant: str, quota: TenantQuota, now: float) -> None:
        """Change a tenant's quota at ``now`` (the runtime's admin API): admissions follow at
        the next pass; nothing already admitted is evicted for it, but reclaims may follow. The
        time before is charged at the quotas it had."""
        self._account(now)
        self.config.tenants[tenant] = quota
        self._seen.add(tenant)
        self._sum_cohorts()
        self._sum_cohort_use()
        self._changed = True

    def remove_tenant(self, tenant: str, now: float) -> None:
        """The tenant is gone (the runtime's admin API, which cancels its jobs): its quota
        leaves the books and its cohort's nominal total; what it was charged stays."""
        self._account(now)
        self.config.tenants.pop(tenant, None)
        self._seen.discard(tenant)
        self._sum_cohorts()
        self._sum_cohort_use()
        self._changed = True

    # -- quota arithmetic ---------------------------------------------------------------------
    def fits(self, tenant: str, gpus: int) -> bool:
        return gpus <= self._room(tenant)

    def could_admit(self, books: AdmissionBooks, tenant: str, gpus: int, priority: int) -> bool:
        """Whether a job of base size ``gpus`` and class ``priority`` could be admitted at the
        next pass as the tenant stands: within its nominal quota (taken back by reclaim if
        others borrowed it), within the room borrowing leaves, or in place of the tenant's own
        jobs of a lower class. (The server profiles a job only then: a tenant at its limit does
        not hold GPUs for runs that profile jobs it cannot start.)"""
        nominal = self.config.quota(tenant).nominal
        if self.usage(books, tenant) + gpus <= nominal or self.fits(tenant, gpus):
            return True
        return self._may_take_own_places(books, tenant, priority, gpus)

    def _may_take_own_places(
        self, books: AdmissionBooks, tenant: str, priority: int, need: int
    ) -> bool:
        """Whether a job could take the places of its tenant's own jobs of a lower class: it
        has some, and (in a cohort) that could bring it within its nominal quota."""
        if not _has_lower_class(books, tenant, priority):
            return False
        q = self.config.quota(tenant)
        return q.cohort is None or need <= q.nominal

    # -- notifications from the state (the policy hears of the same from it) ---------------------
    def job_arrived(self, job: JobView, now: float) -> None:
        """It waits in the state's queue of jobs not admitted; its tenant may be new."""
        tenant = job.spec.tenant
        if tenant not in self._seen:
            self._seen.add(tenant)
            self._add_to_cohort(tenant, self.config.default)
            self._rooms.clear()
        self._changed = True

    # Each change of a job's standing first charges the interval that ends now at the
    # reservations that held over it (borrowed and lent GPU-seconds).
    def job_finished(self, job: JobView, now: float) -> None:
        """An admitted job ended (the state took it out of the books)."""
        self._account(now)
        self._changed = True

    def job_requeued(self, job: JobView, now: float) -> None:
        """An admitted job stopped and waits again, still admitted, at its base size."""
        self._account(now)

    def job_cancelled(self, job: JobView, now: float) -> None:
        """An admitted job was cancelled before it ran."""
        self._account(now)
        self._changed = True

    def admission_undone(self, job: JobView, admitted: bool, now: float) -> None:
        """The plan of the pass that admitted (``admitted`` False) or evicted the job was
        refused: the state took that back; so is the eviction's count and the pass's log, and
        the next pass admits anew."""
        self._account(now)
        if admitted:
            tenant = job.spec.tenant
            self.evictions[tenant] -= 1
            if not self.evictions[tenant]:
                del self.evictions[tenant]
        if self.log is not None:
            self.log.clear()
        self._changed = True

    @staticmethod
    def _counts(job: JobView, shrunk: dict) -> int:
        """What an admitted job counts against its tenant now (``shrunk``: this pass's
        scale-ins)."""
        if job.job_id in shrunk:
            return len(shrunk[job.job_id][1])
        return len(job.gpus) if job.status is RUNNING else reservation(job)

    def _use(self, tenant: str, n: int) -> None:
        """The tenant's use (and its cohort's) changes by ``n`` in this pass."""
        if not n:
            return
        self._rooms.clear()
        self._charges = None
        before = self.used.get(tenant, 0)
        self.used[tenant] = before + n
        if not self.used[tenant]:
            del self.used[tenant]
        q = self.config.quota(tenant)
        if q.cohort is not None:
            n = q.cohort_use(before + n) - q.cohort_use(before)
            self.cohort_used[q.cohort] = self.cohort_used.get(q.cohort, 0) + n
        if n < 0:
            self._changed = True

    # -- queries (the server's API, metrics and dashboard) ----------------------------------------
    def usage_by_tenant(self, books: AdmissionBooks) -> dict[str, TenantUsage]:
        """Every tenant with a quota, GPUs or waiting jobs: its standing now."""
        held, counted = books.tenant_gpus, books.admissions.counted
        not_admitted: dict[str, int] = {}
        for (t, _, _), bucket in self._held_back(books).buckets.items():
            not_admitted[t] = not_admitted.get(t, 0) + len(bucket)
        tenants = (
            set(self.config.tenants)
            | set(held)  # also those whose last job ended: their gauges go to 0
            | {j.spec.tenant for j in books.pending.values()}
        )
        return {
            t: TenantUsage(
                self.config.quota(t),
                counted.get(t, 0),
                held.get(t, 0),
                not_admitted.get(t, 0),
            )
            for t in sorted(tenants)
        }

    @staticmethod
    def usage(books: AdmissionBooks, tenant: str) -> int:
        """GPUs the tenant's admitted jobs count now: its running jobs' (and profiling runs')
        as the state counts them, and its waiting admitted jobs' base sizes."""
        return books.admissions.counted.get(tenant, 0)

    def _recount(self, books: AdmissionBooks) -> None:
        """Each tenant's use at the start of a pass, from the state."""
        used = books.admissions.counted
        nodes = books.cluster.nodes
        loaned_gpus = sum(nodes[n].num_gpus for n in books.loans.loaned)
        if used == self.used and loaned_gpus == self.loaned_gpus:
            return  # the cohorts' use and the rooms stand as the last pass left them
        if any(used.get(t, 0) < n for t, n in self.used.items()):
            self._changed = True  # quota came back since the last pass
        self.used = dict(used)  # (the pass changes its own as it plans)
        self.loaned_gpus = loaned_gpus
        self._sum_cohort_use()

    def _sum_cohort_use(self) -> None:
        self.cohort_used = {}
        self._rooms.clear()
        self._charges = None
        for t, n in self.used.items():
            q = self.config.quota(t)
            if q.cohort is not None:
                self.cohort_used[q.cohort] = self.cohort_used.get(q.cohort, 0) + q.cohort_use(n)

    def _room(self, tenant: str) -> float:
        """How many more GPUs the tenant may count now: in a cohort, what it keeps unused of
        its nominal quota and what the cohort has room for, within its borrowing limit (as
        Kueue's ``available``)."""
        room = self._rooms.get(tenant)
        if room is None:
            q, used = self.config.quota(tenant), self.used.get(tenant, 0)
            if q.cohort is None:
                room = q.nominal - used
            elif used >= q.kept:  # (without a lending limit, always)
                room = min(q.limit - used, self._cohort_room(q.cohort))
            else:
                room = q.kept - used + min(q.limit - q.kept, self._cohort_room(q.cohort))
            self._rooms[tenant] = room
        return room

    def _cohort_room(self, cohort: str) -> int:
        """What the cohort's tenants may still take: its unused nominal total (negative when
        it is beyond it, on loans), and the loaned GPUs other cohorts do not use (a cohort's
        use beyond its nominal total is on loans)."""
        unused = self.cohort_nominal.get(cohort, 0) - self.cohort_used.get(cohort, 0)
        if not self.loaned_gpus:
            return unused
        others = sum(
            max(0, n - self.cohort_nominal.get(c, 0))
            for c, n in self.cohort_used.items()
            if c != cohort
        )
        return unused + max(0, self.loaned_gpus - others)

    # -- the pass ---------------------------------------------------------------------------------
    @staticmethod
    def _held_back(books: AdmissionBooks) -> JobQueue:
        """The state's jobs not admitted, in buckets of one tenant, priority class and size."""
        return books.not_admitted(admission_order, admission_bucket)

    def admit(self, books: AdmissionBooks, policy: Policy) -> Admitted:
        """Kueue's cycle over the jobs not admitted: the head of each (tenant, priority class,
        size) bucket is nominated, those within their tenant's nominal quota first, then those
        that would borrow (Kueue's order of entries), each in admission order; it is admitted
        if it fits, or if evicting and shrinking other jobs makes it fit (:meth:`_victims`); a
        bucket whose head cannot is not looked at again, nor the tenant's larger ones of that
        class. Runs only when quota came back or a job arrived since the last pass."""
        now = books.now
        self._recount(books)
        self._account(now)
        done = Admitted()
        if not self._changed:
            return done
        self._changed = False
        shrunk = done.shrunk
        buckets = self._held_back(books).buckets
        # Heads that fail as the books stand wait aside until the pass admits or evicts (most
        # heads of most passes: 2.5 million of a Philly replay under its VCs' quotas)
        heads: list[tuple] = []
        aside: list[tuple] = []
        for key, bucket in buckets.items():
            entry = (self._borrows(key), bucket[0][:2], key)
            (aside if self._hopeless(books, key) else heads).append(entry)
        heapq.heapify(heads)
        failed: dict[tuple, int] = {}  # (tenant, priority) -> smallest size that failed
        gone: set[str] = set()  # evicted in this pass: admitted again from the next pass
        while heads:
            nominated = heapq.heappop(heads)
            borrows, order, key = nominated
            tenant, priority, need = key
            if not borrows and self._borrows(key):  # its tenant took more since: it borrows
                heapq.heappush(heads, (True, order, key))
                continue
            if need >= failed.get((tenant, priority), need + 1):
                continue  # as large as one that could not be admitted
            head = _first_not(buckets.get(key, ()), gone)
            if head is None:
                continue
            job = head[2]
            if need > self._room(tenant):
                found = self._victims(books, job, need, shrunk)
                if found is None:
                    failed[(tenant, priority)] = need
                    continue
                shrinks, victims = found
                for victim, kept in shrinks:
                    shrunk[victim.job_id] = (victim, kept)
                    self._use(victim.spec.tenant, len(kept) - len(victim.gpus))
                    policy.job_resized(victim, kept, now)
                    if self.log is not None:
                        self.log.append(("shrunk", victim, "reclaim"))
                for victim in victims:
                    reason = "priority" if victim.spec.tenant == tenant else "reclaim"
                    self._evict(books, victim, now, reason, shrunk)
                    done.evicted.append(victim)
                    gone.add(victim.job_id)
            books.admit(job)  # it leaves its bucket; the state tells the policy
            self._use(tenant, reservation(job))
            if self.log is not None:
                self.log.append(("admitted", job, now - job.pending_since))
            if aside:  # the books changed: what was set aside before this head failed then;
                # of the rest, those that fail as the books stand now stay aside
                still: list[tuple] = []
                for entry in aside:
                    if entry < nominated:
                        t, p, n = entry[2]
                        failed[(t, p)] = min(n, failed.get((t, p), n))
                    elif self._hopeless(books, entry[2]):
                        still.append(entry)
                    else:
                        heapq.heappush(heads, entry)
                aside = still
            head = _first_not(buckets.get(key, ()), gone)
            if head is not None:
                heapq.heappush(heads, (self._borrows(key), head[:2], key))
        if done.evicted:
            self._changed = True
        return done

    def _borrows(self, key: tuple) -> bool:
        """Whether the head of the bucket ``key`` would borrow: take its tenant beyond its
        nominal quota as the pass stands (before any eviction it may cause, as Kueue reckons
        it), in a cohort (a tenant without one never borrows)."""
        tenant, _, need = key
        q = self.config.quota(tenant)
        return q.cohort is not None and self.used.get(tenant, 0) + need > q.nominal

    def _hopeless(self, books: AdmissionBooks, key: tuple) -> bool:
        """Whether the head of the bucket ``key`` (tenant, priority class, size) fails as the
        books stand: over its tenant's room, no reclaim within its nominal quota, and no
        job of its tenant's own to take the place of (:meth:`_victims` gives None). A larger
        head of the same tenant and class fails then too."""
        tenant, priority, need = key
        return (
            need > self._room(tenant)
            and self._reclaim_cohort(tenant, need) is None
            and not self._may_take_own_places(books, tenant, priority, need)
        )

    def _reclaim_cohort(self, tenant: str, need: int) -> str | None:
        """The tenant's cohort when ``need`` more GPUs fit its nominal quota there: they may be
        taken back from the cohort's borrowers (else None)."""
        q = self.config.quota(tenant)
        if q.cohort is not None and self.used.get(tenant, 0) + need <= q.nominal:
            return q.cohort
        return None

    def charge(
        self,
        view: PolicyView,
        policy: Policy,
        planned: Plan,
        admitted: Admitted,
        running_gone: list[JobView],
    ) -> Plan:
        """The policy's plan charged to the tenants: growth beyond what a tenant may take is
        cut (the policy is told), the stage's scale-ins and evictions join it, and a pass soon
        after is asked for when the plan gave quota back."""
        # a copy: policies may return a shared empty plan, which must stay empty
        plan = Plan(
            list(planned.start),
            list(planned.preempt),
            list(planned.resize),
            None,
            dict(planned.accumulation),
        )
        self._hold_to_quota(view, policy, plan, admitted.shrunk)
        plan.wakeup_at = planned.wakeup_at  # (once told of its cuts: it may move its timers)
        if running_gone:
            plan.preempt = running_gone + plan.preempt
        if self._changed:  # the plan gave quota back (a shrink, a smaller start): admit again
            again = view.now + READMIT_AFTER_S
            plan.wakeup_at = again if plan.wakeup_at is None else min(plan.wakeup_at, again)
        return plan

    def _hold_to_quota(self, view: PolicyView, policy: Policy, plan: Plan, shrunk: dict) -> None:
        """Charge the policy's plan; cut growth beyond what tenants may take (and tell it);
        keep one resize per job, the stage's scale-ins first."""
        now = view.now
        for job in plan.preempt:
            if job.admitted:
                self._use(job.spec.tenant, reservation(job) - self._counts(job, shrunk))
        withdrawn = []
        for i, (job, gpus) in enumerate(plan.start):
            if not job.admitted:
                continue
            extra = len(gpus) - reservation(job)
            tenant = job.spec.tenant
            room = self._room(tenant)
            staying = _staying(view, plan, gpus) if extra > 0 or extra > room else {}
            if extra > 0 and staying:
                # beside another job it cannot scale in, so a reclaim would evict it whole (and
                # it would take its nominal quota back at once: tenants took turns for ever):
                # its growth does not borrow
                room = min(room, self.config.quota(tenant).nominal - self.used.get(tenant, 0))
            if extra > room:
                keep = reservation(job) + max(0, int(room))
                cut = _cut_start(view, plan, job, gpus, keep, staying)
                policy.job_resized(job, cut or (), now)
                if cut is None:  # it waits, admitted (no quota came back: no pass sooner)
                    withdrawn.append(i)
                    plan.accumulation.pop(job.job_id, None)
                    continue
                gpus = cut
                plan.start[i] = (job, gpus)
                if staying.keys().isdisjoint(gpus):  # it shares no GPU now: at its full batch
                    plan.accumulation.pop(job.job_id, None)
            self._use(job.spec.tenant, len(gpus) - reservation(job))
        for i in reversed(withdrawn):
            del plan.start[i]
        # a scale-in of a job the policy preempts gives way: the job leaves all its GPUs
        # (charged above at its reservation)
        leaving = set(plan.preempt)
        resizes = {j.job_id: (j, g) for j, g in shrunk.values() if j not in leaving}
        for job, gpus in plan.resize:
            if job.job_id in shrunk:
                kept = shrunk[job.job_id][1]
                if set(gpus) < set(kept):  # the policy, which saw it on ``kept``, shrinks it
                    # further (and may start others on what that frees): that stands
                    self._use(job.spec.tenant, len(gpus) - len(kept))
                    resizes[job.job_id] = (job, gpus)
                else:  # the stage's scale-in stands
                    policy.job_resized(job, kept, now)
                continue
            current = len(job.gpus)
            room = self._room(job.spec.tenant)
            if len(gpus) - current > room:
                kept = [g for g in gpus if g in job.gpus]
                added = [g for g in gpus if g not in job.gpus][
                    : max(0, current + int(room) - len(kept))
                ]
                gpus = tuple(kept + added)
                policy.job_resized(job, gpus, now)
                if set(gpus) == set(job.gpus):
                    continue
            self._use(job.spec.tenant, len(gpus) - current)
            resizes[job.job_id] = (job, gpus)
        plan.resize = list(resizes.values())

    def _victims(
        self, books: AdmissionBooks, job: JobView, need: int, shrunk: dict
    ) -> tuple[list[tuple[JobView, tuple[int, ...]]], list[JobView]] | None:
        """The scale-ins and evictions that make ``job`` fit: (shrinks, evictions), or None
        when none may. As Kueue decides it in one step: the tenant's own jobs of a lower
        class give way as far as the job needs to fit its tenant's nominal quota, then
        borrowers in its cohort give back what the cohort is short of. Under a hard quota, its
        own jobs give way until it fits.

        Unlike Kueue, a job that would borrow even so does not take its own tenant's jobs'
        places (it borrows free room only): it would turn quota its tenant holds within its
        nominal quota into borrowed quota, which a reclaim takes back at once, and then the
        jobs it evicted, within the nominal quota again, come back. With evictions costing
        nothing in the same instant (jobs admitted but not started), passes did that in turn
        for ever (the composition search, on more nominal quota than GPUs)."""
        tenant = job.spec.tenant
        if self._reclaim_cohort(tenant, need) is not None:
            return self._reclaim(books, tenant, self._short(tenant, need, 0), shrunk)
        if not self._may_take_own_places(books, tenant, job.spec.priority, need):
            return None
        hard = self.config.quota(tenant).cohort is None  # (then nothing to reclaim)
        own: list[JobView] = []
        freed = 0
        for _, victim in self._giving_way_first(books, [tenant], below=job.spec.priority):
            if hard:
                if self.fits(tenant, need - freed):
                    break
            elif (
                reclaimed := self._reclaim_within_nominal(books, tenant, need, freed, shrunk)
            ) is not None:
                return reclaimed[0], reclaimed[1] + own
            own.append(victim)
            freed += self._counts(victim, shrunk)
        if hard:
            return ([], own) if own and self.fits(tenant, need - freed) else None
        reclaimed = self._reclaim_within_nominal(books, tenant, need, freed, shrunk)
        return None if reclaimed is None else (reclaimed[0], reclaimed[1] + own)

    def _reclaim_within_nominal(
        self, books: AdmissionBooks, tenant: str, need: int, freed: int, shrunk: dict
    ) -> tuple[list[tuple[JobView, tuple[int, ...]]], list[JobView]] | None:
        """Reclaim for ``need`` GPUs once the tenant's own jobs gave ``freed`` back, when that
        brings the job within its nominal quota (else None)."""
        q = self.config.quota(tenant)
        if q.cohort is None or self.used.get(tenant, 0) - freed + need > q.nominal:
            return None
        return self._reclaim(books, tenant, self._short(tenant, need, freed), shrunk)

    def _short(self, tenant: str, need: int, freed: int) -> int:
        """What the cohort's borrowers must give back for ``need`` more GPUs of the tenant's
        within its nominal quota, once its own jobs gave ``freed`` back: what neither the
        part it keeps nor the cohort's room (grown by what that gave the cohort) holds."""
        q = self.config.quota(tenant)
        used = self.used.get(tenant, 0)
        after = used - freed
        assert q.cohort is not None
        returned = q.cohort_use(used) - q.cohort_use(after)
        return need - max(0, q.kept - after) - self._cohort_room(q.cohort) - returned

    def _reclaim(
        self, books: AdmissionBooks, tenant: str, short: int, shrunk: dict
    ) -> tuple[list[tuple[JobView, tuple[int, ...]]], list[JobView]] | None:
        """Scale-ins and evictions of borrowers in the tenant's cohort that give back
        ``short`` GPUs, or None when they cannot."""
        cohort = self.config.quota(tenant).cohort
        over = {
            t: self.used[t] - self.config.quota(t).nominal
            for t in self.used
            if t != tenant and self.config.quota(t).cohort == cohort
        }
        borrowers = [t for t, o in over.items() if o > 0]
        candidates = self._giving_way_first(books, borrowers)
        shrinks = []
        for _, victim in candidates:  # first, scale-ins of running jobs
            if short <= 0:
                break
            if victim.status is not RUNNING:
                continue
            fewest = smallest_fitting(victim, victim.base_gpus, books)
            excess = 0 if fewest is None else len(victim.gpus) - fewest
            if (
                excess <= 0
                or over[victim.spec.tenant] <= 0
                or victim.job_id in shrunk
                or books.resizing(victim)
                or books.occupancy.partners(victim)
            ):
                continue
            give = min(excess, short, over[victim.spec.tenant])
            kept = keep_consolidated(victim.gpus, len(victim.gpus) - give, books.cluster.gpu_node)
            shrinks.append((victim, kept))
            over[victim.spec.tenant] -= give
            short -= give
        chosen = []
        for _, victim in candidates:
            if short <= 0:
                break
            if over[victim.spec.tenant] <= 0:
                continue
            chosen.append(victim)
            took = next((len(k) for v, k in shrinks if v is victim), self._counts(victim, shrunk))
            over[victim.spec.tenant] -= took
            short -= took
        if short > 0:
            return None
        return [(v, k) for v, k in shrinks if v not in chosen], chosen

    @staticmethod
    def _giving_way_first(
        books: AdmissionBooks,
        tenants: list[str],
        below: int | None = None,
    ) -> list[tuple[int, JobView]]:
        """The tenants' admitted jobs (of a priority below ``below``, when given) in the order
        they give way, Kueue's: lower priority first, then the most recently admitted; within
        a class, those not started before running ones (evicting one costs no work; before
        the class, a waiting high-class job given way evicted its tenant's lower class to come
        back)."""
        admitted = books.admissions.by_tenant
        return sorted(
            (
                (order, j)
                for t in tenants
                for order, j in admitted.get(t, {}).values()
                if below is None or j.spec.priority < below
            ),
            key=lambda e: (e[1].spec.priority, e[1].status is RUNNING, -e[0]),
        )

    def _evict(
        self,
        books: AdmissionBooks,
        victim: JobView,
        now: float,
        reason: str,
        shrunk: dict,
    ) -> None:
        """The victim loses its admission (the state tells the policy it left)."""
        self._use(victim.spec.tenant, -self._counts(victim, shrunk))
        shrunk.pop(victim.job_id, None)
        books.dismiss(victim)
        self.evictions[victim.spec.tenant] = self.evictions.get(victim.spec.tenant, 0) + 1
        if self.log is not None:
            self.log.append(("evicted", victim, reason))

    def _account(self, now: float) -> None:
        """Borrowed and lent GPU-seconds since the last pass, at the reservations then."""
        if self._last_t is not None and now > self._last_t:
            dt = now - self._last_t
            borrowing, lending = self._charges or self._rates()
            for t, over in borrowing:
                self.borrowed_gpu_s[t] = self.borrowed_gpu_s.get(t, 0.0) + over * dt
            for t, rate in lending:
                self.lent_gpu_s[t] = self.lent_gpu_s.get(t, 0.0) + rate * dt
        self._last_t = now

    def _rates(self) -> tuple[list[tuple[str, int]], list[tuple[str, float]]]:
        """Per second as ``used`` stands: the GPUs each tenant uses over its nominal quota, and
        what each tenant lends of them. A cohort's borrowing is lent by its own tenants (those
        whose nominal quotas its total counts), pro rata to what each leaves unused of what it
        may lend, up to all of that: the rest is on loaned inference servers, which no tenant
        lends."""
        borrowing = []
        borrowed: dict[str, int] = {}  # cohort -> GPUs its tenants use over their quotas
        for t, used in self.used.items():
            q = self.config.quota(t)
            over = used - q.nominal
            if over > 0:
                borrowing.append((t, over))
                if q.cohort is not None:
                    borrowed[q.cohort] = borrowed.get(q.cohort, 0) + over
        lending = []
        for cohort, total in borrowed.items():
            unused = []  # (lender, what it leaves unused of what it may lend)
            for t, q in self._lenders.get(cohort, ()):
                lendable = q.nominal - q.kept - q.cohort_use(self.used.get(t, 0))
                if lendable > 0:
                    unused.append((t, lendable))
            pool = sum(u for _, u in unused)
            lent = min(total, pool)
            lending += [(t, lent * u / pool) for t, u in unused]
        self._charges = borrowing, lending
        return self._charges


def _has_lower_class(books: AdmissionBooks, tenant: str, priority: int) -> bool:
    """Whether the tenant has an admitted job of a class below ``priority`` (asked of every
    bucket head over its room in every pass: 2.5 million times in a replay of Philly)."""
    return books.admissions.lowest.get(tenant, priority) < priority


def _first_not(entries: Iterable[tuple], gone: set[str]) -> tuple | None:
    """The first entry ``(key, seq, job)`` whose job is not in ``gone``."""
    for entry in entries:
        if entry[2].job_id not in gone:
            return entry
    return None
