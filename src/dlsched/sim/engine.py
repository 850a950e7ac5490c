"""Discrete-event simulation with exact time.

Events are arrivals (a cursor over jobs sorted by submit time), completions (a heap with lazy
invalidation: an entry is stale when the job's ``version`` moved on), resource changes (node
down / up) and policy wake-ups. After each batch of events at one instant the policy is asked
for a plan, which is applied at once. A running job's completion time follows from its rate and
is recomputed only when the rate changes; the clock is never quantized.

Costs charged (documented, overridable defaults in :class:`SimConfig`): a restart pause after
every preemption, an optional start-up pause, the work done since the last checkpoint when
checkpoints are periodic, and each resize of an elastic job (stop-resume or background).
Jobs may share GPUs (:mod:`.occupancy`), each slowed by its partner.
"""

from __future__ import annotations

import heapq
import math
from array import array
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Sequence

from ..cluster import Cluster
from ..errors import PlanError, SpecError
from ..jobs import JobSpec, JobState, Status
from ..policies.base import Plan, Policy
from ..policies.placement import FreeGpus
from .occupancy import GpuOccupancy

INF = math.inf


class SimulationStalled(PlanError):
    """The simulation stopped making progress."""

# Pollux's simulator charges a 30 s restart penalty per re-allocation (petuum/adaptdl,
# simulator/; Qiao et al., OSDI'21): our default pause before a preempted job makes progress again.
POLLUX_RESTART_PENALTY_S = 30.0


@dataclass(slots=True)
class SimConfig:
    restart_overhead_s: float = POLLUX_RESTART_PENALTY_S
    startup_overhead_s: float = 0.0
    # Periodic checkpoints, every that many seconds of progress: a job stopped by a failure
    # loses what it did since the last one. None: no work is ever lost.
    checkpoint_interval_s: float | None = None
    # A policy's preemption checkpoints first and loses nothing (as Tiresias and Gandiva do);
    # False: it loses the work since the last periodic checkpoint, like a failure.
    checkpoint_on_preempt: bool = True
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
    # Elastic resizing (a plan's ``resize``). "stop-resume": checkpoint, stop, restart at the new
    # size and reload: every worker pauses ``stop_resume_s``. "background" (Amoeba/EDL): new
    # workers prepare for ``stop_resume_s`` on their GPUs while the old ones keep training, then
    # all switch at a mini-batch boundary, pausing ``background_switch_fraction`` of it; leaving
    # workers exit at a boundary and the staying ones do not pause. The pause grows with the
    # model: ``stop_resume_s`` plus writing and reading its checkpoint (weights and optimizer
    # state, from the performance model) at ``checkpoint_mib_s``. Defaults: Pollux's 30 s
    # restart; 1 GiB/s, a chosen local-NVMe-class bandwidth (no public per-job measurement);
    # the ~95% saving Amoeba reports for background scaling.
    resize_mechanism: str = "background"
    stop_resume_s: float = POLLUX_RESTART_PENALTY_S
    checkpoint_mib_s: float = 1024.0
    background_switch_fraction: float = 0.05

    def __post_init__(self) -> None:
        for name in ("restart_overhead_s", "startup_overhead_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise SpecError(name, f"must be a finite number >= 0, got {v!r}")
        for name in ("checkpoint_interval_s", "schedule_interval_s"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise SpecError(name, f"must be a number > 0 when given, got {v!r}")
        for t, kind, nid in self.node_events:
            if kind not in ("down", "up"):
                raise SpecError("node_events", f"kind must be 'down' or 'up', got {kind!r}")
        if self.resize_mechanism not in ("background", "stop-resume"):
            raise SpecError("resize_mechanism", f"must be 'background' or 'stop-resume', got {self.resize_mechanism!r}")
        if not (isinstance(self.stop_resume_s, (int, float)) and self.stop_resume_s >= 0):
            raise SpecError("stop_resume_s", f"must be a number >= 0, got {self.stop_resume_s!r}")
        if not (isinstance(self.checkpoint_mib_s, (int, float)) and self.checkpoint_mib_s > 0):
            raise SpecError("checkpoint_mib_s", f"must be a number > 0, got {self.checkpoint_mib_s!r}")
        if not 0 <= self.background_switch_fraction <= 1:
            raise SpecError("background_switch_fraction", "must be between 0 and 1")


def unplaceable(spec: JobSpec, cluster: Cluster) -> str | None:
    """Why ``spec`` could never run on ``cluster``'s training pool, or None."""
    capacity = cluster.capacity_for(spec.gpu_types)
    if spec.num_gpus <= capacity:
        return None
    kind = f" of type {'|'.join(spec.gpu_types)}" if spec.gpu_types else ""
    return f"job '{spec.job_id}' asks for {spec.num_gpus} GPUs{kind}; the cluster has {capacity}"


class TraceSpeed:
    """Without a performance model: every job runs at its trace speed, and since no job's
    memory or co-location slowdown is known, none may share a GPU."""

    def __call__(self, job: JobState, gpus: tuple[int, ...]) -> float:
        return 1.0

    def slowdown(self, job: JobState, partner: JobState) -> float | None:
        return None

    def memory_mib(self, spec: JobSpec, gpus: int, accumulation: int = 1) -> float | None:
        return None

    def accumulation_cost(self, spec: JobSpec, accumulation: int) -> float:
        return 1.0

    def speed_at_size(self, spec: JobSpec, gpus: int) -> float | None:
        return None

    def checkpoint_mib(self, spec: JobSpec) -> float | None:
        return None


TRACE_SPEED = TraceSpeed()


@dataclass(slots=True)
class SimResult:
    jobs: list[JobState]
    cluster: Cluster
    policy: Policy
    config: SimConfig
    events: int
    schedule_calls: int
    gpu_busy_s: float            # integral of allocated GPUs over time
    gpu_shared_s: float          # integral of GPUs holding more than one job
    gpu_capacity_s: float        # integral of usable GPUs over the same window
    start_s: float
    end_s: float
    # step changes of the state: time, queue length, GPUs allocated, GPUs usable
    ts_time: array = field(default_factory=lambda: array("d"))
    ts_queue: array = field(default_factory=lambda: array("l"))
    ts_used: array = field(default_factory=lambda: array("l"))
    ts_usable: array = field(default_factory=lambda: array("l"))


class Simulator:
    """Also the :class:`~dlsched.policies.base.ClusterView` policies read."""

    def __init__(self, cluster: Cluster, jobs: Iterable[JobSpec], policy: Policy,
                 config: SimConfig | None = None, speed: TraceSpeed = TRACE_SPEED,
                 progress: Callable[[int], None] | None = None) -> None:
        self.cluster = cluster
        self.policy = policy
        self.config = config or SimConfig()
        self.speed = speed
        self.progress = progress
        self.free = FreeGpus(cluster)
        self.occupancy = GpuOccupancy(cluster, self.config.max_jobs_per_gpu)
        specs = sorted(jobs, key=lambda s: s.submit_time_s)   # stable: ties keep input order
        seen: set[str] = set()
        for s in specs:
            if s.job_id in seen:
                raise SpecError("job_id", f"duplicate job id '{s.job_id}'")
            seen.add(s.job_id)
            problem = unplaceable(s, cluster)
            if problem:
                raise SpecError("num_gpus", problem)
        self.states = [JobState(spec=s, seq=i) for i, s in enumerate(specs)]
        self.now = specs[0].submit_time_s if specs else 0.0
        self.pending: dict[str, JobState] = {}
        self.running: dict[str, JobState] = {}
        self._completions: list[tuple[float, int, int, JobState]] = []
        self._switches: list[tuple[float, int, int, JobState]] = []   # background scale-outs
        self._node_events = sorted(self.config.node_events)
        self._down: set[int] = set()

    # -- applying decisions ----------------------------------------------------------------
    def _advance(self, job: JobState) -> None:
        since = job.progress_at if job.progress_at > job.resume_at else job.resume_at
        if self.now > since:
            job.done_s += job.rate * (self.now - since)
        job.progress_at = self.now

    def _schedule_completion(self, job: JobState) -> None:
        job.version += 1
        begin = job.resume_at if job.resume_at > self.now else self.now
        job.finish_time = begin + max(0.0, job.spec.duration_s - job.done_s) / job.rate
        heapq.heappush(self._completions, (job.finish_time, job.seq, job.version, job))

    def set_rate(self, job: JobState, rate: float) -> None:
        """Change a running job's speed (a partner joined or left, it was resized...)."""
        if not rate > 0:
            raise PlanError(f"job {job.job_id}: speed must be > 0, got {rate}")
        self._advance(job)
        job.rate = rate
        self._schedule_completion(job)

    def _start(self, job: JobState, gpus: tuple[int, ...], accumulation: int = 1) -> None:
        if job.status is not Status.PENDING:
            raise PlanError(f"policy {self.policy.name} started job {job.job_id}, which is {job.status.value}")
        low, high = job.spec.gpu_range
        if not low <= len(set(gpus)) == len(gpus) <= high:
            raise PlanError(f"policy {self.policy.name} gave job {job.job_id} {len(set(gpus))} distinct GPUs; "
                            f"it needs {low if low == high else f'{low}..{high}'} (gang)")
        memory = self.speed.memory_mib(job.spec, len(gpus), accumulation)
        joined = [g for g in gpus if not self.free.is_free(g)]
        for g in joined:
            why = self.occupancy.why_not_join(g, memory)
            if why is None and any(self.speed.slowdown(job, other) is None for other in self.occupancy.jobs[g]):
                why = f"GPU {g}: no co-location measurement for this pair"
            if why:
                raise PlanError(f"policy {self.policy.name}, job {job.job_id}: {why}")
        try:
            self.free.take([g for g in gpus if g not in joined] if joined else gpus)
        except ValueError as e:
            raise PlanError(f"policy {self.policy.name}, job {job.job_id}: {e}") from None
        now = self.now
        pause = self.config.startup_overhead_s if job.first_start is None else self.config.restart_overhead_s
        if job.first_start is None:
            job.first_start = now
        job.status = Status.RUNNING
        job.gpus = tuple(gpus)
        job.accumulation = accumulation
        job.memory_mib = memory
        job.segment_start = job.gpus_since = now
        job.progress_at = now
        job.resume_at = now + pause
        partners = self.occupancy.attach(job)
        job.sharing, job.slowdown, job.slowdown_since = False, 1.0, now
        job.rate = self._rate(job)
        del self.pending[job.job_id]
        self.running[job.job_id] = job
        self._schedule_completion(job)
        for partner in partners:
            self._refresh(partner)

    def _rate(self, job: JobState) -> float:
        """Solo speed at its placement and sub-batch, divided by the worst slowdown any of its
        partners causes (a multi-GPU job runs at the pace of its slowest worker)."""
        partners = self.occupancy.partners(job)
        slowdown = 1.0
        for partner in partners:
            xi = self.speed.slowdown(job, partner)
            if xi is None:
                raise PlanError(f"jobs {job.job_id} and {partner.job_id} share a GPU without a "
                                "co-location measurement")
            slowdown = max(slowdown, xi)
        self._note_sharing(job, bool(partners), slowdown)
        return self.speed(job, job.gpus) / slowdown

    def _note_sharing(self, job: JobState, sharing: bool, slowdown: float) -> None:
        """Add the interval since the job's last change to its sharing totals, then record
        its new state."""
        now = self.now
        if job.sharing and now > job.slowdown_since:
            job.shared_s += now - job.slowdown_since
            job.shared_slowdown_s += job.slowdown * (now - job.slowdown_since)
        job.sharing, job.slowdown, job.slowdown_since = sharing, slowdown, now

    def _refresh(self, job: JobState) -> None:
        """Recompute a running job's speed after its partners changed."""
        if self.config.restore_full_batch and job.accumulation > 1 and not self.occupancy.partners(job):
            job.accumulation = 1
            job.memory_mib = self.speed.memory_mib(job.spec, len(job.gpus), 1)
            self.occupancy.recount(job)
        self.set_rate(job, self._rate(job))

    def _resize(self, job: JobState, gpus: tuple[int, ...]) -> None:
        """Change a running elastic job's GPUs, charging the configured mechanism."""
        spec, cfg, now = job.spec, self.config, self.now
        low, high = spec.gpu_range
        problem = None
        if job.status is not Status.RUNNING:
            problem = f"it is {job.status.value}"
        elif not low <= len(set(gpus)) == len(gpus) <= high:
            problem = f"{len(set(gpus))} distinct GPUs is outside its {low}..{high}"
        elif job.switch_at is not None:
            problem = "its previous resize is still under way"
        elif self.occupancy.partners(job):
            problem = "it shares a GPU"
        if problem:
            raise PlanError(f"policy {self.policy.name} resized job {job.job_id}: {problem}")
        old = set(job.gpus)
        added = [g for g in gpus if g not in old]
        try:
            self.free.take(added)
        except ValueError as e:
            raise PlanError(f"policy {self.policy.name}, resize of job {job.job_id}: {e}") from None
        self._advance(job)
        self._account(job)
        self._vacate(job)
        self.free.take([g for g in gpus if g in old])   # _vacate freed all its GPUs
        job.gpus = tuple(gpus)
        job.memory_mib = self.speed.memory_mib(spec, len(gpus), job.accumulation)
        self.occupancy.attach(job)
        job.resizes += 1
        pause = self.resize_pause_s(spec)
        if cfg.resize_mechanism == "stop-resume":
            job.resume_at = max(job.resume_at, now) + pause
            job.resize_lost_gpu_s += pause * len(gpus)
        elif added:            # background scale-out: the old workers go on meanwhile
            job.switch_at = now + pause
            heapq.heappush(self._switches, (job.switch_at, job.seq, job.version, job))
            job.resize_lost_gpu_s += (pause * len(added)
                                      + cfg.background_switch_fraction * pause * len(gpus))
            self._schedule_completion(job)    # at the old speed, until the switch
            return
        job.rate = self._rate(job)           # background scale-in: no pause for the stayers
        self._schedule_completion(job)

    def resize_pause_s(self, spec: JobSpec) -> float:
        """A stop-resume of ``spec``: the restart, plus saving and loading its checkpoint."""
        state = self.speed.checkpoint_mib(spec)
        return self.config.stop_resume_s + (0.0 if state is None else 2 * state / self.config.checkpoint_mib_s)

    def _switch(self, job: JobState) -> None:
        """A background scale-out's new workers are ready: everyone switches to the new group."""
        cfg = self.config
        self._advance(job)
        job.switch_at = None
        job.resume_at = max(job.resume_at, self.now) + cfg.background_switch_fraction * self.resize_pause_s(job.spec)
        job.rate = self._rate(job)
        self._schedule_completion(job)

    def _stop(self, job: JobState, by_policy: bool) -> None:
        """Take a running job off its GPUs and put it back in the queue: a policy's preemption
        (which checkpoints first when ``checkpoint_on_preempt``) or a failure."""
        if job.status is not Status.RUNNING:
            raise PlanError(f"policy {self.policy.name} preempted job {job.job_id}, which is {job.status.value}")
        now = self.now
        self._advance(job)
        interval = self.config.checkpoint_interval_s
        graceful = by_policy and self.config.checkpoint_on_preempt
        if not graceful and interval is not None and now > job.resume_at:
            lost_wall = (now - job.resume_at) % interval
            job.done_s = max(0.0, job.done_s - job.rate * lost_wall)
        self._account_run(job)
        partners = self._vacate(job)
        job.switch_at = None
        job.gpus = ()
        job.status = Status.PENDING
        job.rate = 0.0
        job.finish_time = INF
        job.version += 1
        if by_policy:
            job.preemptions += 1
        else:
            job.failures += 1
        job.pending_since = now
        del self.running[job.job_id]
        self.pending[job.job_id] = job
        for partner in partners:
            self._refresh(partner)

    def _account(self, job: JobState) -> None:
        """Add the GPU-time since the job's GPUs last changed to its totals."""
        now = self.now
        job.attained_gpu_s += len(job.gpus) * (now - job.gpus_since)
        since = max(job.resume_at, job.gpus_since)
        if now > since:
            job.executed_gpu_s += len(job.gpus) * (now - since)
        job.gpus_since = now

    def _account_run(self, job: JobState) -> None:
        """Add the run that ends now to the job's GPU-time totals."""
        self._account(job)
        job.last_run_s = self.now - job.segment_start
        job.run_time_s += job.last_run_s

    def _vacate(self, job: JobState) -> set[JobState]:
        """Take the job off its GPUs; free those nobody else holds; return its partners."""
        partners, idle = self.occupancy.detach(job)
        self.free.release(idle)
        self._note_sharing(job, False, 1.0)
        return partners

    def _finish(self, job: JobState) -> None:
        now = self.now
        job.done_s = job.spec.duration_s
        job.progress_at = now
        self._account_run(job)
        partners = self._vacate(job)
        job.switch_at = None
        job.status = Status.DONE
        job.finish = now
        job.finish_time = now
        del self.running[job.job_id]
        for partner in partners:
            self._refresh(partner)
        self.policy.job_finished(job, now)

    def apply(self, plan: Plan) -> None:
        for job in plan.preempt:
            self._stop(job, by_policy=True)
        for job, gpus in plan.resize:
            self._resize(job, tuple(gpus))
        for job, gpus in plan.start:
            self._start(job, gpus, plan.accumulation.get(job.job_id, 1))

    # -- driven by the wall clock: the runtime keeps its books with the same transitions ------
    def advance_to(self, now: float) -> None:
        self.now = max(self.now, now)

    def submit(self, spec: JobSpec) -> JobState:
        """A job arrives now."""
        problem = unplaceable(spec, self.cluster)
        if problem:
            raise SpecError("num_gpus", problem)
        job = JobState(spec=spec, seq=len(self.states))
        self.states.append(job)
        job.pending_since = self.now
        self.pending[job.job_id] = job
        self.policy.job_arrived(job, self.now)
        return job

    def complete(self, job: JobState) -> None:
        """A running job ended by itself."""
        self._finish(job)

    def requeue(self, job: JobState) -> None:
        """A running job failed (crash, lost worker, failed start): it waits again."""
        self._stop(job, by_policy=False)
        self.policy.job_requeued(job, self.now)

    def cancel(self, job: JobState) -> None:
        """A user cancelled the job: it leaves the queue, or its GPUs."""
        if job.status is Status.RUNNING:
            self._advance(job)
            self._account_run(job)
            self._vacate(job)
            job.switch_at, job.gpus, job.status = None, (), Status.CANCELLED
            del self.running[job.job_id]
            self.policy.job_finished(job, self.now)
        elif job.status is Status.PENDING:
            del self.pending[job.job_id]
            job.status = Status.CANCELLED
            self.policy.job_cancelled(job, self.now)

    def observe_progress(self, job: JobState, fraction_done: float, duration_s: float | None = None) -> None:
        """A running job's measured progress (and re-estimated solo duration) replaces the
        prediction; its projected finish follows (the runtime's executor measures)."""
        if duration_s is not None and duration_s > 0:
            job.spec = replace(job.spec, duration_s=duration_s)
        job.done_s = min(1.0, max(0.0, fraction_done)) * job.spec.duration_s
        job.progress_at = self.now
        begin = job.resume_at if job.resume_at > self.now else self.now
        job.finish_time = begin + (job.spec.duration_s - job.done_s) / job.rate

    def switch_done(self, job: JobState) -> None:
        """A background scale-out's new workers took over (the runtime's executor says when)."""
        if job.status is Status.RUNNING and job.switch_at is not None:
            self._switch(job)

    @property
    def down_nodes(self) -> set[int]:
        return self._down

    def node_down(self, nid: int) -> None:
        self._node_event("down", nid)

    def node_up(self, nid: int) -> None:
        self._node_event("up", nid)

    # -- resource changes ------------------------------------------------------------------
    def _node_event(self, kind: str, nid: int) -> None:
        if not 0 <= nid < len(self.cluster.nodes):
            raise SpecError("node_events", f"no node {nid}")
        if kind == "down":
            if nid in self._down:
                return
            victims = list(dict.fromkeys(j for g in self.cluster.nodes[nid].gpu_ids
                                         for j in self.occupancy.jobs[g]))
            for job in victims:
                self._stop(job, by_policy=False)
                self.policy.job_requeued(job, self.now)
            if nid in self.free.usable:
                self.free.remove_node(nid)
            self._down.add(nid)
        elif nid in self._down:
            self._down.discard(nid)
            self.free.add_node(nid)

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> SimResult:
        states, n = self.states, len(self.states)
        policy, completions, node_events = self.policy, self._completions, self._node_events
        switches = self._switches
        cfg = self.config
        pending, running, free = self.pending, self.running, self.free
        record = cfg.timeseries
        res = SimResult(jobs=states, cluster=self.cluster, policy=policy, config=cfg, events=0,
                        schedule_calls=0, gpu_busy_s=0.0, gpu_shared_s=0.0, gpu_capacity_s=0.0,
                        start_s=self.now, end_s=self.now)
        usable_total = free.total
        i = ei = 0
        done = 0
        wakeup = INF
        interval = cfg.schedule_interval_s
        tick = self.now + interval if interval else INF
        last_t = self.now
        last_rec = (-1, -1, -1)
        busy_area = cap_area = shared_area = 0.0
        occupancy = self.occupancy
        done_before = arrived_before = idle_passes = 0
        stall_limit = cfg.stall_limit
        while True:
            while completions and completions[0][3].version != completions[0][2]:
                heapq.heappop(completions)
            t = completions[0][0] if completions else INF
            if switches and switches[0][0] < t:
                t = switches[0][0]
            if i < n and states[i].spec.submit_time_s < t:
                t = states[i].spec.submit_time_s
            if ei < len(node_events) and node_events[ei][0] < t:
                t = node_events[ei][0]
            if not (i < n or pending or running):
                break                        # nothing left to do: later events do not count
            if wakeup < t:
                t = wakeup
            if tick < t:
                t = tick
            if t == INF:
                break                        # what is still pending can never run
            dt = t - last_t
            if dt > 0:
                used = usable_total - free.total
                busy_area += used * dt
                cap_area += usable_total * dt
                shared_area += occupancy.shared_gpus * dt
            last_t = t
            self.now = t
            # completions free GPUs before anything else at the same instant
            while completions and completions[0][0] <= t:
                _, _, version, job = heapq.heappop(completions)
                if version == job.version and job.status is Status.RUNNING:
                    self._finish(job)
                    res.events += 1
                    done += 1
                    if self.progress is not None and done % 1000 == 0:
                        self.progress(1000)
            while switches and switches[0][0] <= t:
                at, _, _, job = heapq.heappop(switches)
                if job.switch_at == at and job.status is Status.RUNNING:
                    self._switch(job)
                    res.events += 1
            while ei < len(node_events) and node_events[ei][0] <= t:
                _, kind, nid = node_events[ei]
                self._node_event(kind, nid)
                usable_total = sum(self.cluster.nodes[u].num_gpus for u in free.usable)
                ei += 1
                res.events += 1
            while i < n and states[i].spec.submit_time_s <= t:
                job = states[i]
                job.pending_since = t
                pending[job.job_id] = job
                policy.job_arrived(job, t)
                i += 1
                res.events += 1
            if wakeup <= t:
                wakeup = INF
            if tick <= t:
                tick = t + interval
            plan = policy.schedule(self)
            res.schedule_calls += 1
            if done_before != done or arrived_before != i:
                done_before, arrived_before, idle_passes = done, i, 0
            else:
                idle_passes += 1
                if idle_passes > stall_limit:
                    raise SimulationStalled(
                        f"{stall_limit:,} scheduling passes without an arrival or a completion at "
                        f"t={t:.0f}s ({len(running)} running, {len(pending)} pending): policy "
                        f"{policy.name} is cycling without progress")
            if plan:
                self.apply(plan)
            if plan.wakeup_at is not None and plan.wakeup_at > t:
                wakeup = plan.wakeup_at
            if record:
                rec = (len(pending), usable_total - free.total, usable_total)
                if rec != last_rec:
                    res.ts_time.append(t)
                    res.ts_queue.append(rec[0])
                    res.ts_used.append(rec[1])
                    res.ts_usable.append(rec[2])
                    last_rec = rec
        if self.progress is not None and done % 1000:
            self.progress(done % 1000)
        finishes = [j.finish for j in states if j.finish is not None]
        res.end_s = max(finishes) if finishes else res.start_s
        res.gpu_busy_s = busy_area
        res.gpu_shared_s = shared_area
        res.gpu_capacity_s = cap_area
        return res


def simulate(cluster: Cluster, jobs: Iterable[JobSpec], policy: Policy,
             config: SimConfig | None = None, **kwargs) -> SimResult:
    return Simulator(cluster, jobs, policy, config, **kwargs).run()
