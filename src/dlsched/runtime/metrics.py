"""Prometheus metrics of the scheduler service (served at ``/metrics``)."""

from __future__ import annotations

from collections import Counter
from typing import Protocol

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client import Counter as PromCounter

from ..admission import QuotaAdmission
from ..cluster import Cluster
from ..state.cluster_state import ClusterState


class ServiceReadings(Protocol):
    """What the metrics read of the scheduler service (its module imports this one)."""

    UNLIMITED: int
    state: ClusterState
    cluster: Cluster
    admission: QuotaAdmission
    pass_s: float | None

    def unprofiled_waiting_for_quota(self) -> Counter: ...


class RuntimeMetrics:
    """``expose_tenants``: label the queue length by tenant. Off by default: ``/metrics`` needs
    no token, so tenant names stay private unless the operator opts in (``--metrics-tenants``)."""

    def __init__(self, expose_tenants: bool = False) -> None:
        self.expose_tenants = expose_tenants
        self.registry = CollectorRegistry()
        r = self.registry
        self.queue = Gauge(
            "dlsched_queue_length",
            'Jobs waiting, by tenant ("all" unless tenant names are exposed)',
            ["tenant"],
            registry=r,
        )
        self.running = Gauge("dlsched_running_jobs", "Jobs running", registry=r)
        self.gpus_total = Gauge(
            "dlsched_gpus_total", "GPUs jobs may use: of live nodes in service", registry=r
        )
        self.nodes_out_of_service = Gauge(
            "dlsched_nodes_out_of_service",
            "Nodes the admin cordoned or drained (no new job goes there)",
            registry=r,
        )
        self.gpus_allocated = Gauge(
            "dlsched_gpus_allocated",
            "Of those, GPUs held by running jobs (a GPU two jobs share once)",
            registry=r,
        )
        self.transitions = PromCounter(
            "dlsched_job_transitions_total",
            "Job state changes",
            ["from_state", "to_state"],
            registry=r,
        )
        self.pass_seconds = Histogram(
            "dlsched_schedule_pass_seconds",
            "Wall time of one policy pass",
            registry=r,
            buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
        )
        self.dropped_reports = PromCounter(
            "dlsched_dropped_progress_reports_total",
            "Progress reports of tenant processes dropped as invalid (NaN, infinite, out of "
            "range); the job's events name each",
            registry=r,
        )
        self.rejected_plans = PromCounter(
            "dlsched_rejected_plans_total",
            "Scheduling passes skipped because the state refused the policy's plan (a policy "
            "bug; the server log names the job and the reason)",
            registry=r,
        )
        self.failed_passes = PromCounter(
            "dlsched_failed_passes_total",
            "Scheduling passes that raised (a policy bug; the server log has the traceback of "
            "the 1st, 2nd, 4th... one)",
            registry=r,
        )
        self.deadlines = PromCounter(
            "dlsched_deadlines_total",
            "Jobs with a deadline that ended: met it, or missed it "
            "(finished late or failed for good)",
            ["outcome"],
            registry=r,
        )
        self.pool_servers = Gauge(
            "dlsched_inference_servers",
            "Inference servers by state: held by inference, loaned to training, being reclaimed",
            ["state"],
            registry=r,
        )
        self.inference_demand = Gauge(
            "dlsched_inference_demand_servers",
            "Servers the inference side said it needs",
            registry=r,
        )
        self.servers_returned = PromCounter(
            "dlsched_servers_returned_total",
            "Reclaimed inference servers handed back (their inference stand-in runs)",
            registry=r,
        )
        self.reclaims = PromCounter(
            "dlsched_reclaims_total", "Loaned servers reclaimed", registry=r
        )
        self.reclaim_preemptions = PromCounter(
            "dlsched_reclaim_preemptions_total",
            "Jobs preempted to hand a server back (by the policy, or at the end of the notice)",
            registry=r,
        )
        self._counted = {"reclaims": 0, "preemptions": 0}
        # tenants and quotas, named as Kueue's (kueue_pending_workloads,
        # kueue_admitted_workloads_total,
        # kueue_evicted_workloads_total, kueue_admission_wait_time_seconds, kueue_cluster_queue_*)
        self.pending = Gauge(
            "dlsched_pending_jobs",
            "Jobs waiting, by tenant and reason: quota (not admitted) "
            "or gpus (admitted, waiting to be placed)",
            ["tenant", "reason"],
            registry=r,
        )
        self.admitted_jobs = PromCounter(
            "dlsched_admitted_jobs_total",
            "Jobs admitted within their tenant's quota",
            ["tenant"],
            registry=r,
        )
        self.evicted_jobs = PromCounter(
            "dlsched_evicted_jobs_total",
            "Admitted jobs evicted, by reason: reclaim (their tenant borrowed) or priority",
            ["tenant", "reason"],
            registry=r,
        )
        self.admission_wait = Histogram(
            "dlsched_admission_wait_seconds",
            "Time from entering the queue to admission",
            ["tenant"],
            registry=r,
            buckets=(0.1, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600),
        )
        self.quota_nominal = Gauge(
            "dlsched_quota_nominal_gpus", "A tenant's nominal quota", ["tenant"], registry=r
        )
        self.quota_borrowing_limit = Gauge(
            "dlsched_quota_borrowing_limit_gpus",
            "GPUs a tenant may borrow above its nominal quota (-1: no limit but its cohort's)",
            ["tenant"],
            registry=r,
        )
        self.quota_lending_limit = Gauge(
            "dlsched_quota_lending_limit_gpus",
            "GPUs of its nominal quota a tenant's cohort may borrow (-1: all of them)",
            ["tenant"],
            registry=r,
        )
        self.quota_used = Gauge(
            "dlsched_quota_used_gpus",
            "GPUs a tenant's admitted jobs reserve",
            ["tenant"],
            registry=r,
        )
        self.quota_borrowed = Gauge(
            "dlsched_quota_borrowed_gpus",
            "GPUs a tenant reserves above its nominal quota",
            ["tenant"],
            registry=r,
        )
        self.tenant_gpus = Gauge(
            "dlsched_tenant_gpus_held",
            "GPUs a tenant's running jobs and profiling runs hold",
            ["tenant"],
            registry=r,
        )
        self.fair_share_weight = Gauge(
            "dlsched_fair_share_weight", "A tenant's fair-share weight", ["tenant"], registry=r
        )
        self._tenants: set[str] = set()

    def _label(self, tenant: str) -> str:
        return tenant if self.expose_tenants else "all"

    def admitted(self, tenant: str, wait_s: float) -> None:
        self.admitted_jobs.labels(self._label(tenant)).inc()
        self.admission_wait.labels(self._label(tenant)).observe(max(0.0, wait_s))

    def evicted(self, tenant: str, reason: str) -> None:
        self.evicted_jobs.labels(self._label(tenant), reason).inc()

    def transition(self, old: str, new: str) -> None:
        self.transitions.labels(old, new).inc()

    def observe(self, service: ServiceReadings) -> None:
        state = service.state
        counts = Counter(
            (j.spec.tenant if self.expose_tenants else "all") for j in state.pending.values()
        )
        for tenant in self._tenants | set(counts):
            self.queue.labels(tenant).set(counts.get(tenant, 0))
        self._tenants |= set(counts)
        self.running.set(len(state.running))
        self.gpus_total.set(state.free.usable_gpus())
        self.nodes_out_of_service.set(len(state.cordoned))
        # (a sum of the jobs' GPUs counted a shared GPU twice, and the GPUs of a node taken
        # out of service that are not in the total: more allocated than there were)
        held = state.occupancy.jobs
        nodes = service.cluster.nodes
        self.gpus_allocated.set(
            sum(1 for n in state.free.usable for g in nodes[n].gpu_ids if held[g])
        )
        if service.pass_s is not None:
            self.pass_seconds.observe(service.pass_s)
        self._observe_quotas(service)
        loans = state.loans
        if loans.inference_nodes:
            for loan_state, count in (
                ("held", loans.held),
                ("loaned", len(loans.loaned)),
                ("reclaiming", len(loans.reclaiming)),
            ):
                self.pool_servers.labels(loan_state).set(count)
            self.inference_demand.set(loans.announced)
            stats = loans.stats
            for key, counter, value in (
                ("reclaims", self.reclaims, stats.reclaims),
                (
                    "preemptions",
                    self.reclaim_preemptions,
                    stats.reclaim_preemptions + stats.forced_preemptions,
                ),
            ):
                if value > self._counted[key]:
                    counter.inc(value - self._counted[key])
                    self._counted[key] = value

    def _observe_quotas(self, service: ServiceReadings) -> None:
        usage = service.admission.usage_by_tenant(service.state)
        pending: Counter = Counter(j.spec.tenant for j in service.state.pending.values())
        unprofiled = service.unprofiled_waiting_for_quota()
        by_label: dict[tuple[str, str], int] = {}
        for tenant in set(pending) | self._tenants | set(unprofiled):
            label = self._label(tenant)
            held_back = usage[tenant].waiting_for_quota if tenant in usage else 0
            by_label[(label, "quota")] = (
                by_label.get((label, "quota"), 0) + held_back + unprofiled[tenant]
            )
            by_label[(label, "gpus")] = (
                by_label.get((label, "gpus"), 0) + pending.get(tenant, 0) - held_back
            )
        for (label, reason), n in by_label.items():
            self.pending.labels(label, reason).set(n)
        if not self.expose_tenants:  # quotas are per tenant: shown only with tenant names
            return
        for tenant, u in usage.items():
            q = u.quota
            if q.nominal < service.UNLIMITED:
                self.quota_nominal.labels(tenant).set(q.nominal)
                self.quota_borrowing_limit.labels(tenant).set(
                    -1 if q.borrowing_limit is None else q.borrowing_limit
                )
                self.quota_lending_limit.labels(tenant).set(
                    -1 if q.lending_limit is None else q.lending_limit
                )
                self.quota_borrowed.labels(tenant).set(u.borrowed)
            self.quota_used.labels(tenant).set(u.used)
            self.tenant_gpus.labels(tenant).set(u.held)
            self.fair_share_weight.labels(tenant).set(q.weight)

    def render(self) -> bytes:
        return generate_latest(self.registry)
