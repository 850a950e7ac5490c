"""Discrete-event simulation with exact time: the event loop that drives the cluster state.

Events are arrivals (a cursor over jobs sorted by submit time), completions (a heap with lazy
invalidation: an entry is stale when the job's ``version`` moved on), background resizes'
switches, resource changes (node down / up) and policy wake-ups. After each batch of events at
one instant the policy is asked for a plan, which the state applies at once. Every transition,
its costs and its accounting are the state's (:mod:`dlsched.state.cluster_state`); the loop
owns only time, the event queues and the cluster-wide integrals (utilization, sharing).
"""

from __future__ import annotations

import functools
import heapq
import math
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..admission import QuotaAdmission, schedule_pass
from ..cluster import Cluster
from ..collector import fewer_collections
from ..errors import PlanError, SpecError
from ..inference import DEFAULT_RECLAIM_NOTICE_S, DemandCycle
from ..jobs import RUNNING, JobSpec, JobState, check_time
from ..node_events import NodeEvent, check_node_events, check_nodes
from ..policies.base import Plan, Policy
from ..state.cluster_state import ClusterState, unplaceable
from ..state.costs import Costs
from ..state.loans import LoanStats
from ..state.tenant_log import TenantLog
from ..workload_model import TRACE_MODEL, WorkloadModel

INF = math.inf
# Chosen: the shortest schedule interval, a millisecond: at the largest time a replay holds
# (1e10 s) a float still tells t + interval from t (a shorter one stalled the replay, blamed
# on the policy)
MIN_INTERVAL_S = 0.001
# Chosen: the most passes without an arrival or a completion a run may allow (``stall_limit``):
# a run cycling that long takes nearly half an hour at the least here (200,000 passes of a
# two-job case cycling took 3.3 s, 2026-11-30: 10^8 of them, 28 minutes)
MAX_STALL_LIMIT = 100_000_000


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
    # Stop with an error naming ``schedule_interval_s`` past this many ticks of it: an interval
    # short against the trace's span is a pass per tick (1 ms over full Philly about 10^10,
    # hours). Chosen: full Philly at 1 s (about 10^7 ticks) runs, and at 1 ms reaches the bound
    # in 27 s under fifo, 64 s under tiresias (measured 2026-11-30, docs/simulator.md).
    max_ticks: int = 20_000_000
    # Resource changes: (time_s, kind, node_id), kind down, up, cordon, drain or uncordon
    # (:mod:`dlsched.node_events`).
    node_events: Sequence[NodeEvent] = ()
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
        if self.schedule_interval_s is not None:
            check_time("schedule_interval_s", self.schedule_interval_s, least=MIN_INTERVAL_S)
        for name in ("stall_limit", "max_ticks"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise SpecError(name, f"must be a whole number >= 1, got {value!r}")
        if self.stall_limit > MAX_STALL_LIMIT:  # (a run cycling that long never ends in practice)
            raise SpecError(
                "stall_limit", f"must be at most {MAX_STALL_LIMIT:,}, got {self.stall_limit:,}"
            )
        object.__setattr__(self, "node_events", check_node_events(self.node_events))


@dataclass(slots=True)
class LoaningResult:
    """Capacity loaning (Aryl): what the inference side needed and what training borrowed."""

    stats: LoanStats = field(default_factory=LoanStats)
    inference_gpu_s: float = 0.0  # integral of GPUs inference used (its need)
    short_server_s: float = 0.0  # integral of servers inference needed but lacked
    max_short: int = 0
    loaned_server_s: float = 0.0  # integral of servers lent to training (or being reclaimed)
    inference_gpu_arrivals_s: float = 0.0  # inference_gpu_s up to the last arrival
    # step changes, beside the result's ts_time: servers loaned (or being reclaimed), and
    # inference's own need
    ts_loaned: array = field(default_factory=lambda: array("i"))
    ts_inference: array = field(default_factory=lambda: array("i"))


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
    ts_queue: array = field(default_factory=lambda: array("i"))
    ts_used: array = field(default_factory=lambda: array("i"))
    ts_usable: array = field(default_factory=lambda: array("i"))
    loaning: LoaningResult = field(default_factory=LoaningResult)
    tenant_log: TenantLog = field(default_factory=TenantLog)  # GPUs per tenant at each change
    # the same integrals up to the last arrival: usage over the window every policy shares
    arrivals_end_s: float = 0.0
    gpu_busy_arrivals_s: float = 0.0
    admission: QuotaAdmission | None = None  # the quota stage, when the run had quotas


# A completion heap over this many times the running jobs' entries is rebuilt without its stale
# ones (a Tiresias replay of Philly kept 3,345 entries for 230 running jobs on average)
STALE_COMPLETIONS_FACTOR = 4


def _is_current(entry: tuple[float, int, int, JobState]) -> bool:
    """A completion entry of the job's latest finish (as the loop tests the heap's top)."""
    return entry[2] == entry[3].version


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
        admission: QuotaAdmission | None = None,
    ) -> None:
        self.cluster = cluster
        self.policy = policy
        self.admission = admission
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
        with fewer_collections():  # a state per job: the collector would walk them all
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
            admission=admission,
        )
        check_nodes(config.node_events, len(cluster.nodes))
        start = self.state.now
        # in time order, those at one instant as given; one before the first arrival happens
        # at it (the clock starts there)
        self._node_events = [
            (max(t, start), kind, nid)
            for t, kind, nid in sorted(config.node_events, key=lambda e: e[0])
        ]
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
        changes, completions = self.state.changes, self._completions
        for entry in changes.finishes:
            heapq.heappush(completions, entry)
        changes.finishes.clear()
        if len(completions) > STALE_COMPLETIONS_FACTOR * (len(self.state.running) + 64):
            # Most entries are stale (a preempted or re-timed job's earlier finish, skipped
            # when it comes up): drop them, so the heap is as deep as the running jobs need.
            # The pop order is the same: entries are ordered by (time, seq, version).
            completions[:] = [e for e in completions if _is_current(e)]
            heapq.heapify(completions)
        for entry in changes.switches:
            heapq.heappush(self._switches, entry)
        changes.switches.clear()

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> SimResult:
        with fewer_collections():
            return self._loop()

    def _loop(self) -> SimResult:
        """Until no job is left: take the next instant any event source has, bring the usage
        integrals up to it, apply every event at it (completions first, so their GPUs are
        free), ask the policy once, apply its plan."""
        jobs, n, state = self.jobs, len(self.jobs), self.state
        policy, completions, switches = self.policy, self._completions, self._switches
        admission = self.admission
        node_events, cfg = self._node_events, self.config
        pending, running = state.pending, state.running
        res = SimResult(jobs, self.cluster, policy, cfg, 0, 0, 0.0, 0.0, 0.0, state.now, state.now)
        res.admission = admission
        if cfg.timeseries:
            state.tenant_log = res.tenant_log
        usage = UsageRecorder(state, res)
        advance, record, last_rec = usage.advance, cfg.timeseries, None
        add_time, add_counts = res.ts_time.append, usage.counts.extend
        free, loans = state.free, state.loans
        inference = InferenceSide(state, cfg.inference_demand, res, usage)
        # without a demand curve nothing is lent, so nothing is reclaimed: no inference events
        inference_next = inference.next_time if cfg.inference_demand is not None else None
        i = ei = done = 0
        wakeup = INF
        interval = cfg.schedule_interval_s or 0.0  # 0: no interval
        tick = state.now + interval if interval else INF
        done_before = arrived_before = idle_passes = ticks = 0
        # Once no job runs and nothing is left to arrive, periodic events (the inference
        # demand cycle, the schedule interval) go on for ever: after a whole cycle of them in
        # which nothing started, what is still pending can never run. The interval ticks for
        # one interval of that quiet only, then rests until a job runs again: a demand cycle
        # may be 1e10 s long, and its own events are what can change the cluster meanwhile.
        demand = cfg.inference_demand
        cycle = (demand.period_s + demand.notice_s if demand else 0.0) + interval or INF
        quiet_since: float | None = None
        # what the state scheduled since the loop last looked (the lists are the state's own)
        moved, switched, returned = (
            state.changes.finishes,
            state.changes.switches,
            state.changes.returned,
        )
        take_changes = self._take_changes
        # a pass: admission, the policy, the charge; without a stage, the policy's own call
        # (chosen once: this is the hot path)
        plan_pass = (
            policy.schedule
            if admission is None
            else functools.partial(schedule_pass, policy=policy, admission=admission)
        )
        while True:
            if moved or switched:
                take_changes()
            while completions and completions[0][3].version != completions[0][2]:
                heapq.heappop(completions)
            t = completions[0][0] if completions else INF
            if switches and switches[0][0] < t:
                t = switches[0][0]
            if i < n and jobs[i].spec.submit_time_s < t:
                t = jobs[i].spec.submit_time_s
            if ei < len(node_events) and node_events[ei][0] < t:
                t = node_events[ei][0]
            inference_due = inference_next() if inference_next is not None else INF
            if inference_due < t:
                t = inference_due
            if not (i < n or pending or running):
                break  # nothing left to do: later events do not count
            if wakeup < t:
                t = wakeup
            was_quiet = quiet_since is not None
            if running or i < n or ei < len(node_events):
                if was_quiet and tick == INF and interval:
                    tick = state.now + interval  # the interval rested (below): it ticks again
                quiet_since = None
            elif quiet_since is None:
                quiet_since = state.now
            elif interval and tick - quiet_since > interval:
                tick = INF  # it ticked for a whole interval of quiet: it rests
            if tick < t:
                t = tick
            if t == INF:
                break  # what is still pending can never run
            if was_quiet and quiet_since is not None and t - quiet_since > cycle:
                break
            advance(t)
            state.now = t
            events_before, ticked = res.events, False
            # completions free GPUs before anything else at the same instant (partners whose
            # finish moved to now included)
            while completions and completions[0][0] <= t:
                _, _, version, job = heapq.heappop(completions)
                if version == job.version and job.status is RUNNING:
                    state.finish(job)
                    res.events += 1
                    done += 1
                    if self.progress is not None and done % 1000 == 0:
                        self.progress(1000)
                    if moved:
                        take_changes()
            while switches and switches[0][0] <= t:
                at, _, _, job = heapq.heappop(switches)
                if job.switch_at == at and job.status is RUNNING:
                    state.switch(job)
                    res.events += 1
            while ei < len(node_events) and node_events[ei][0] <= t:
                _, kind, nid = node_events[ei]
                if kind == "down":
                    state.node_down(nid)
                elif kind == "up":
                    state.node_up(nid)
                elif kind == "uncordon":
                    state.uncordon(nid)
                else:
                    state.cordon(nid, drain=kind == "drain")
                usage.usable_changed()
                ei += 1
                res.events += 1
            if inference_due <= t:
                inference.fire(t)
            if returned:
                returned.clear()  # servers handed back: the runtime's business (stand-ins)
            while i < n and jobs[i].spec.submit_time_s <= t:
                state.arrive(jobs[i])
                i += 1
                res.events += 1
                if i == n:
                    usage.arrivals_ended(t)
            if wakeup <= t:
                wakeup = INF
                res.events += 1
            if tick <= t:
                tick = t + interval
                res.events += 1
                ticked = True
                ticks += 1
                if ticks > cfg.max_ticks:
                    raise SpecError(
                        "schedule_interval_s",
                        f"{interval:g} s ticked more than max_ticks={cfg.max_ticks:,} times by "
                        f"t={t:.0f}s: choose a longer interval",
                    )
            plan = plan_pass(state)
            res.schedule_calls += 1
            if done_before != done or arrived_before != i:
                done_before, arrived_before, idle_passes = done, i, 0
            elif plan or not ticked or res.events - events_before != 1:
                # (a pass at the schedule interval's tick alone that changes nothing is not a
                # policy cycling: with a short interval and long jobs there are many)
                idle_passes += 1
                if idle_passes > cfg.stall_limit:
                    raise SimulationStalled(
                        f"{cfg.stall_limit:,} scheduling passes without an arrival or a "
                        f"completion at t={t:.0f}s ({len(running)} running, {len(pending)} "
                        f"pending): policy {policy.name} is cycling without progress (or its "
                        "jobs progress only slowly: then raise stall_limit, --stall-limit)"
                    )
            if plan or plan.__class__ is not Plan:  # (the state refuses what is not a Plan)
                state.apply(plan)
            if plan.wakeup_at is not None:
                try:
                    later = plan.wakeup_at > t
                except TypeError:
                    raise PlanError(
                        f"policy {policy.name} asked to be woken at {plan.wakeup_at!r}, "
                        "not a time in seconds"
                    ) from None
                if later:
                    wakeup = plan.wakeup_at
            if record:  # a point of the time series when anything it shows changed
                rec = (
                    len(pending),
                    usage.usable - free.total,
                    usage.usable,
                    len(loans.loaned) + len(loans.reclaiming),
                    usage.needed,
                )
                if rec != last_rec:  # a point: two appends (the hot path)
                    add_time(t)
                    add_counts(rec)
                    last_rec = rec
        usage.split_counts()
        if self.progress is not None and done % 1000:
            self.progress(done % 1000)
        finishes = [j.finish for j in jobs if j.finish is not None]
        res.end_s = max(finishes) if finishes else res.start_s
        res.loaning.stats = state.loans.stats
        return res


class UsageRecorder:
    """The cluster-wide integrals a result reports (GPUs allocated, shared and usable; the
    inference side's need, shortfall and loans), and the time series' points the loop finds
    (it compares each pass's outcome inline: that is the hot path)."""

    def __init__(self, state: ClusterState, res: SimResult) -> None:
        self.state, self.res = state, res
        self.last_t = state.now
        self.usable = state.free.total
        # with an inference demand curve (set by :class:`InferenceSide`): the servers it
        # needs now, and GPUs per server
        self.inference = False
        self.needed = 0
        self.gpus_per_server = 0.0
        # the time series' counts, five per point of res.ts_time; C ints (32 bits: jobs, GPUs
        # and servers fit) take half the memory of longs
        self.counts = array("i")

    def usable_changed(self) -> None:
        self.usable = self.state.free.usable_gpus()

    def advance(self, t: float) -> None:
        """Time moves on to ``t``: the state as the last pass left it held from the last
        instant to ``t``."""
        dt = t - self.last_t
        if dt > 0:
            state, res = self.state, self.res
            used = self.usable - state.free.total
            res.gpu_busy_s += used * dt
            res.gpu_capacity_s += self.usable * dt
            res.gpu_shared_s += state.occupancy.shared_gpus * dt
            if self.inference:
                loans, loaning = state.loans, res.loaning
                loaning.inference_gpu_s += self.needed * self.gpus_per_server * dt
                short = self.needed - loans.held
                if short > 0:
                    loaning.short_server_s += short * dt
                loaning.loaned_server_s += (len(loans.loaned) + len(loans.reclaiming)) * dt
        self.last_t = t

    def arrivals_ended(self, t: float) -> None:
        res = self.res
        res.arrivals_end_s, res.gpu_busy_arrivals_s = t, res.gpu_busy_s
        res.loaning.inference_gpu_arrivals_s = res.loaning.inference_gpu_s

    def split_counts(self) -> None:
        """The time series' counts, recorded five to a point (queue, GPUs allocated, usable,
        servers loaned, servers needed), into the result's columns."""
        res, counts = self.res, self.counts
        res.ts_queue, res.ts_used, res.ts_usable = counts[0::5], counts[1::5], counts[2::5]
        res.loaning.ts_loaned, res.loaning.ts_inference = counts[3::5], counts[4::5]
        self.counts = array("i")


class InferenceSide:
    """The inference pool as an event source: its demand curve, repeated from the start (each
    step announced to the state, which lends or reclaims servers), and the reclaim notices
    running out."""

    def __init__(
        self, state: ClusterState, demand: DemandCycle | None, res: SimResult, usage: UsageRecorder
    ) -> None:
        self.state, self.demand, self.res, self.usage = state, demand, res, usage
        self.next_step = res.start_s if demand is not None else INF
        self.cycle = self.step = 0
        servers = state.loans.inference_nodes
        usage.inference = demand is not None
        if servers:
            usage.gpus_per_server = state.cluster.pool_gpus("inference") / len(servers)

    def next_time(self) -> float:
        due = self.state.loans.next_deadline() if self.state.loans.reclaiming else None
        return self.next_step if due is None or self.next_step < due else due

    def fire(self, t: float) -> None:
        """The demand steps due at ``t``, then the notices that ran out."""
        state, demand, res = self.state, self.demand, self.res
        while self.next_step <= t:
            assert demand is not None  # next_step is finite only with a demand curve
            step = demand.steps[self.step]
            self.usage.needed = step.needed  # servers inference needs from now
            state.set_inference_demand(step.announced)
            self.step += 1
            if self.step == len(demand.steps):
                self.step, self.cycle = 0, self.cycle + 1
            self.next_step = (
                res.start_s + self.cycle * demand.period_s + demand.steps[self.step].time_s
            )
            res.events += 1
        state.enforce_reclaims()
        loaning = res.loaning
        loaning.max_short = max(loaning.max_short, self.usage.needed - state.loans.held)
        self.usage.usable_changed()


def simulate(
    cluster: Cluster,
    jobs: Iterable[JobSpec],
    policy: Policy,
    config: SimConfig | None = None,
    **kwargs: Any,
) -> SimResult:
    return Simulator(cluster, jobs, policy, config, **kwargs).run()
