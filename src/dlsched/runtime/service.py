"""The scheduling loop: the policies deciding on live state, an executor carrying it out.

The service drives the same :class:`~dlsched.state.cluster_state.ClusterState` the simulator
drives, with the wall clock and the executor's reports (submit, finish, fail, cancel, switch,
node down / up, progress observed), so a policy sees exactly the view it sees in simulation.
Every pass: new and cancelled jobs from the store, what the executor reports (finished, failed,
stopped, progress), nodes gone or back; then one ``policy.schedule`` whose plan the state applies
and the executor carries out. The store is written before the executor is told, so a restarted
server knows every job: jobs it finds running are requeued and resume from their last checkpoint
(their workers died with the previous server). A job's counts (preemptions, failures) live in its
state and are copied to the store; a finished job leaves the state and the service's memory.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..admission import QuotaAdmission, schedule_pass
from ..cluster import Cluster
from ..errors import PlanError, SpecError
from ..inference import DEFAULT_RECLAIM_NOTICE_S
from ..jobs import JobState, Status
from ..policies.catalog import make_policy
from ..state.cluster_state import ClusterState
from ..state.costs import Costs
from ..tenant_quotas import TenantConfig, TenantQuota, equal_shares, quota_from
from ..view import Applied, JobView, Plan
from . import read_models
from .device import out_of_memory
from .executor_api import CLUSTER, MEMORY, Executor, Outcome
from .jobspec import to_job_spec, validate_run_spec
from .limits import CHECKPOINT_RETENTION_S, FINISHED_KEPT_PER_TENANT, JOB_RETENTION_S
from .loaning import ServerLoaning
from .measure import JobMeter, config_key, shared_slowdown, solo_iteration_s
from .metrics import RuntimeMetrics
from .profiling_queue import DEFAULT_MAX_PROFILING, DEFAULT_PAIR_WAIT_S, ProfilingQueue
from .reports import checked_iteration, checked_profile, checked_progress
from .speed import RuntimeSpeed
from .store import CANCELLED, DONE, FAILED, QUEUED, RUNNING, Store

log = logging.getLogger("dlsched.service")

EMULATED_GPU_MEM_MIB = 16384  # emulated GPUs: the size memory checks assume
DEFAULT_MAX_FAILURES = 3  # chosen: a job that failed this many times stays failed
# chosen: failures put on the cluster (a worker Ray could not start or lost, executor_api.CLUSTER)
# are not counted against the job, up to this many; past it they count (no endless restarts)
MAX_CLUSTER_FAILURES = 10
SWEEP_EVERY_S = 60.0
HISTORY_EVERY_S = 10.0  # the dashboard's utilization and queue: one sample this often,
HISTORY_SAMPLES = 2160  # for the last 6 hours
CORDONED_SETTING = "cordoned_nodes"  # the store's setting: names of nodes out of service
UNLIMITED = 10**9  # the nominal quota of a tenant when the server runs without quotas


@dataclass(slots=True)
class LiveJob:
    """A queued or running job: its state in the state and what only the runtime knows."""

    state: JobState
    attempt: int  # its current run's number; reports of older runs are stale
    killed: bool = False  # its current run was killed by the service: its reports are stale too
    iteration: int | None = None  # last measured progress written to the store
    meter: JobMeter = field(default_factory=JobMeter)  # what its runs measured (what-if replays)
    bad_reports: int = 0  # progress reports dropped as invalid
    cluster_failures: int = 0  # failed runs not counted: the cluster's failure, not the job's
    own_iterations: int | None = None  # its spec's iteration count (None: given in epochs)


class SchedulerService:
    UNLIMITED = UNLIMITED

    def __init__(
        self,
        store: Store,
        executor: Executor,
        policy: str = "fifo",
        policy_params: dict | None = None,
        interval_s: float = 0.5,
        max_failures: int = DEFAULT_MAX_FAILURES,
        resize_mechanism: str = "background",
        clock: Callable[[], float] = time.time,
        max_profiling: int = DEFAULT_MAX_PROFILING,
        profiling_pair_wait_s: float = DEFAULT_PAIR_WAIT_S,
        metrics_tenants: bool = False,
        checkpoint_retention_s: float = CHECKPOINT_RETENTION_S,
        job_retention_s: float = JOB_RETENTION_S,
        finished_kept_per_tenant: int = FINISHED_KEPT_PER_TENANT,
        reclaim_notice_s: float = DEFAULT_RECLAIM_NOTICE_S,
        quotas: TenantConfig | None = None,
    ) -> None:
        self.store, self.executor, self.clock = store, executor, clock
        self.checkpoint_retention_s = checkpoint_retention_s
        if not job_retention_s > 0:
            raise SpecError("job-retention-days", "must be positive")
        if finished_kept_per_tenant < 0:
            raise SpecError("finished-kept-per-tenant", "must be 0 or more")
        self.job_retention_s = job_retention_s
        self.finished_kept_per_tenant = finished_kept_per_tenant
        self._swept_until = float("-inf")  # jobs finished before this have no checkpoint left
        self._next_sweep = 0.0
        self.to_profile = ProfilingQueue(max_profiling, profiling_pair_wait_s)
        self.policy_params = dict(policy_params or {})
        self.policy = make_policy(policy, **(policy_params or {}))
        # the server always runs the admission stage (it keeps the books the quota API and
        # metrics read); without quotas no tenant is ever held back. Quotas set through the API
        # before a restart hold over the configuration's.
        base = quotas or TenantConfig(default=TenantQuota(nominal=UNLIMITED), source="none")
        kept = {t: quota_from(fields, f"tenants.{t}") for t, fields in store.quotas().items()}
        self.admission = QuotaAdmission(
            TenantConfig({**base.tenants, **kept}, base.default, base.source)
        )
        # what the stage admitted, evicted and shrank in a pass (_quota_events drains it)
        self.admission_log: list[tuple[str, JobView, float | str]] = []
        self.admission.log = self.admission_log
        self.interval_s, self.max_failures = interval_s, max_failures
        self.metrics = RuntimeMetrics(expose_tenants=metrics_tenants)
        self._failed_passes = 0  # (the metric's count, kept here: Prometheus' is not public)
        inventory = [n for n in executor.inventory() if n.alive]
        if not inventory:
            raise SpecError("cluster", "the Ray cluster has no node with dlsched GPU resources")
        self.node_names = [n.name for n in inventory]
        self.cluster = Cluster.build(
            [
                {
                    "count": 1,
                    "gpus_per_node": n.gpus,
                    "gpu_type": "emulated",
                    "gpu_mem_mib": EMULATED_GPU_MEM_MIB,
                    "pool": n.pool,
                }
                for n in inventory
            ]
        )
        self.resize_mechanism = resize_mechanism
        self.speed = RuntimeSpeed()
        # a real restart's pause is what it takes: measured by the executor, not charged
        self.state = ClusterState(
            self.cluster,
            self.policy,
            Costs(restart_overhead_s=0.0, resize_mechanism=resize_mechanism),
            workload=self.speed,
            now=self.clock(),
            reclaim_notice_s=reclaim_notice_s,
            admission=self.admission,
            scale_in_switch_reported=True,
        )
        self.loaning = ServerLoaning(self)
        self.live: dict[str, LiveJob] = {}
        self.pass_s: float | None = None  # the last scheduling pass's wall time
        self.history: deque[tuple[float, int, int, int, int]] = deque(maxlen=HISTORY_SAMPLES)
        self._seen_seq = 0  # the store's jobs up to here are in the state
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._recover()

    # -- lifecycle ---------------------------------------------------------------------------
    def _recover(self) -> None:
        if ended := self.store.close_runs_left_open():
            log.warning("ended %d runs left open by a server that stopped mid-write", ended)
        for row in self.store.jobs(statuses=(RUNNING,)):
            self._set_status(row, QUEUED, "server restarted: resumes from its last checkpoint")
        # nodes the operator took out of service stay out (a node no longer there is dropped)
        for name in json.loads(self.store.get_setting(CORDONED_SETTING) or "[]"):
            if name in self.node_names:
                self.state.cordon(self.node_names.index(name))

    def start(self) -> None:
        self.executor.on_report = self.wake  # a finish or a first iteration: a pass at once
        self._thread = threading.Thread(target=self._loop, daemon=True, name="dlsched-scheduler")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout=30)

    def requeue_at_shutdown(self, outcomes: list[Outcome]) -> int:
        """After the loop stopped and the executor ended its runs (``outcomes``: what it
        reported meanwhile, taken as the loop takes them: a job that ended is done): each job
        still running waits for the next start of the server, its run's accounting closed now;
        one that checkpointed as it stopped resumes from there. Returns how many checkpointed."""
        for outcome in outcomes:
            self._outcome(outcome)
        checkpointed = {
            o.job_id for o in outcomes if o.kind == "stopped" and o.attempt and not o.detail
        }
        for row in self.store.jobs(statuses=(RUNNING,)):
            saved = row["id"] in checkpointed
            event = (
                "server stopped: checkpointed, resumes from there when it starts again"
                if saved
                else "server stopped: resumes from its last checkpoint when it starts again"
            )
            self._set_status(row, QUEUED, event)
        return len(checkpointed)

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.step_or_log()
            self._wake.wait(self.interval_s)
            self._wake.clear()

    def step_or_log(self) -> None:
        """A pass; one that fails (a plug-in policy that raises) is counted, and logged with its
        traceback the 1st, 2nd, 4th, 8th... time: a policy failing at every pass logged one
        every pass, without end."""
        try:
            self.step()
        except Exception:  # keep scheduling; the error is in the server log
            self.metrics.failed_passes.inc()
            self._failed_passes += 1
            n = self._failed_passes
            if n & (n - 1) == 0:
                log.exception("scheduling pass failed (%d so far: logged at powers of two)", n)

    @property
    def capacity_gpus(self) -> int:
        """GPUs of the training pool: the most a job may ask for."""
        return self.cluster.pool_gpus("training")

    def validate(self, spec: object) -> dict:
        return validate_run_spec(spec, self.capacity_gpus, self.cluster.num_gpus)

    # -- one pass ----------------------------------------------------------------------------
    def step(self) -> Plan:
        """One pass: take what happened, decide and carry it out, publish."""
        with self._lock:
            self.state.advance_to(self.clock())
            self._take_events()
            t0 = time.perf_counter()
            plan = self._decide()
            self.pass_s = time.perf_counter() - t0
            self._publish()
            return plan

    def _take_events(self) -> None:
        """Into the state: nodes gone or back, new and cancelled jobs, the executor's outcomes
        (then profiling in the slots they freed), reclaim notices run out, measured progress."""
        self._sync_nodes()
        self._take_requests()
        for outcome in self.executor.poll():
            try:
                self._outcome(outcome)
            except Exception:  # one run's outcome must not lose the others polled with it
                log.exception(
                    "scheduling pass: the outcome of job %s was not recorded", outcome.job_id
                )
        self._start_profiling()
        self.loaning.check_deadlines()
        self._progress()

    def _decide(self) -> Plan:
        """The policy's plan, applied whole or not at all, then carried out by the executor
        and recorded in the store (a refused plan is logged and skipped)."""
        state = self.state
        plan = schedule_pass(state, self.policy, self.admission)
        try:
            applied = state.apply(plan)
        except PlanError as e:  # nothing of it applied (nor the pass's admissions and
            # evictions): state, store and executor agree
            self.metrics.rejected_plans.inc()
            log.error("scheduling pass skipped, its plan was refused: %s", e)
            plan, applied = Plan(), Applied()
        self._act(applied, by_quota=self._quota_events(applied))
        self._take_changes()
        return plan

    def _publish(self) -> None:
        """The metrics, the dashboard's history, and forgetting what is old."""
        self.metrics.observe(self)
        self._sample(self.state)
        self._discard_old()

    # -- maintenance: nodes out of service ---------------------------------------------------
    def set_node(self, name: str, service: str) -> dict:
        """The admin API: a node in service (``ready``), taking no new job (``cordoned``: its
        jobs run to their ends), or that and its jobs preempted now (``drained``: each
        checkpoints and waits again). Kept in the store: a restarted server keeps it."""
        nid = self.node_names.index(name)
        with self._lock:
            self.state.advance_to(self.clock())
            kind = {"ready": "uncordon", "cordoned": "cordon", "drained": "drain"}[service]
            self.store.add_node_event(self.state.now, kind, name)
            if service == "ready":
                self.state.uncordon(nid)
            else:
                for job in self.state.cordon(nid, drain=service == "drained"):
                    self.executor.stop(job.job_id, graceful=True)
                    self._set_status(
                        self.store.known_job(job.job_id),
                        QUEUED,
                        f"preempted: node {name} drained by the operator: checkpoints and waits",
                        preemptions=job.preemptions,
                    )
            cordoned = sorted(self.node_names[n] for n in self.state.cordoned)
            self.store.set_setting(CORDONED_SETTING, json.dumps(cordoned))
            self.metrics.observe(self)
        log.info("node %s: %s by the admin", name, service)
        self.wake()
        return {"name": name, "in_service": nid not in self.state.cordoned}

    # -- capacity loaning (Aryl): runtime/loaning.py ------------------------------------------
    def set_inference_demand(self, servers: int) -> dict:
        """The inference side's autoscaler says how many of its servers it needs within the
        reclaim notice (:meth:`.loaning.ServerLoaning.set_demand`); returns the pools."""
        with self._lock:
            self.state.advance_to(self.clock())
            self.loaning.set_demand(servers)
            self._take_changes()
            self.metrics.observe(self)
        self.wake()
        return self.pools()

    def pools(self) -> dict:
        return self.loaning.pools()

    def _take_changes(self) -> None:
        """What the state scheduled: servers it handed back get their inference stand-in.
        (Finishes and switches it projected are the simulator's events: here the workers
        report them.)"""
        changes = self.state.changes
        self.loaning.handed_back(changes.returned)
        changes.returned.clear()
        changes.finishes.clear()
        changes.switches.clear()

    def set_quota(self, tenant: str, fields: dict) -> dict:
        """The admin API: a tenant's quota, now (validated as a quota file's entry), and after
        a restart (kept in the store)."""
        quota = quota_from(fields, f"tenants.{tenant}")
        with self._lock:
            self.store.set_quota(tenant, fields)
            self.state.advance_to(self.clock())
            self.admission.set_quota(tenant, quota, self.state.now)
        self.wake()
        return self.quotas(tenant)["tenants"][tenant]

    def unprofiled_waiting_for_quota(self) -> Counter:
        """Per tenant, its jobs waiting for a profiling run that its quota could not admit now
        (a job enters the state only once profiled: the admission's books do not count it)."""
        return Counter(
            t
            for t, needs in self.to_profile.waiting()
            if not self.admission.could_admit(self.state, t, *needs)
        )

    def create_tenant(self, name: str, token_hash: str) -> dict:
        """The admin API: a new tenant. Under ``--quotas equal`` the training GPUs are split
        again, evenly between all tenants; one whose quota was set through the API keeps it
        (and counts in the split). (sqlite3.IntegrityError: the name is taken.)"""
        tenant = self.store.create_tenant(name, token_hash)
        if self.admission.config.source == "equal":
            with self._lock:
                self.state.advance_to(self.clock())
                self._split_equally()
            self.wake()
        return tenant

    def remove_tenant(self, name: str) -> dict | None:
        """The admin API: the tenant is removed. Its token is refused from now on; its queued
        and running jobs are cancelled (at the next pass, as a cancel is). Under ``--quotas
        equal`` its share is split again between the others; under other quotas its quota
        stays, all of it lent to its cohort (a cohort that lost it could never again run a job
        its other tenants' quotas cannot hold), until the operator changes it. Its finished
        jobs stay, for usage and export, until the retention. None: no such tenant."""
        now = self.clock()
        if not self.store.remove_tenant(name, now):
            return None
        live = self.store.jobs(tenant_id=name, statuses=(QUEUED, RUNNING))
        for row in live:
            if not row["cancel_requested"]:
                event = "cancel requested: its tenant was removed"
                self.store.update_job(row["id"], event=event, cancel_requested=1)
        log.info("tenant %s removed by the admin: %d of its jobs cancelled", name, len(live))
        if self.admission.config.source == "equal":
            self.store.delete_quota(name)
            with self._lock:
                self.state.advance_to(now)
                self.admission.remove_tenant(name, self.state.now)
                self._split_equally()
        self.wake()
        return {"name": name, "removed": now, "jobs_cancelled": len(live)}

    def _split_equally(self) -> None:
        """Under ``--quotas equal``: the training GPUs split evenly between the tenants; one
        whose quota was set through the API keeps it (and counts in the split)."""
        names = [t["name"] for t in self.store.tenants()]
        shares, kept = equal_shares(names, self.capacity_gpus), self.store.quotas()
        for t, quota in shares.tenants.items():
            if t not in kept and self.admission.config.tenants.get(t) != quota:
                self.admission.set_quota(t, quota, self.state.now)

    def _sample(self, state: ClusterState) -> None:
        """(time, GPUs held, GPUs usable, jobs waiting, jobs running), every HISTORY_EVERY_S."""
        now = self.clock()
        if not self.history or now - self.history[-1][0] >= HISTORY_EVERY_S:
            usable = state.free.usable_gpus()
            self.history.append(
                (now, usable - state.free.total, usable, len(state.pending), len(state.running))
            )

    def _discard_old(self) -> None:
        """Delete the checkpoints of jobs finished more than the checkpoint retention ago, and
        whatever is kept of finished jobs past the job retention or each tenant's bound."""
        now = self.clock()
        if now < self._next_sweep:
            return
        self._next_sweep = now + min(SWEEP_EVERY_S, self.checkpoint_retention_s)
        cutoff = now - self.checkpoint_retention_s
        for jid in self.store.finished_between(self._swept_until, cutoff):
            self.executor.discard(jid)
        self._swept_until = cutoff
        for jid in self.store.prune(self.finished_kept_per_tenant, now - self.job_retention_s):
            self.executor.discard(jid, log=True)

    def _requeued(self, job: JobState, event: str, stop: bool = True, **fields: Any) -> None:
        """The state stopped a running job that did not end by itself (a lost node, a reclaim
        notice run out): its run is killed (``stop``) and its reports are stale from now on;
        the store shows it queued, with ``event``."""
        if stop:
            self.executor.stop(job.job_id, graceful=False)
        self.live[job.job_id].killed = True
        self._set_status(self.store.known_job(job.job_id), QUEUED, event, **fields)

    def _set_status(self, row: dict, status: str, event: str, **fields: Any) -> None:
        # one instant for the event, the run it opens or closes (the usage) and its finish
        now = fields.get("finished") or self.clock()
        run = None
        if status == RUNNING and "gpus" in fields:  # a run starts (or restarts resized)
            run = len(fields["gpus"])
        elif row["status"] == RUNNING and status != RUNNING:
            run = 0  # its run ends
        self.store.update_job(row["id"], event=event, at=now, run=run, status=status, **fields)
        if row["status"] != status:
            self.metrics.transition(row["status"], status)
        row["status"] = status

    def _sync_nodes(self) -> None:
        alive = {n.name: n.alive for n in self.executor.inventory()}
        for nid, name in enumerate(self.node_names):
            down = nid in self.state.down_nodes
            if down and alive.get(name):
                self.state.node_up(nid)
                self.store.add_node_event(self.clock(), "up", name)
            elif not down and not alive.get(name, False):
                self.store.add_node_event(self.clock(), "down", name)
                victims = self.state.jobs_on(nid)
                self.state.node_down(nid)  # the state requeues them, counting a failure
                for job in victims:
                    self.live[job.job_id].meter.failed(self.clock())
                    self._requeued(
                        job,
                        f"node {name} lost: requeued, resumes from its last checkpoint",
                        failures=job.failures,
                    )

    def _take_requests(self) -> None:
        for row in self.store.jobs(statuses=(QUEUED, RUNNING), cancel_requested=True):
            live = self.live.get(row["id"])
            if live is not None:
                if live.state.status is Status.RUNNING:
                    self.executor.stop(row["id"], graceful=False)
                self.state.cancel(live.state)
                self._retire(row["id"])
            else:  # waiting for its profile (a run under way reports later, and is dropped)
                self.to_profile.forget(row["id"])
            self._set_status(row, CANCELLED, "cancelled", finished=self.clock())
        for row in self.store.jobs(statuses=(QUEUED,), after_seq=self._seen_seq):
            self._seen_seq = max(self._seen_seq, row["seq"])
            if row["id"] in self.live:
                continue
            try:
                self._take_new(row)
            except Exception as e:  # its row, not the pass: it fails, named (else: stuck queued)
                log.exception("job %s could not be taken in", row["id"])
                why = f"could not be scheduled: {type(e).__name__}: {str(e)[:500]}"
                self._set_status(row, FAILED, why, message=why, finished=self.clock())
        self._start_profiling()

    def _take_new(self, row: dict) -> None:
        """A job seen queued for the first time: into the state, or to be profiled first."""
        if row["profile"] is not None and (why := checked_profile(row["profile"])[1]):
            # stored by a server from before profiles were checked (it is checked on arrival
            # now): not trusted, the job goes on as one never profiled
            self.store.update_job(
                row["id"], event=f"its stored profile is dropped: {why}", profile=None
            )
            row["profile"] = None
        if (self.policy.shares_gpus or self.policy.moldable) and row["profile"] is None:
            # a sharing policy needs the job's memory, GENIE its speed on other placements:
            # profile it before it may be scheduled
            spec = to_job_spec(row["spec"], row["id"], row["tenant_id"], row["submitted"])
            fewest, most = spec.start_range(self.policy.moldable)
            # GENIE times a job on 2 workers too, unless it may only ever run on one
            placements = self.policy.moldable and most > 1
            needs = (fewest, spec.priority)
            self.to_profile.add(row["tenant_id"], row["id"], self.clock(), needs, placements)
            if not self.admission.could_admit(self.state, row["tenant_id"], *needs):
                self.store.update_job(
                    row["id"], event="its profiling run waits for its tenant's quota"
                )
        else:
            self._enter(row)

    def _start_profiling(self) -> None:
        """Start the profiling runs whose turn it is (:class:`.profiling_queue.ProfilingQueue`).
        A run holds GPUs in the books and waits for them; it starts before the scheduling
        pass, as the shortest job there is."""
        shares, now = self.policy.shares_gpus, self.clock()
        # a job is profiled once its quota could admit it
        may_start = functools.partial(self.admission.could_admit, self.state)
        while (turn := self.to_profile.next_run(self.state, shares, now, may_start)) is not None:
            jid, tenant, gpus, room_mib = turn
            row = self.store.job(jid)
            if row is not None and row["status"] == QUEUED and not row["cancel_requested"]:
                self.state.lease(jid, gpus, tenant)  # its tenant's use while it runs
                placement = self._placement(gpus)
                spec = (
                    row["spec"]
                    if room_mib is None
                    else {**row["spec"], "memory_grant_mib": room_mib}
                )
                self.executor.profile(jid, spec, placements=len(gpus) > 1, gpus=placement)
                self.to_profile.started(jid, tenant, beside=room_mib is not None)
                beside = "" if room_mib is None else f" beside a job, capped at {room_mib:,.0f} MiB"
                self.store.update_job(jid, event=f"profiling on {_where(placement)}{beside}")
            else:
                self.to_profile.forget(jid)

    def _enter(self, row: dict) -> None:
        """Put a queued job in the state (and its profile in the workload model)."""
        jid = row["id"]
        if row["profile"] is not None:
            self.speed.profiles[jid] = row["profile"]
        spec = to_job_spec(row["spec"], jid, row["tenant_id"], row["submitted"], row["profile"])
        job = self.state.submit(spec)
        job.preemptions, job.failures = row["preemptions"], row["failures"]  # from earlier runs
        self.live[jid] = LiveJob(
            job,
            row["attempt"],
            meter=JobMeter.load(row.get("measured")),
            own_iterations=row["spec"].get("iterations"),
        )

    def _retire(self, jid: str) -> None:
        """The job left the state for good: forget what the service kept of it."""
        self.live.pop(jid, None)
        self.speed.forget(jid)

    def _outcome(self, outcome: Outcome) -> None:
        jid = outcome.job_id
        if outcome.attempt == 0:  # a profiling run
            # the jobs it ran beside measure anew from here (a run may begin and end between two
            # of their reports)
            for g in self.state.leases.get(jid, ()):
                for job in self.state.occupancy.jobs[g]:
                    self.live[job.job_id].meter.reconfigured()
            self.state.release(jid)
            beside = self.to_profile.ended(jid)
            row = self.store.job(jid)
            if row is None or row["status"] != QUEUED or jid in self.live:
                self.to_profile.forget(jid)
                return  # cancelled meanwhile
            if beside and outcome.kind == "failed" and out_of_memory(outcome.detail):
                # the rest of a shared GPU was too small: again, on a whole one
                self.to_profile.again(row["tenant_id"], jid, whole=True)
                self.store.update_job(
                    jid,
                    event="profiling ran out of the shared GPU's memory: it waits for a whole GPU",
                )
                return
            if outcome.kind == "failed" and outcome.cause == CLUSTER:
                failures = self.to_profile.cluster_failure(jid)
                if failures <= MAX_CLUSTER_FAILURES:
                    self.to_profile.again(row["tenant_id"], jid)
                    self.store.update_job(
                        jid,
                        event=f"{outcome.detail}: outside the job, so it is profiled again "
                        f"({failures} of {MAX_CLUSTER_FAILURES} such)",
                    )
                    return
            self.to_profile.forget(jid)
            profile, why = None, None
            if outcome.kind == "profiled":
                # its program ran in the same process as the measurement: a claim, checked
                profile, why = checked_profile(json.loads(outcome.detail))
            if profile is not None:
                row["profile"] = profile
                self.store.update_job(jid, event="profiled", profile=profile)
                self._enter(row)
            else:
                detail = outcome.detail if why is None else f"profiling reported {why}"
                self._set_status(row, FAILED, detail, message=detail, finished=self.clock())
            return
        live = self.live.get(jid)
        if live is None or outcome.attempt != live.attempt or live.killed:
            return  # a stopped or superseded run
        job = live.state
        # the iteration its process says it stopped at: kept only in the job's range
        iteration = checked_iteration(outcome.iteration, live.own_iterations)
        fields = {} if iteration is None else {"iteration": iteration}
        if outcome.kind == "done" and job.status is Status.RUNNING:
            self.state.finish(job)
            self._retire(jid)
            # judged before the status shows, on the finish the store keeps: whoever sees the
            # job done sees it counted
            finished = self.clock()
            self._judge_deadline(job, met=finished <= (job.spec.deadline_s or 0))
            self._set_status(
                self.store.known_job(jid),
                DONE,
                f"done after {iteration} iterations",
                finished=finished,
                **fields,
            )
        elif outcome.kind == "switched":
            self.state.switch(job)
            self.store.update_job(
                jid,
                event=f"background resize done at iteration {iteration} ({outcome.detail})",
                **fields,
            )
        elif outcome.kind == "stopped":
            at = (
                f"at iteration {iteration}"
                if iteration is not None
                else "before its first iteration"
            )
            self.store.update_job(
                jid,
                event=f"stopped {at} ({outcome.detail or 'checkpointed'})",
                **fields,
            )
        elif outcome.kind == "failed" and job.status is Status.RUNNING:
            row = self.store.known_job(jid)
            live.meter.failed(self.clock())
            if outcome.cause == MEMORY and jid not in self.speed.exclusive:
                self.speed.exclusive.add(jid)  # honoured once: from now on alone and uncapped
                self.state.fail(job, counted=False)
                self._set_status(
                    row,
                    QUEUED,
                    f"failed: {outcome.detail.strip().splitlines()[-1]}; requeued to run "
                    "alone, without a memory cap",
                    message=outcome.detail,
                    **fields,
                )
                return
            if outcome.cause == CLUSTER and live.cluster_failures < MAX_CLUSTER_FAILURES:
                live.cluster_failures += 1
                # the operator's to see: a node or a setup that fails every job (a sandbox that
                # cannot start) shows here, not only in each job's events
                log.warning("job %s failed for a reason outside it: %s", jid, outcome.detail)
                self.state.fail(job, counted=False)
                self._set_status(
                    row,
                    QUEUED,
                    f"failed for a reason outside the job ({outcome.detail}): requeued, not "
                    f"counted as its failure ({live.cluster_failures} of "
                    f"{MAX_CLUSTER_FAILURES} such)",
                    message=outcome.detail,
                    **fields,
                )
                return
            self.state.fail(job)
            if job.failures >= self.max_failures:
                self.state.cancel(job)  # it leaves the queue for good
                self._retire(jid)
                self._judge_deadline(job, met=False)
                self._set_status(
                    row,
                    FAILED,
                    f"failed {job.failures} times, last: {outcome.detail}",
                    failures=job.failures,
                    message=outcome.detail,
                    finished=self.clock(),
                    **fields,
                )
            else:
                self._set_status(
                    row,
                    QUEUED,
                    f"failed ({outcome.detail}): requeued",
                    failures=job.failures,
                    message=outcome.detail,
                    **fields,
                )

    def _judge_deadline(self, job: JobState, met: bool) -> None:
        if job.spec.deadline_s is not None:
            self.metrics.deadlines.labels("met" if met else "missed").inc()

    def predicted_finish(self, job_id: str) -> float | None:
        """When a running job is predicted to end: its work left at its measured speed."""
        live = self.live.get(job_id)
        if live is None or live.state.status is not Status.RUNNING:
            return None
        finish = self.state.projected_finish(live.state)
        return finish if math.isfinite(finish) else None

    def _progress(self) -> None:
        """Bring the state's view of running jobs to what the workers measure: the work done,
        and the job's duration re-estimated from its measured iteration time."""
        for jid, job in list(self.state.running.items()):
            try:
                self._job_progress(jid, job)
            except Exception:  # one job's report must not stop the pass for the others
                log.exception("scheduling pass: the progress of job %s was not recorded", jid)

    def _job_progress(self, jid: str, job: JobState) -> None:
        live = self.live[jid]
        p, why = checked_progress(self.executor.progress(jid), live.own_iterations)
        if why:
            live.bad_reports += 1
            self.metrics.dropped_reports.inc()
            n = live.bad_reports
            if n & (n - 1) == 0:  # the 1st, 2nd, 4th, 8th...: named, without flooding events
                self.store.update_job(jid, event=f"progress report dropped ({n} so far): {why}")
            log.warning("job %s: progress report dropped: %s", jid, why)
            return
        if not p or not p["iteration"] or p["iteration"] == live.iteration:
            return
        live.iteration = p["iteration"]
        key = config_key(len(job.gpus), job.accumulation, job.sharing)
        fields = {"iteration": p["iteration"], "iteration_s": p["iteration_s"]}
        total = p["iterations"]  # (the run's count: an epochs job's is its data's)
        duration = None
        leased = self.state.occupancy.leased
        if leased and not leased.isdisjoint(job.gpus):
            # a profiling run beside it slows it: its time now is neither alone nor a pair's
            live.meter.reconfigured()
        elif live.meter.observe(self.clock(), p["iteration"], p["iteration_s"], key):
            fields["measured"] = live.meter.dump()
            # what `dlsched jobs` shows: the server's clock, not the program's own report
            fields["measured_iteration_s"] = live.meter.iteration_s(key)
            if job.sharing:
                self._learn_slowdown(job, live.meter)
            # Its duration (solo, on the GPUs it asked for) from the iteration times the
            # server's clock measured, taken back from the configuration it ran in (workers,
            # sub-batches, sharing) by the model that gives its speed there: a spec's duration_s,
            # and the default, are estimates only until then (a tenant that claims a short job
            # is ranked by the claim only until its first measurement)
            solo = solo_iteration_s(live.meter, job.spec, self.speed, self.speed.slowdown_of(jid))
            duration = total * solo[0] if solo else None
        self.store.update_job(jid, **fields)
        self.state.observe_progress(job, p["iteration"] / total, duration)

    def _learn_slowdown(self, job: JobState, meter: JobMeter) -> None:
        """From now on the policy weighs sharing this job by the slowdown it really had."""
        solo = solo_iteration_s(meter, job.spec, self.speed)
        slowdown = solo and shared_slowdown(meter, job.spec, self.speed, solo[0])
        if slowdown:
            self.speed.measured_slowdown(job.job_id, slowdown, job.spec.tenant)

    def _placement(self, gpus: tuple[int, ...]) -> list[tuple[str, int]]:
        nodes = self.cluster.nodes
        return [
            (
                self.node_names[self.cluster.gpu_node[g]],
                g - nodes[self.cluster.gpu_node[g]].first_gpu,
            )
            for g in gpus
        ]

    def _quota_events(self, applied: Applied) -> dict[str, tuple[str, str]]:
        """The admission stage's admissions and evictions of this pass, for the metrics; returns
        what it did to each job it evicted (the running ones are among the plan's preemptions)
        or shrank (a borrower's elastic job, among the plan's resizes: it runs on, unless the
        policy preempts it after), and why."""
        preempted = {job.job_id for job in applied.preempted}
        by_quota: dict[str, tuple[str, str]] = {}
        for kind, job, detail in self.admission_log:
            tenant = job.spec.tenant
            if kind == "admitted":
                self.metrics.admitted(tenant, float(detail))  # (its wait)
                continue
            by_quota[job.job_id] = (kind, str(detail))
            if kind == "evicted":
                self.metrics.evicted(tenant, str(detail))
                if job.job_id not in preempted:  # admitted, not started: back to waiting
                    self.store.update_job(
                        job.job_id, event=f"admission withdrawn ({self._why(str(detail))})"
                    )
        self.admission_log.clear()
        return by_quota

    @staticmethod
    def _why(reason: str) -> str:
        return (
            "its tenant borrowed GPUs another tenant reclaimed"
            if reason == "reclaim"
            else "a job of a higher priority class of its tenant needed its quota"
        )

    def _act(
        self,
        applied: Applied,
        reason: str = "",
        by_quota: dict[str, tuple[str, str]] | None = None,
    ) -> None:
        """Tell the executor and the store what the state changed: preemptions, resizes,
        starts, each as the state now hold it; ``by_quota``: the jobs the quota stage evicted
        or shrank, and why."""
        by_quota = by_quota or {}
        if not applied:
            return
        now = self.clock()
        why = f" ({reason})" if reason else ""
        for job in applied.preempted:
            jid = job.job_id
            self.executor.stop(jid, graceful=True)
            kind, quota_reason = by_quota.get(jid, ("", ""))
            message = (
                f"evicted: {self._why(quota_reason)}; checkpoints and waits"
                if kind == "evicted"
                else f"preempted by {self.policy.name}{why}: checkpoints and waits"
            )
            self._set_status(
                self.store.known_job(jid), QUEUED, message, preemptions=job.preemptions
            )
        for job in applied.resized:
            gpus = job.gpus
            kind, quota_reason = by_quota.get(job.job_id, ("", ""))
            cause = f" ({self._why(quota_reason)})" if kind == "shrunk" else why
            if self.resize_mechanism == "background":
                placement = self._placement(tuple(gpus))
                self.store.update_job(
                    job.job_id,
                    event=f"resizing in the background to {_where(placement)}{cause}",
                    at=now,
                    run=len(gpus),
                    gpus=[list(p) for p in placement],
                )
                self.live[job.job_id].meter.reconfigured()
                self.executor.resize(job.job_id, placement)
            else:  # stop-resume: checkpoint, restart at the new size
                self.executor.stop(job.job_id, graceful=True)
                self._launch(job, gpus, f"resized to {len(gpus)} GPUs (stop-resume){cause}")
        for job in applied.started:
            row = self.store.known_job(job.job_id)
            k = job.accumulation
            self._launch(
                job,
                job.gpus,
                "started" if k == 1 else f"started sharing, {k} sub-batches",
                started=row["started"] or now,
                accumulation=k,
            )

    def _launch(
        self,
        job: JobState,
        gpus: Sequence[int],
        event: str,
        accumulation: int = 1,
        **fields: Any,
    ) -> None:
        jid = job.job_id
        live = self.live[jid]
        live.attempt += 1
        live.killed = False
        attempt = live.attempt
        row = self.store.known_job(jid)
        placement = self._placement(tuple(gpus))
        live.meter.launched(self.clock(), row["iteration"], first=row["started"] is None)
        self._set_status(
            row,
            RUNNING,
            f"{event} on {_where(placement)}",
            gpus=[list(p) for p in placement],
            attempt=attempt,
            **fields,
        )
        config = {**row["spec"], "accumulation": accumulation}
        if self.policy.shares_gpus and job.memory_mib is not None:
            config["memory_grant_mib"] = job.memory_mib  # a partner may be admitted on it
        self.executor.start(jid, attempt, placement, config)

    # -- what the API shows: runtime/read_models.py ------------------------------------------
    def snapshot(self, tenant: str | None = None) -> dict:
        with self._lock:
            return read_models.snapshot(self, tenant)

    def quotas(self, tenant: str | None = None) -> dict:
        with self._lock:
            return read_models.quota_standing(self, tenant)

    def export(self, since: float, until: float, tenant: str | None = None) -> dict:
        return read_models.export(self, since, until, tenant)


def _where(placement: Sequence[tuple[str, int]]) -> str:
    """GPUs as the events name them: ``n0/gpu0, n1/gpu3``."""
    return ", ".join(f"{n}/gpu{i}" for n, i in placement)
