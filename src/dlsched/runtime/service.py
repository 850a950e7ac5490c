"""The scheduling loop: the simulator's policies deciding on live state, Ray carrying it out.

The books are kept by the same :class:`~dlsched.sim.engine.Simulator` the simulator uses, driven
by the wall clock (``advance_to``, ``submit``, ``complete``, ``requeue``, ``cancel``,
``node_down``), so a policy sees exactly the view it sees in simulation. Every pass: new and
cancelled jobs from the store, what the executor reports (finished, failed, stopped, progress),
nodes gone or back; then one ``policy.schedule`` whose plan is applied to the books and handed to
the executor. The store is written before the executor is told, so a restarted server knows
every job: jobs it finds running are requeued and resume from their last checkpoint (their
workers died with the previous server).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter

from ..cluster import Cluster
from ..errors import SpecError
from ..jobs import JobState, Status
from ..policies.base import Plan, make_policy
from ..sim import SimConfig
from ..sim.engine import Simulator
from .executor import NodeInfo, Outcome, RayExecutor
from .jobspec import to_job_spec, validate_run_spec
from .metrics import RuntimeMetrics
from .speed import RuntimeSpeed
from .store import CANCELLED, DONE, FAILED, QUEUED, RUNNING, Store

log = logging.getLogger("dlsched.service")

EMULATED_GPU_MEM_MIB = 16384     # emulated GPUs: the size memory checks assume
DEFAULT_MAX_FAILURES = 3         # chosen: a job that failed this many times stays failed
class SchedulerService:
    def __init__(self, store: Store, executor: RayExecutor, policy: str = "fifo",
                 policy_params: dict | None = None, interval_s: float = 0.5,
                 max_failures: int = DEFAULT_MAX_FAILURES, resize_mechanism: str = "background") -> None:
        self.store, self.executor = store, executor
        self.policy = make_policy(policy, **(policy_params or {}))
        self.interval_s, self.max_failures = interval_s, max_failures
        self.metrics = RuntimeMetrics()
        inventory = [n for n in executor.inventory() if n.alive]
        if not inventory:
            raise SpecError("cluster", "the Ray cluster has no node with dlsched GPU resources")
        self.node_names = [n.name for n in inventory]
        self.cluster = Cluster.build([{"count": 1, "gpus_per_node": n.gpus, "gpu_type": "emulated",
                                       "gpu_mem_mib": EMULATED_GPU_MEM_MIB} for n in inventory])
        self.resize_mechanism = resize_mechanism
        self.speed = RuntimeSpeed()
        self.books = Simulator(self.cluster, [], self.policy,
                               SimConfig(restart_overhead_s=0.0, timeseries=False, resize_mechanism=resize_mechanism),
                               speed=self.speed)
        self.books.advance_to(time.time())
        self.jobs: dict[str, JobState] = {}       # live jobs (queued or running) in the books
        self.attempt: dict[str, int] = {}
        self.jobs_estimated: dict[str, bool] = {}  # duration re-estimated from measurements
        self.pass_s: float | None = None          # the last scheduling pass's wall time
        self._seen_seq = 0                        # the store's jobs up to here are in the books
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._recover()

    # -- lifecycle ---------------------------------------------------------------------------
    def _recover(self) -> None:
        for row in self.store.jobs(statuses=(RUNNING,)):
            self._set_status(row, QUEUED, "server restarted: resumes from its last checkpoint")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True, name="dlsched-scheduler")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout=30)

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:            # keep scheduling; the error is in the server log
                log.exception("scheduling pass failed")
            self._wake.wait(self.interval_s)
            self._wake.clear()

    @property
    def capacity_gpus(self) -> int:
        return self.cluster.num_gpus

    def validate(self, spec) -> dict:
        return validate_run_spec(spec, self.capacity_gpus)

    # -- one pass ----------------------------------------------------------------------------
    def step(self) -> Plan:
        with self._lock:
            books = self.books
            books.advance_to(time.time())
            self._sync_nodes()
            self._take_requests()
            for outcome in self.executor.poll():
                self._outcome(outcome)
            self._progress()
            t0 = time.perf_counter()
            plan = self.policy.schedule(books)
            if plan:
                books.apply(plan)
                self._act(plan)
            self.pass_s = time.perf_counter() - t0
            self.metrics.observe(self)
            return plan

    def _set_status(self, row: dict, status: str, event: str, **fields) -> None:
        self.store.update_job(row["id"], event=event, status=status, **fields)
        if row["status"] != status:
            self.metrics.transition(row["status"], status)
        row["status"] = status

    def _sync_nodes(self) -> None:
        alive = {n.name: n.alive for n in self.executor.inventory()}
        for nid, name in enumerate(self.node_names):
            down = nid in self.books.down_nodes
            if down and alive.get(name):
                self.books.node_up(nid)
            elif not down and not alive.get(name, False):
                for jid in [j.job_id for j in self.books.running.values()
                            if any(self.cluster.gpu_node[g] == nid for g in j.gpus)]:
                    self.executor.stop(jid, graceful=False)
                    self.attempt[jid] = self.attempt.get(jid, 0) + 1    # its run's report is stale now
                    row = self.store.job(jid)
                    self._set_status(row, QUEUED, f"node {name} lost: requeued, resumes from its last checkpoint",
                                     failures=row["failures"] + 1)
                self.books.node_down(nid)        # requeues those jobs in the books

    def _take_requests(self) -> None:
        for row in self.store.jobs(statuses=(QUEUED, RUNNING), cancel_requested=True):
            job = self.jobs.pop(row["id"], None)
            if job is not None:
                if job.status is Status.RUNNING:
                    self.executor.stop(row["id"], graceful=False)
                self.books.cancel(job)
            self._set_status(row, CANCELLED, "cancelled", finished=time.time())
        for row in self.store.jobs(statuses=(QUEUED,), after_seq=self._seen_seq):
            self._seen_seq = max(self._seen_seq, row["seq"])
            if row["id"] in self.jobs:
                continue
            if self.policy.shares_gpus and row["profile"] is None:
                # a sharing policy needs the job's memory: profile it before it may be scheduled
                self.executor.profile(row["id"], row["spec"])
                self.store.update_job(row["id"], event="profiling")
            else:
                self._enter(row)

    def _enter(self, row: dict) -> None:
        """Put a queued job in the books (and its profile in the workload model)."""
        jid = row["id"]
        if row["profile"] is not None:
            self.speed.profiles[jid] = row["profile"]
        spec = to_job_spec(row["spec"], jid, row["tenant_id"], row["submitted"], row["profile"])
        self.jobs[jid] = self.books.submit(spec)
        self.attempt[jid] = row["attempt"]
        self.jobs_estimated[jid] = "duration_s" not in row["spec"]     # no user estimate to keep

    def _outcome(self, outcome: Outcome) -> None:
        jid = outcome.job_id
        if outcome.attempt == 0:           # a profiling run
            row = self.store.job(jid)
            if row is None or row["status"] != QUEUED or jid in self.jobs:
                return                         # cancelled meanwhile
            if outcome.kind == "profiled":
                row["profile"] = json.loads(outcome.detail)
                self.store.update_job(jid, event="profiled", profile=row["profile"])
                self._enter(row)
            else:
                self._set_status(row, FAILED, outcome.detail, message=outcome.detail, finished=time.time())
            return
        job = self.jobs.get(jid)
        if job is None or outcome.attempt != self.attempt.get(jid):
            return                                   # a stopped or superseded run
        row = self.store.job(jid)
        fields = {} if outcome.iteration is None else {"iteration": outcome.iteration}
        if outcome.kind == "done" and job.status is Status.RUNNING:
            self.books.complete(job)
            del self.jobs[jid]
            self._set_status(row, DONE, f"done after {outcome.iteration} iterations", finished=time.time(), **fields)
        elif outcome.kind == "switched":
            self.books.switch_done(job)
            self.store.update_job(jid, event=f"background resize done at iteration {outcome.iteration} "
                                  f"({outcome.detail})", **fields)
        elif outcome.kind == "stopped":
            self.store.update_job(jid, event=f"stopped at iteration {outcome.iteration} ({outcome.detail or 'checkpointed'})",
                                  **fields)
        elif outcome.kind == "failed" and job.status is Status.RUNNING:
            self.books.requeue(job)
            failures = row["failures"] + 1
            if failures >= self.max_failures:
                self.books.cancel(job)
                del self.jobs[jid]
                self._set_status(row, FAILED, f"failed {failures} times, last: {outcome.detail}",
                                 failures=failures, message=outcome.detail, finished=time.time(), **fields)
            else:
                self._set_status(row, QUEUED, f"failed ({outcome.detail}): requeued", failures=failures,
                                 message=outcome.detail, **fields)

    def _progress(self) -> None:
        """Bring the books' view of running jobs to what the workers measure: the work done,
        and the job's duration re-estimated from its measured iteration time."""
        for jid, job in self.books.running.items():
            p = self.executor.progress(jid)
            if not p or not p.get("iteration"):
                continue
            self.store.update_job(jid, iteration=p["iteration"], iteration_s=p.get("iteration_s"))
            total = p.get("iterations") or job.spec.iterations
            measured = p.get("iteration_s") and self.jobs_estimated.get(jid)
            self.books.observe_progress(job, p["iteration"] / total, total * p["iteration_s"] if measured else None)

    def _placement(self, gpus: tuple[int, ...]) -> list[tuple[str, int]]:
        nodes = self.cluster.nodes
        return [(self.node_names[self.cluster.gpu_node[g]], g - nodes[self.cluster.gpu_node[g]].first_gpu) for g in gpus]

    def _act(self, plan: Plan) -> None:
        now = time.time()
        for job in plan.preempt:
            jid = job.job_id
            self.executor.stop(jid, graceful=True)
            row = self.store.job(jid)
            self._set_status(row, QUEUED, f"preempted by {self.policy.name}: checkpoints and waits",
                             preemptions=row["preemptions"] + 1)
        for job, gpus in plan.resize:
            if self.resize_mechanism == "background":
                placement = self._placement(tuple(gpus))
                self.store.update_job(job.job_id, event=f"resizing to {len(gpus)} GPUs in the background",
                                      gpus=[list(p) for p in placement])
                self.executor.resize(job.job_id, placement)
            else:                          # stop-resume: checkpoint, restart at the new size
                self.executor.stop(job.job_id, graceful=True)
                self._launch(job, gpus, f"resized to {len(gpus)} GPUs (stop-resume)")
        for job, gpus in plan.start:
            row = self.store.job(job.job_id)
            k = plan.accumulation.get(job.job_id, 1)
            self._launch(job, gpus, "started" if k == 1 else f"started sharing, {k} sub-batches",
                         started=row["started"] or now, accumulation=k)

    def _launch(self, job: JobState, gpus, event: str, accumulation: int = 1, **fields) -> None:
        jid = job.job_id
        attempt = self.attempt[jid] = self.attempt.get(jid, 0) + 1
        row = self.store.job(jid)
        placement = self._placement(tuple(gpus))
        where = ", ".join(f"{n}/gpu{i}" for n, i in placement)
        self._set_status(row, RUNNING, f"{event} on {where}", gpus=[list(p) for p in placement],
                         attempt=attempt, **fields)
        self.executor.start(jid, attempt, placement, {**row["spec"], "accumulation": accumulation})

    # -- what the API shows ------------------------------------------------------------------
    def snapshot(self) -> dict:
        with self._lock:
            books = self.books
            nodes = []
            for node in self.cluster.nodes:
                holders = {}
                for job in books.running.values():
                    for g in job.gpus:
                        if self.cluster.gpu_node[g] == node.node_id:
                            holders[g - node.first_gpu] = job.job_id
                nodes.append({"name": self.node_names[node.node_id], "gpus": node.num_gpus,
                              "alive": node.node_id not in books.down_nodes, "jobs_by_gpu": holders})
            queue = sorted(books.pending.values(), key=lambda j: j.seq)
            return {"policy": self.policy.name, "gpus_total": self.cluster.num_gpus,
                    "gpus_free": books.free.total, "nodes": nodes,
                    "running": [j.job_id for j in books.running.values()],
                    "queue": [j.job_id for j in queue],
                    "queue_by_tenant": dict(Counter(j.spec.tenant for j in queue)),
                    "last_pass_ms": None if self.pass_s is None else self.pass_s * 1000}
