"""Discrete-event simulation with exact time: the event loop that drives the cluster state.

Events are arrivals (a cursor over jobs sorted by submit time), completions (a heap with lazy
invalidation: an entry is stale when the job's ``version`` moved on), background resizes'
switches, resource changes (node down / up) and policy wake-ups. After each batch of events at
one instant the policy is asked for a plan, which the state applies at once. Every transition,
its costs and its accounting are the state's (:mod:`dlsched.state.cluster_state`); the loop
owns only time, the event queues and the cluster-wide integrals (utilization, sharing).
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ..cluster import Cluster
from ..errors import PlanError, SpecError
from ..inference import DEFAULT_RECLAIM_NOTICE_S, DemandCycle
from ..jobs import JobSpec, JobState, Status
from ..policies.base import Policy
from ..state.cluster_state import ClusterState, unplaceable
from ..state.costs import Costs
from ..state.loans import LoanStats
from ..workload_model import TRACE_MODEL, WorkloadModel

INF = math.inf


class SimulationStalled(PlanError):
    """The simulation stopped making progress."""


@dataclass(slots=True, frozen=True)
class SimConfig(Costs):
    """The simulator's settings: the state's costs (the fields of
    :class:`~dlsched.state.costs.Costs`, which validates them), GPU sharing, and the event
    loop's own."""

    # Stop with an error when this many scheduling passes in a row see no arrival and no
    # completion: the policy is cycling without progress (e.g. a quantum shorter than the
    # work lost per preemption).
    stall_limit: int = 100_000
    # Scheduling points happen at every event; set this to also decide every N seconds.
    schedule_interval_s: float | None = None
    # Resource changes: (time_s, "down" | "up", node_id).
    node_events: Sequence[tuple[float, str, int]] = ()
    timeseries: bool = True
    # GPU sharing: how many jobs one GPU may hold, and whether a job that no longer shares any
    # GPU goes back to its full batch (no gradient accumulation).
    max_jobs_per_gpu: int = 2
    restore_full_batch: bool = True
    # Capacity loaning (Aryl): the inference pool's demand, repeated from the start
    # (:mod:`dlsched.inference`; None: the pool is idle and never loaned), and the notice a
    # reclaimed server's jobs get to leave it.
    inference_demand: DemandCycle | None = None
    reclaim_notice_s: float = DEFAULT_RECLAIM_NOTICE_S

    def __post_init__(self) -> None:
        Costs.__post_init__(self)
        v = self.schedule_interval_s
        if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise SpecError("schedule_interval_s", f"must be a number > 0 when given, got {v!r}")
        for _, kind, _ in self.node_events:
            if kind not in ("down", "up"):
                raise SpecError("node_events", f"kind must be 'down' or 'up', got {kind!r}")


@dataclass(slots=True)
class SimResult:
    jobs: list[JobState]
    cluster: Cluster
    policy: Policy
    config: SimConfig
    events: int
    schedule_calls: int
    gpu_busy_s: float  # integral of allocated GPUs over time
    gpu_shared_s: float  # integral of GPUs holding more than one job
    gpu_capacity_s: float  # integral of usable GPUs over the same window
    start_s: float
    end_s: float
    # step changes of the state: time, queue length, GPUs allocated, GPUs usable
    ts_time: array = field(default_factory=lambda: array("d"))
    ts_queue: array = field(default_factory=lambda: array("l"))
    ts_used: array = field(default_factory=lambda: array("l"))
    ts_usable: array = field(default_factory=lambda: array("l"))
    # capacity loaning: servers loaned (or being reclaimed) and inference's own need
    ts_loaned: array = field(default_factory=lambda: array("l"))
    ts_inference: array = field(default_factory=lambda: array("l"))
    loans: LoanStats = field(default_factory=LoanStats)
    tenant_log: list = field(
        default_factory=list
    )  # (time, tenant, GPUs its jobs hold) at each change
    inference_gpu_s: float = 0.0  # integral of GPUs inference used (its need)
    inference_short_server_s: float = 0.0  # integral of servers inference needed but lacked
    inference_max_short: int = 0
    loaned_server_s: float = 0.0  # integral of servers lent to training
    # the same integrals up to the last arrival: usage over the window every policy shares
    arrivals_end_s: float = 0.0
    gpu_busy_arrivals_s: float = 0.0
    inference_gpu_arrivals_s: float = 0.0


class Simulator:
    """The event loop over a :class:`~dlsched.state.cluster_state.ClusterState`: arrivals in
    trace order, completions and background switches from heaps the state feeds, node events
    and policy wake-ups, each at its exact time."""

    def __init__(
        self,
        cluster: Cluster,
        jobs: Iterable[JobSpec],
        policy: Policy,
        config: SimConfig | None = None,
        workload: WorkloadModel = TRACE_MODEL,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.policy = policy
        self.config = config = config or SimConfig()
        self.progress = progress
        specs = sorted(jobs, key=lambda s: s.submit_time_s)  # stable: ties keep input order
        seen: set[str] = set()
        for s in specs:
            if s.job_id in seen:
                raise SpecError("job_id", f"duplicate job id '{s.job_id}'")
            seen.add(s.job_id)
            problem = unplaceable(s, cluster)
            if problem:
                raise SpecError("num_gpus", problem)
        self.jobs = [JobState(spec=s, seq=i) for i, s in enumerate(specs)]
        self._completions: list[tuple[float, int, int, JobState]] = []
        self._switches: list[tuple[float, int, int, JobState]] = []  # background scale-outs
        self.state = ClusterState(
            cluster,
            policy,
            config,
            workload,
            config.max_jobs_per_gpu,
            config.restore_full_batch,
            now=specs[0].submit_time_s if specs else 0.0,
            reclaim_notice_s=config.reclaim_notice_s,
        )
        self._node_events = sorted(config.node_events)
        demand = config.inference_demand
        if demand is not None and demand.servers != len(self.state.loans.inference_nodes):
            raise SpecError(
                "inference_demand",
                f"the demand is scaled to {demand.servers} servers; "
                f"the cluster's inference pool has {len(self.state.loans.inference_nodes)}",
            )

    def _take_changes(self) -> None:
        """Move what the state scheduled into the event heaps (the heaps are read only after
        this: an entry's place does not depend on when it was pushed)."""
        changes = self.state.changes
        if changes.finishes:
            for entry in changes.finishes:
                heapq.heappush(self._completions, entry)
            changes.finishes.clear()
        if changes.switches:
            for entry in changes.switches:
                heapq.heappush(self._switches, entry)
            changes.switches.clear()
        changes.returned.clear()  # the runtime's business (its inference stand-ins)

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> SimResult:
        states, n, state = self.jobs, len(self.jobs), self.state
        policy, completions, node_events = self.policy, self._completions, self._node_events
        switches = self._switches
        cfg = self.config
        pending, running, free = state.pending, state.running, state.free
        record = cfg.timeseries
        res = SimResult(
            jobs=states,
            cluster=self.cluster,
            policy=policy,
            config=cfg,
            events=0,
            schedule_calls=0,
            gpu_busy_s=0.0,
            gpu_shared_s=0.0,
            gpu_capacity_s=0.0,
            start_s=state.now,
            end_s=state.now,
        )
        if record:
            state.tenant_log = res.tenant_log
        usable_total = free.total
        i = ei = 0
        done = 0
        wakeup = INF
        interval = cfg.schedule_interval_s
        tick = state.now + interval if interval else INF
        last_t = state.now
        last_rec = (-1, -1, -1)
        busy_area = cap_area = shared_area = 0.0
        occupancy = state.occupancy
        loans = state.loans
        demand = cfg.inference_demand
        next_demand = res.start_s if demand is not None else INF
        cycle = di = 0
        needed = 0  # servers inference needs now
        inf_gpus_per_server = (
            self.cluster.pool_gpus("inference") / len(loans.inference_nodes)
            if loans.inference_nodes
            else 0.0
        )
        inf_area = short_area = loaned_area = 0.0
        done_before = arrived_before = idle_passes = 0
        stall_limit = cfg.stall_limit
        take_changes, changes = self._take_changes, state.changes
        while True:
            take_changes()
            while completions and completions[0][3].version != completions[0][2]:
                heapq.heappop(completions)
            t = completions[0][0] if completions else INF
            if switches and switches[0][0] < t:
                t = switches[0][0]
            if i < n and states[i].spec.submit_time_s < t:
                t = states[i].spec.submit_time_s
            if ei < len(node_events) and node_events[ei][0] < t:
                t = node_events[ei][0]
            if next_demand < t:
                t = next_demand
            reclaim_due = loans.next_deadline() if loans.reclaiming else INF
            if reclaim_due < t:
                t = reclaim_due
            if not (i < n or pending or running):
                break  # nothing left to do: later events do not count
            if wakeup < t:
                t = wakeup
            if tick < t:
                t = tick
            if t == INF:
                break  # what is still pending can never run
            dt = t - last_t
            if dt > 0:
                used = usable_total - free.total
                busy_area += used * dt
                cap_area += usable_total * dt
                shared_area += occupancy.shared_gpus * dt
                if demand is not None:
                    inf_area += needed * inf_gpus_per_server * dt
                    short = needed - loans.held
                    if short > 0:
                        short_area += short * dt
                    loaned_area += (len(loans.loaned) + len(loans.reclaiming)) * dt
            last_t = t
            state.now = t
            # completions free GPUs before anything else at the same instant (partners whose
            # finish moved to now included)
            while completions and completions[0][0] <= t:
                _, _, version, job = heapq.heappop(completions)
                if version == job.version and job.status is Status.RUNNING:
                    state.finish(job)
                    res.events += 1
                    done += 1
                    if self.progress is not None and done % 1000 == 0:
                        self.progress(1000)
                    if changes.finishes:
                        take_changes()
            while switches and switches[0][0] <= t:
                at, _, _, job = heapq.heappop(switches)
                if job.switch_at == at and job.status is Status.RUNNING:
                    state.switch(job)
                    res.events += 1
            while ei < len(node_events) and node_events[ei][0] <= t:
                _, kind, nid = node_events[ei]
                if kind == "down":
                    state.node_down(nid)
                else:
                    state.node_up(nid)
                usable_total = free.usable_gpus()
                ei += 1
                res.events += 1
            if next_demand <= t or reclaim_due <= t:
                while next_demand <= t:
                    step = demand.steps[di]
                    needed = step.needed
                    state.set_inference_demand(step.announced)
                    di += 1
                    if di == len(demand.steps):
                        di, cycle = 0, cycle + 1
                    next_demand = res.start_s + cycle * demand.period_s + demand.steps[di].time_s
                    res.events += 1
                state.enforce_reclaims()
                res.inference_max_short = max(res.inference_max_short, needed - loans.held)
                usable_total = free.usable_gpus()
            while i < n and states[i].spec.submit_time_s <= t:
                state.arrive(states[i])
                i += 1
                res.events += 1
                if i == n:
                    res.arrivals_end_s, res.gpu_busy_arrivals_s, res.inference_gpu_arrivals_s = (
                        t,
                        busy_area,
                        inf_area,
                    )
            if wakeup <= t:
                wakeup = INF
                res.events += 1
            if tick <= t:
                tick = t + interval
                res.events += 1
            plan = policy.schedule(state)
            res.schedule_calls += 1
            if done_before != done or arrived_before != i:
                done_before, arrived_before, idle_passes = done, i, 0
            else:
                idle_passes += 1
                if idle_passes > stall_limit:
                    raise SimulationStalled(
                        f"{stall_limit:,} scheduling passes without an arrival or a completion at "
                        f"t={t:.0f}s ({len(running)} running, {len(pending)} pending): policy "
                        f"{policy.name} is cycling without progress"
                    )
            if plan:
                state.apply(plan)
            if plan.wakeup_at is not None and plan.wakeup_at > t:
                wakeup = plan.wakeup_at
            if record:
                rec = (
                    len(pending),
                    usable_total - free.total,
                    usable_total,
                    len(loans.loaned) + len(loans.reclaiming),
                    needed,
                )
                if rec != last_rec:
                    res.ts_time.append(t)
                    res.ts_queue.append(rec[0])
                    res.ts_used.append(rec[1])
                    res.ts_usable.append(rec[2])
                    res.ts_loaned.append(rec[3])
                    res.ts_inference.append(rec[4])
                    last_rec = rec
        if self.progress is not None and done % 1000:
            self.progress(done % 1000)
        finishes = [j.finish for j in states if j.finish is not None]
        res.end_s = max(finishes) if finishes else res.start_s
        res.gpu_busy_s = busy_area
        res.gpu_shared_s = shared_area
        res.gpu_capacity_s = cap_area
        res.loans = loans.stats
        res.inference_gpu_s = inf_area
        res.inference_short_server_s = short_area
        res.loaned_server_s = loaned_area
        return res


def simulate(
    cluster: Cluster,
    jobs: Iterable[JobSpec],
    policy: Policy,
    config: SimConfig | None = None,
    **kwargs,
) -> SimResult:
    return Simulator(cluster, jobs, policy, config, **kwargs).run()
