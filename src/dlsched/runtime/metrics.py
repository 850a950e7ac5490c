"""Prometheus metrics of the scheduler service (served at ``/metrics``)."""

from __future__ import annotations

from collections import Counter

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client import Counter as PromCounter


class RuntimeMetrics:
    """``expose_tenants``: label the queue length by tenant. Off by default: ``/metrics`` needs
    no token, so tenant names stay private unless the operator opts in (``--metrics-tenants``)."""

    def __init__(self, expose_tenants: bool = False) -> None:
        self.expose_tenants = expose_tenants
        self.registry = CollectorRegistry()
        r = self.registry
        self.queue = Gauge("dlsched_queue_length", "Jobs waiting, by tenant (\"all\" unless tenant names are exposed)", ["tenant"], registry=r)
        self.running = Gauge("dlsched_running_jobs", "Jobs running", registry=r)
        self.gpus_total = Gauge("dlsched_gpus_total", "GPUs of live nodes", registry=r)
        self.gpus_allocated = Gauge("dlsched_gpus_allocated", "GPUs held by running jobs", registry=r)
        self.transitions = PromCounter("dlsched_job_transitions_total", "Job state changes",
                                       ["from_state", "to_state"], registry=r)
        self.pass_seconds = Histogram("dlsched_schedule_pass_seconds", "Wall time of one policy pass",
                                      registry=r, buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5))
        self.deadlines = PromCounter("dlsched_deadlines_total", "Jobs with a deadline that ended: met it, or missed it "
                                     "(finished late or failed for good)", ["outcome"], registry=r)
        self.pool_servers = Gauge("dlsched_inference_servers", "Inference servers by state: held by inference, "
                                  "loaned to training, being reclaimed", ["state"], registry=r)
        self.inference_demand = Gauge("dlsched_inference_demand_servers", "Servers the inference side said it needs",
                                      registry=r)
        self.servers_returned = PromCounter("dlsched_servers_returned_total", "Reclaimed inference servers handed "
                                            "back (their inference stand-in runs)", registry=r)
        self.reclaims = PromCounter("dlsched_reclaims_total", "Loaned servers reclaimed", registry=r)
        self.reclaim_preemptions = PromCounter("dlsched_reclaim_preemptions_total", "Jobs preempted to hand a "
                                               "server back (by the policy, or at the end of the notice)", registry=r)
        self._counted = {"reclaims": 0, "preemptions": 0}
        self._tenants: set[str] = set()

    def transition(self, old: str, new: str) -> None:
        self.transitions.labels(old, new).inc()

    def observe(self, service) -> None:
        books = service.books
        counts = Counter((j.spec.tenant if self.expose_tenants else "all") for j in books.pending.values())
        for tenant in self._tenants | set(counts):
            self.queue.labels(tenant).set(counts.get(tenant, 0))
        self._tenants |= set(counts)
        self.running.set(len(books.running))
        nodes = service.cluster.nodes
        self.gpus_total.set(sum(nodes[n].num_gpus for n in books.free.usable))
        self.gpus_allocated.set(sum(len(j.gpus) for j in books.running.values()))
        if service.pass_s is not None:
            self.pass_seconds.observe(service.pass_s)
        loans = books.loans
        if loans.inference_nodes:
            for state, count in (("held", loans.held), ("loaned", len(loans.loaned)),
                                 ("reclaiming", len(loans.reclaiming))):
                self.pool_servers.labels(state).set(count)
            self.inference_demand.set(loans.announced)
            stats = loans.stats
            for key, counter, value in (("reclaims", self.reclaims, stats.reclaims),
                                        ("preemptions", self.reclaim_preemptions,
                                         stats.reclaim_preemptions + stats.forced_preemptions)):
                if value > self._counted[key]:
                    counter.inc(value - self._counted[key])
                    self._counted[key] = value

    def render(self) -> bytes:
        return generate_latest(self.registry)
