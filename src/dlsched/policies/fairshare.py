"""Fair share between tenants: weighted max-min on GPUs (DRF with one resource) and finish-time
fairness (Themis' rho), both non-preemptive, with the quota stage usable before them.

A pass repeatedly picks the tenant that is worst off and starts the oldest of its waiting jobs
if it can be placed (best fit); a tenant whose oldest job does not fit is passed over for the
rest of the pass (first in first out within a tenant, backfill across tenants).

- ``drf``: worst off = the fewest GPUs held per unit of weight (weights ``"a=2,b=1"``, 1 by
  default): weighted max-min fairness, which is DRF when GPUs are the one resource.
- ``ftf``: worst off = the largest rho = (time in the shared cluster) / (time on the tenant's
  own 1/N of the cluster), over the tenant's waiting jobs together: the sum of (now - submit +
  work left) against max(work left, GPU-seconds left / (GPUs / N)), N the tenants with work. Themis
  (Mahajan et al., NSDI'20) runs auctions over leases for apps; here the tenant is the app and
  the pass takes the largest rho, without leases or auctions (a stated simplification).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from ..errors import SpecError
from ..jobs import JobView
from ..tenant_quotas import MAX_WEIGHT
from ..view import JobQueue
from .base import Plan, Policy, PolicyView
from .queued import submit_order


def parse_weights(text: str | dict | None) -> dict[str, float]:
    if not text:
        return {}
    items: list
    if isinstance(text, dict):
        items = list(text.items())
    else:
        items = [part.split("=", 1) for part in str(text).split(",") if part]
    out = {}
    for item in items:
        if len(item) != 2:
            raise SpecError("weights", f"expected tenant=weight,..., got {text!r}")
        name, value = item
        try:
            w = float(value)
        except (TypeError, ValueError):
            w = -1.0
        if not 0 < w <= MAX_WEIGHT:
            raise SpecError(
                "weights",
                f"tenant {name!r}: weight must be a number in (0, {MAX_WEIGHT:g}], got {value!r}",
            )
        out[str(name).strip()] = w
    return out


def tenant_of(job: JobView) -> str:
    return job.spec.tenant


def rho_totals(job: JobView) -> tuple[float, float, float]:
    """What FTF sums over a tenant's waiting jobs: submit time, work left, GPUs x work left (a
    waiting job's are fixed while it waits)."""
    return job.spec.submit_time_s, job.remaining_s, job.num_gpus * job.remaining_s


class TenantFairShare(Policy):
    """The pass above; subclasses give the score (lower = worse off, served first)."""

    between_tenants = True

    def __init__(self, placement: str = "best-fit", scan: str = "backfill") -> None:
        super().__init__(placement, scan)
        # within a pass: GPUs each tenant holds (the state's count: it follows failures,
        # reclaims, cancels and the quota stage's cuts), what the pass has planned so far, and each
        # tenant's jobs still waiting
        self.held: Mapping[str, int] = {}
        self.planned: dict[str, int] = {}
        self.waiting: dict[str, int] = {}

    def gpus_of(self, tenant: str) -> int:
        return self.held.get(tenant, 0) + self.planned.get(tenant, 0)

    def score(self, tenant: str, now: float, total_gpus: int) -> float:
        raise NotImplementedError

    def waiting_queue(self, view: PolicyView) -> JobQueue:
        """The admitted waiting jobs, oldest first, bucketed per tenant."""
        return view.queue(submit_order, tenant_of)

    def begin(self, queue: JobQueue) -> None:
        """A pass begins over the tenants' waiting jobs (``queue.buckets``: entries ``(key,
        seq, job)`` per tenant)."""

    def took(self, job: JobView) -> None:
        """The pass starts ``job``: it no longer waits."""

    def schedule(self, view: PolicyView) -> Plan:
        plan = Plan()
        queue = self.waiting_queue(view)
        tenants = queue.buckets
        if not tenants or view.free.total == 0:
            return plan
        # each tenant's oldest waiting job goes first: when none of them fits the idle GPUs,
        # none starts, and no score need be computed (22,943 of FTF's 157,021 passes in a
        # Philly replay)
        if all(jobs[0][2].num_gpus > view.free.total for jobs in tenants.values()):
            return plan
        self.held, self.planned = view.tenant_gpus, {}
        self.waiting = {t: len(jobs) for t, jobs in tenants.items()}
        self.begin(queue)
        total = view.cluster.pool_gpus("training")
        heap = [(self.score(t, view.now, total), t) for t in tenants]
        heapq.heapify(heap)
        free = view.free.copy()
        while heap and free.total:
            _, tenant = heapq.heappop(heap)
            jobs = tenants[tenant]
            job = jobs[len(jobs) - self.waiting[tenant]][2]  # its oldest not started
            gpus = (
                self.place(free, job.num_gpus, job.spec.gpu_types)
                if job.num_gpus <= free.total
                else None
            )
            if gpus is None:
                if not self.backfill:
                    break
                continue
            free.take(gpus)
            self.waiting[tenant] -= 1
            self.took(job)
            plan.start.append((job, gpus))
            self.planned[tenant] = self.planned.get(tenant, 0) + len(gpus)
            if self.waiting[tenant]:
                heapq.heappush(heap, (self.score(tenant, view.now, total), tenant))
        return plan


class Drf(TenantFairShare):
    name = "drf"
    description = (
        "weighted max-min fair share of GPUs between tenants (DRF on one resource); non-preemptive"
    )

    def __init__(
        self, placement: str = "best-fit", scan: str = "backfill", weights: str | None = None
    ) -> None:
        super().__init__(placement, scan)
        self.weights = parse_weights(weights)

    def params(self) -> dict:
        return {**super().params(), "weights": self.weights}

    def score(self, tenant: str, now: float, total_gpus: int) -> float:
        return self.gpus_of(tenant) / self.weights.get(tenant, 1.0)


class Ftf(TenantFairShare):
    name = "ftf"
    description = (
        "finish-time fairness (Themis' rho) between tenants: the largest rho first; non-preemptive"
    )

    def __init__(self, placement: str = "best-fit", scan: str = "backfill") -> None:
        super().__init__(placement, scan)
        # within a pass, per tenant, over its jobs not yet started: their count and the sums
        # of rho_totals (the state keeps those of all its waiting jobs)
        self.sums: dict[str, list[float]] = {}
        self.tenants = 0

    def waiting_queue(self, view: PolicyView) -> JobQueue:
        return view.queue(submit_order, tenant_of, rho_totals)

    def begin(self, queue: JobQueue) -> None:
        waiting = queue.buckets
        self.sums = {t: [len(jobs), *queue.bucket_totals(t)] for t, jobs in waiting.items()}
        # N: tenants with work, waiting or running. Constant through the pass: a tenant whose
        # last waiting job the pass starts holds its GPUs instead.
        self.tenants = len(waiting) + sum(1 for t, n in self.held.items() if n and t not in waiting)

    def took(self, job: JobView) -> None:
        s = self.sums[job.spec.tenant]
        s[0] -= 1
        for i, v in enumerate(rho_totals(job), 1):
            s[i] -= v

    def score(self, tenant: str, now: float, total_gpus: int) -> float:
        return -self.rho(tenant, now, total_gpus)

    def rho(self, tenant: str, now: float, total_gpus: int) -> float:
        n, submits, work, gpu_work = self.sums.get(tenant, (0, 0, 0, 0))
        if n <= 0 or work <= 0:
            return 0.0
        share = total_gpus / max(1, self.tenants)
        isolated = max(work, gpu_work / share)  # on its 1/N: at most `share` GPUs at once
        return (n * now - submits + work) / isolated
