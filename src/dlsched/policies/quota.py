"""A quota layer over any policy (Kueue's admission, on GPUs; :mod:`dlsched.tenant_quotas`).

The wrapped policy orders and places jobs as it does alone, but it only ever hears of *admitted*
jobs. What a tenant uses is its admitted jobs' GPUs: a running job's as the cluster state counts
them (so the use follows every change, a failure, a reclaim's scale-in, a cut), a waiting one's
base size (an elastic job's minimum, a rigid job's request); within a pass, the changes the pass
plans. A job is admitted when its tenant's use plus the job's base size fits:

- within the tenant's nominal quota; or
- borrowing: within nominal + borrowing limit, and within its cohort's nominal total (what
  the cohort's other tenants do not use).

Waiting jobs are considered by priority class, then submit time (Kueue's BestEffortFIFO: one
that does not fit does not hold back the others). Preemption, as Kueue's ``reclaimWithinCohort:
Any`` and ``withinClusterQueue: LowerPriority``:

- **reclaim**: a job that fits its tenant's nominal quota but not the cohort (others borrowed
  it) takes it back from tenants above their nominal quota, never more than needed: first by
  shrinking their elastic jobs towards their minimum (background scale-in, nobody preempted);
  then by evicting their admitted jobs, those not started first. Both in Kueue's order of
  candidates: lower priority class first, then the most recently admitted.
- **priority**: a job that does not fit its own tenant's limits may take the place of the
  tenant's own jobs of a lower priority class, lowest class first, then youngest.

Evicted jobs lose their admission and wait to be admitted again. The wrapped policy sees them
leave as if finished, and their GPUs (and those of shrunk jobs) free in the same pass. Growth
the wrapped policy plans (an elastic job started or resized larger) is cut to what the tenant
may still take, and the policy is told (``job_resized``).

Not done: Kueue's ``lendingLimit``; quotas per GPU type.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

from ..jobs import JobView, Status
from ..tenant_quotas import TenantConfig, TenantQuota
from ..view import AdmissionBooks, JobQueue
from .base import Plan, Policy, PolicyView
from .elastic import keep_consolidated, smallest_fitting

# When a plan gives quota back, the layer asks for another pass this much later to admit what now
# fits (a pass admits before the wrapped policy plans).
READMIT_AFTER_S = 1e-3


@dataclass(frozen=True, slots=True)
class TenantUsage:
    """A tenant's standing under its quota (what the server's API, metrics and dashboard show)."""

    quota: TenantQuota
    used: int  # GPUs its admitted jobs count: running jobs' held GPUs, waiting ones' base sizes
    held: int  # GPUs its running jobs hold
    waiting_for_quota: int  # its jobs not admitted yet

    @property
    def borrowed(self) -> int:
        return max(0, self.used - self.quota.nominal)


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


class QuotaLayer(Policy):
    admits = True  # the admission stage: the state's queues list only the jobs it admitted

    def __init__(self, inner: Policy, config: TenantConfig) -> None:
        self.inner = inner
        self.config = config
        self.name = inner.name
        self.description = f"{inner.description}, with tenant quotas"
        self.shares_gpus = inner.shares_gpus
        self.moldable = inner.moldable
        self.loans_servers = inner.loans_servers
        # tenant -> GPUs its admitted jobs use: from the state's counts at the start of each
        # pass, then as the pass plans (between passes: as the last pass planned)
        self.used: dict[str, int] = {}
        # tenant -> job id -> (order, job)
        self.admitted: dict[str, dict[str, tuple[int, JobView]]] = {}
        # admitted jobs not running, which count their base size: ids, and per tenant the sum
        self.waiting_ids: set[str] = set()
        self.waiting_gpus: dict[str, int] = {}
        # the last plan's starts and preemptions: whether they happened is read from the
        # state at the next pass (a plan may have been refused)
        self._planned: list[JobView] = []
        self._changed = False  # a reservation was released or a job arrived since the last pass
        # per cohort: nominal quotas and reservations, summed (tenants the config does not name
        # add the default's nominal quota once seen)
        self.cohort_used: dict[str, int] = {}
        # GPUs of inference servers loaned to training now (Aryl): borrowable by every cohort,
        # nobody's nominal quota
        self.loaned_gpus = 0
        self._seen: set[str] = set(config.tenants)
        self._sum_cohorts()
        self.priorities: dict[str, dict[int, int]] = {}  # tenant -> priority class -> admitted jobs
        self._admissions = 0
        # accounting: GPU-seconds above nominal (borrowed) and unused nominal lent, per tenant
        self.borrowed_gpu_s: dict[str, float] = {}
        self.lent_gpu_s: dict[str, float] = {}
        self.evictions: dict[str, int] = {}  # tenant -> its jobs evicted (reclaim or priority)
        # for the runtime's metrics and events, drained by it: ("admitted", job, wait_s) and
        # ("evicted", job, reason)
        self.log: list[tuple[str, JobView, object]] | None = None
        self._last_t: float | None = None

    def params(self) -> dict:
        return {**self.inner.params(), "quotas": self.config.source}

    def _sum_cohorts(self) -> None:
        """Each cohort's nominal total: its tenants', the default's for each unnamed one seen."""
        self.cohort_nominal: dict[str, int] = {}
        for tenant in self._seen | set(self.used):
            q = self.config.quota(tenant)
            if q.cohort is not None:
                self.cohort_nominal[q.cohort] = self.cohort_nominal.get(q.cohort, 0) + q.nominal

    def set_quota(self, tenant: str, quota: TenantQuota) -> None:
        """Change a tenant's quota now (the runtime's admin API): admissions follow at the next
        pass; nothing already admitted is evicted for it, but reclaims may follow."""
        self.config.tenants[tenant] = quota
        self._seen.add(tenant)
        self._sum_cohorts()
        self._sum_cohort_use()
        self._changed = True

    # -- quota arithmetic ---------------------------------------------------------------------
    def fits(self, tenant: str, gpus: int) -> bool:
        return gpus <= self._room(tenant)

    # -- notifications --------------------------------------------------------------------------
    def job_arrived(self, job: JobView, now: float) -> None:
        """It waits in the state's queue of jobs not admitted; its tenant may be new."""
        tenant = job.spec.tenant
        if tenant not in self._seen:
            self._seen.add(tenant)
            d = self.config.default
            if d.cohort is not None:
                self.cohort_nominal[d.cohort] = self.cohort_nominal.get(d.cohort, 0) + d.nominal
        self._changed = True

    # Each change of a reservation first charges the interval that ends now at the
    # reservations that held over it (borrowed and lent GPU-seconds).
    def job_finished(self, job: JobView, now: float) -> None:
        self._account(now)
        self._release(job)
        self.inner.job_finished(job, now)

    def job_requeued(self, job: JobView, now: float) -> None:
        self._account(now)
        self._count_waiting(job)  # still admitted, at its base size
        self.inner.job_requeued(job, now)

    def job_cancelled(self, job: JobView, now: float) -> None:
        if self._is_admitted(job):  # (one not admitted leaves the state's queue: nothing here)
            self._account(now)
            self._release(job)
            self.inner.job_cancelled(job, now)

    def job_progressed(self, job: JobView, now: float) -> None:
        self.inner.job_progressed(job, now)

    def job_resized(self, job: JobView, gpus: tuple[int, ...], now: float) -> None:
        self._account(now)
        self.inner.job_resized(job, gpus, now)

    def reclaim(self, view: PolicyView, count: int) -> tuple[list[int], Plan]:
        nodes, plan = self.inner.reclaim(view, count)
        self._planned.extend(plan.preempt)  # their jobs wait again, at their base size
        return nodes, plan

    def _is_admitted(self, job: JobView) -> bool:
        return job.job_id in self.admitted.get(job.spec.tenant, {})

    def _count_waiting(self, job: JobView) -> None:
        """An admitted job that does not run counts its base size."""
        if job.job_id not in self.waiting_ids and self._is_admitted(job):
            self.waiting_ids.add(job.job_id)
            t = job.spec.tenant
            self.waiting_gpus[t] = self.waiting_gpus.get(t, 0) + reservation(job)

    def _uncount_waiting(self, job: JobView) -> None:
        if job.job_id in self.waiting_ids:
            self.waiting_ids.discard(job.job_id)
            self.waiting_gpus[job.spec.tenant] -= reservation(job)

    def _admit(self, books: AdmissionBooks, job: JobView, now: float) -> None:
        books.admit(job)
        self._admissions += 1
        self.admitted.setdefault(job.spec.tenant, {})[job.job_id] = (self._admissions, job)
        self._prioritize(job, +1)
        self._count_waiting(job)
        self._use(job.spec.tenant, reservation(job))
        if self.log is not None:
            self.log.append(("admitted", job, now - job.pending_since))
        self.inner.job_arrived(job, now)

    def _release(self, job: JobView) -> None:
        """The job leaves admission (finished, cancelled or evicted)."""
        tenant = job.spec.tenant
        if self.admitted.get(tenant, {}).pop(job.job_id, None) is not None:
            self._uncount_waiting(job)
            self._prioritize(job, -1)
            self._changed = True

    @staticmethod
    def _counts(job: JobView, shrunk: dict) -> int:
        """What an admitted job counts against its tenant now (``shrunk``: this pass's
        scale-ins)."""
        if job.job_id in shrunk:
            return len(shrunk[job.job_id][1])
        return len(job.gpus) if job.status is Status.RUNNING else reservation(job)

    def _use(self, tenant: str, n: int) -> None:
        """The tenant's use (and its cohort's) changes by ``n`` in this pass."""
        if not n:
            return
        self.used[tenant] = self.used.get(tenant, 0) + n
        if not self.used[tenant]:
            del self.used[tenant]
        cohort = self.config.quota(tenant).cohort
        if cohort is not None:
            self.cohort_used[cohort] = self.cohort_used.get(cohort, 0) + n
        if n < 0:
            self._changed = True

    def usage_by_tenant(self, view: PolicyView) -> dict[str, TenantUsage]:
        """Every tenant with a quota, GPUs or waiting jobs: its standing now."""
        self._settle()
        held = view.tenant_gpus
        not_admitted: dict[str, int] = {}
        for (t, _, _), bucket in self._held_back(view).buckets.items():
            not_admitted[t] = not_admitted.get(t, 0) + len(bucket)
        tenants = (
            set(self.config.tenants)
            | set(held)  # also those whose last job ended: their gauges go to 0
            | {j.spec.tenant for j in view.pending.values()}
        )
        return {
            t: TenantUsage(
                self.config.quota(t),
                held.get(t, 0) + self.waiting_gpus.get(t, 0),
                held.get(t, 0),
                not_admitted.get(t, 0),
            )
            for t in sorted(tenants)
        }

    def usage(self, view: PolicyView, tenant: str) -> int:
        """GPUs the tenant's admitted jobs count now: its running jobs' as the state counts
        them, and its waiting admitted jobs' base sizes."""
        self._settle()
        return view.tenant_gpus.get(tenant, 0) + self.waiting_gpus.get(tenant, 0)

    def _settle(self) -> None:
        """Read the outcome of the last plan's entries from the state (a plan may have been
        refused): a started job no longer waits, a preempted one waits again."""
        for job in self._planned:
            if job.job_id not in self.admitted.get(job.spec.tenant, {}):
                continue
            if job.status is Status.RUNNING:
                self._uncount_waiting(job)
            else:
                self._count_waiting(job)
        self._planned = []

    def _recount(self, view: PolicyView) -> None:
        """Each tenant's use at the start of a pass, from the state."""
        self._settle()
        used = {t: n for t, n in view.tenant_gpus.items() if n}
        for t, n in self.waiting_gpus.items():
            if n:
                used[t] = used.get(t, 0) + n
        if any(used.get(t, 0) < n for t, n in self.used.items()):
            self._changed = True  # quota came back since the last pass
        self.used = used
        self._sum_cohort_use()
        nodes = view.cluster.nodes
        self.loaned_gpus = sum(nodes[n].num_gpus for n in view.loans.loaned)

    def _sum_cohort_use(self) -> None:
        self.cohort_used = {}
        for t, n in self.used.items():
            cohort = self.config.quota(t).cohort
            if cohort is not None:
                self.cohort_used[cohort] = self.cohort_used.get(cohort, 0) + n

    def _room(self, tenant: str) -> float:
        """How many more GPUs the tenant may count now."""
        q, used = self.config.quota(tenant), self.used.get(tenant, 0)
        if q.cohort is None:
            return q.nominal - used
        return min(q.limit - used, self._cohort_room(q.cohort))

    def _cohort_room(self, cohort: str) -> int:
        """What the cohort's tenants may still take: its unused nominal total (negative when
        it is beyond it, on loans), and the loaned GPUs other cohorts do not use (a cohort's
        use beyond its nominal total is on loans)."""
        others = sum(
            max(0, n - self.cohort_nominal.get(c, 0))
            for c, n in self.cohort_used.items()
            if c != cohort
        )
        unused = self.cohort_nominal.get(cohort, 0) - self.cohort_used.get(cohort, 0)
        return unused + max(0, self.loaned_gpus - others)

    def _prioritize(self, job: JobView, sign: int) -> None:
        tenant = job.spec.tenant
        counts = self.priorities.setdefault(tenant, {})
        counts[job.spec.priority] = counts.get(job.spec.priority, 0) + sign
        if not counts[job.spec.priority]:
            del counts[job.spec.priority]

    # -- the pass ---------------------------------------------------------------------------------
    @staticmethod
    def _books(view: PolicyView) -> AdmissionBooks:
        if not hasattr(view, "admit"):
            raise TypeError("the quota layer must be given the cluster state (it admits jobs)")
        return cast(AdmissionBooks, view)

    def _held_back(self, view: PolicyView) -> JobQueue:
        """The state's jobs not admitted, in buckets of one tenant, priority class and size."""
        return self._books(view).not_admitted(admission_order, admission_bucket)

    def schedule(self, view: PolicyView) -> Plan:
        books = self._books(view)
        now = view.now
        self._recount(view)
        self._account(now)
        evicted: list[JobView] = []
        shrunk: dict[str, tuple[JobView, tuple[int, ...]]] = {}  # the layer's scale-ins
        if self._changed:
            self._changed = False
            buckets = self._held_back(view).buckets
            heads = [(bucket[0][:2], key) for key, bucket in buckets.items()]
            heapq.heapify(heads)
            failed: dict[tuple, int] = {}  # (tenant, priority) -> smallest size that failed
            # evicted in this pass: they wait for admission again from the next pass
            gone: set[str] = set()
            while heads:
                _, key = heapq.heappop(heads)
                tenant, priority, need = key
                if need >= failed.get((tenant, priority), need + 1):
                    continue  # as large as one that could not be admitted
                head = _first_not(buckets.get(key, ()), gone)
                if head is None:
                    continue
                job = head[2]
                if not self.fits(tenant, need):
                    found = self._victims(view, job, need, shrunk)
                    if found is None:
                        failed[(tenant, priority)] = need
                        continue
                    shrinks, victims = found
                    for victim, kept in shrinks:
                        shrunk[victim.job_id] = (victim, kept)
                        self._use(victim.spec.tenant, len(kept) - len(victim.gpus))
                        self.inner.job_resized(victim, kept, now)
                        if self.log is not None:
                            self.log.append(("shrunk", victim, "reclaim"))
                    for victim in victims:
                        reason = "priority" if victim.spec.tenant == tenant else "reclaim"
                        self._evict(books, victim, now, evicted, reason, shrunk)
                        gone.add(victim.job_id)
                self._admit(books, job, now)  # it leaves its bucket
                head = _first_not(buckets.get(key, ()), gone)
                if head is not None:
                    heapq.heappush(heads, (head[:2], key))
            if evicted:
                self._changed = True
        running_gone = [j for j in evicted if j.status is Status.RUNNING]
        freed = [
            (job, tuple(g for g in job.gpus if g not in kept)) for job, kept in shrunk.values()
        ]
        inner = self.inner.schedule(
            view.without(running_gone, freed) if running_gone or freed else view
        )
        # a copy: policies may return a shared empty plan, which must stay empty
        plan = Plan(
            list(inner.start),
            list(inner.preempt),
            list(inner.resize),
            inner.wakeup_at,
            dict(inner.accumulation),
        )
        self._hold_to_quota(view, plan, shrunk)
        if running_gone:
            plan.preempt = running_gone + plan.preempt
        if self._changed:  # the plan gave quota back (a shrink, a smaller start): admit again
            again = now + READMIT_AFTER_S
            plan.wakeup_at = again if plan.wakeup_at is None else min(plan.wakeup_at, again)
        return plan

    def _hold_to_quota(self, view: PolicyView, plan: Plan, shrunk: dict) -> None:
        """Charge the wrapped policy's plan; cut growth beyond what tenants may take (and tell
        it); keep one resize per job, the layer's scale-ins first."""
        now, gpu_node = view.now, view.cluster.gpu_node
        for job in plan.preempt:
            if self._is_admitted(job):
                self._use(job.spec.tenant, reservation(job) - self._counts(job, shrunk))
                self._planned.append(job)
        for i, (job, gpus) in enumerate(plan.start):
            if not self._is_admitted(job):
                continue
            extra = len(gpus) - reservation(job)
            room = self._room(job.spec.tenant)
            if extra > room:
                gpus = keep_consolidated(gpus, reservation(job) + max(0, int(room)), gpu_node)
                plan.start[i] = (job, gpus)
                self.inner.job_resized(job, gpus, now)
            self._use(job.spec.tenant, len(gpus) - reservation(job))
            self._planned.append(job)
        # a scale-in of a job the wrapped policy preempts gives way: the job leaves all its GPUs
        # (charged above at its reservation)
        leaving = set(plan.preempt)
        resizes = [(job, gpus) for job, gpus in shrunk.values() if job not in leaving]
        for job, gpus in plan.resize:
            if job.job_id in shrunk:  # the layer's scale-in stands
                self.inner.job_resized(job, shrunk[job.job_id][1], now)
                continue
            current = len(job.gpus)
            room = self._room(job.spec.tenant)
            if len(gpus) - current > room:
                kept = [g for g in gpus if g in job.gpus]
                added = [g for g in gpus if g not in job.gpus][
                    : max(0, current + int(room) - len(kept))
                ]
                gpus = tuple(kept + added)
                self.inner.job_resized(job, gpus, now)
                if set(gpus) == set(job.gpus):
                    continue
            self._use(job.spec.tenant, len(gpus) - current)
            resizes.append((job, gpus))
        plan.resize = resizes

    def _victims(
        self, view: PolicyView, job: JobView, need: int, shrunk: dict
    ) -> tuple[list[tuple[JobView, tuple[int, ...]]], list[JobView]] | None:
        """The scale-ins and evictions that make ``job`` fit: (shrinks, evictions), or None
        when none may. As Kueue decides it in one step: the tenant's own jobs of a lower
        class give way as far as the job needs to fit its tenant's nominal quota, then
        borrowers in its cohort give back what the cohort is short of; failing that, more of
        its own jobs give way until it fits its limits."""
        tenant = job.spec.tenant
        q = self.config.quota(tenant)
        used = self.used.get(tenant, 0)
        if q.cohort is not None and used + need <= q.nominal:
            return self._reclaim(view, tenant, need - self._cohort_room(q.cohort), shrunk)
        if not any(p < job.spec.priority for p in self.priorities.get(tenant, {})):
            return None
        own: list[JobView] = []
        freed = 0
        for _, victim in self._giving_way_first([tenant], below=job.spec.priority):
            if self.fits(tenant, need - freed):
                break
            if (
                reclaimed := self._reclaim_within_nominal(view, tenant, need, freed, shrunk)
            ) is not None:
                return reclaimed[0], reclaimed[1] + own
            own.append(victim)
            freed += self._counts(victim, shrunk)
        if own and self.fits(tenant, need - freed):
            return [], own
        reclaimed = self._reclaim_within_nominal(view, tenant, need, freed, shrunk)
        return None if reclaimed is None else (reclaimed[0], reclaimed[1] + own)

    def _reclaim_within_nominal(
        self, view: PolicyView, tenant: str, need: int, freed: int, shrunk: dict
    ) -> tuple[list[tuple[JobView, tuple[int, ...]]], list[JobView]] | None:
        """Reclaim for ``need`` GPUs once the tenant's own jobs gave ``freed`` back, when that
        brings the job within its nominal quota (else None)."""
        q = self.config.quota(tenant)
        if q.cohort is None or self.used.get(tenant, 0) - freed + need > q.nominal:
            return None
        return self._reclaim(view, tenant, need - freed - self._cohort_room(q.cohort), shrunk)

    def _reclaim(
        self, view: PolicyView, tenant: str, short: int, shrunk: dict
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
        shrinks = []
        for _, victim in self._giving_way_first(borrowers, running_only=True):
            if short <= 0:
                break
            fewest = smallest_fitting(victim, victim.base_gpus, view)
            excess = 0 if fewest is None else len(victim.gpus) - fewest
            if (
                excess <= 0
                or over[victim.spec.tenant] <= 0
                or victim.job_id in shrunk
                or view.resizing(victim)
                or view.occupancy.partners(victim)
            ):
                continue
            give = min(excess, short, over[victim.spec.tenant])
            kept = keep_consolidated(victim.gpus, len(victim.gpus) - give, view.cluster.gpu_node)
            shrinks.append((victim, kept))
            over[victim.spec.tenant] -= give
            short -= give
        chosen = []
        for _, victim in self._giving_way_first(borrowers):
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

    def _giving_way_first(
        self, tenants: list[str], below: int | None = None, running_only: bool = False
    ) -> list[tuple[int, JobView]]:
        """The tenants' admitted jobs (of a priority below ``below``, when given) in the order
        they give way: not started before running (evicting one costs no work), then, as
        Kueue orders candidates, lower priority first, then the most recently admitted."""
        return sorted(
            (
                (order, j)
                for t in tenants
                for order, j in self.admitted.get(t, {}).values()
                if (below is None or j.spec.priority < below)
                and (not running_only or j.status is Status.RUNNING)
            ),
            key=lambda e: (e[1].status is Status.RUNNING, e[1].spec.priority, -e[0]),
        )

    def _evict(
        self,
        books: AdmissionBooks,
        victim: JobView,
        now: float,
        evicted: list[JobView],
        reason: str,
        shrunk: dict,
    ) -> None:
        books.dismiss(victim)
        self._use(victim.spec.tenant, -self._counts(victim, shrunk))
        shrunk.pop(victim.job_id, None)
        self._release(victim)
        if victim.status is Status.RUNNING:
            self.inner.job_finished(victim, now)  # it leaves the wrapped policy's world
        else:
            self.inner.job_cancelled(victim, now)
        self.evictions[victim.spec.tenant] = self.evictions.get(victim.spec.tenant, 0) + 1
        if self.log is not None:
            self.log.append(("evicted", victim, reason))
        evicted.append(victim)

    def _account(self, now: float) -> None:
        """Borrowed and lent GPU-seconds since the last pass, at the reservations then."""
        if self._last_t is not None and now > self._last_t:
            dt = now - self._last_t
            borrowed_total = 0.0
            unused: dict[str, float] = {}
            for t, used in self.used.items():
                over = used - self.config.quota(t).nominal
                if over > 0:
                    self.borrowed_gpu_s[t] = self.borrowed_gpu_s.get(t, 0.0) + over * dt
                    borrowed_total += over
            if borrowed_total:
                for t, q in self.config.tenants.items():
                    if q.cohort is not None and q.nominal > self.used.get(t, 0):
                        unused[t] = q.nominal - self.used.get(t, 0)
                pool = sum(unused.values())
                for t, u in unused.items():  # the borrowed GPUs came out of unused quota, pro rata
                    self.lent_gpu_s[t] = (
                        self.lent_gpu_s.get(t, 0.0) + borrowed_total * u / pool * dt
                    )
        self._last_t = now


def _first_not(entries: Iterable[tuple], gone: set[str]) -> tuple | None:
    """The first entry ``(key, seq, job)`` whose job is not in ``gone``."""
    for entry in entries:
        if entry[2].job_id not in gone:
            return entry
    return None
