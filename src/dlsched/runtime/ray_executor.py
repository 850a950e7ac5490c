"""Runs jobs' workers on a Ray cluster, each pinned to the GPU the policy chose.

Every GPU is a Ray custom resource ``dlsched_gpu_<node>_<index>`` registered when its node
starts, with as many units as jobs may share the GPU (``JOBS_PER_GPU``); a worker asks for one
unit of exactly that resource and sets ``CUDA_VISIBLE_DEVICES=<index>``,
so it lands on that node and that device. :class:`LocalRayCluster` starts an embedded cluster of
emulated nodes with such resources (GPUs are emulated: nothing checks a device exists); to use an
existing cluster, start its nodes with them, e.g. ``ray start --num-gpus 4 --resources
'{"dlsched_gpu_n0_0": 2, ..., "dlsched_gpu_n0_3": 2}'``. Which jobs share a GPU, and whether
their memory fits, is the policy's decision: Ray isolates nothing.

A job's workers start as a gang: all must be placed and set up within ``start_timeout_s`` or
all are killed and the start fails. Each run has its own thread that waits on the workers, so
the scheduling loop never blocks; results come back through :meth:`RayExecutor.poll`.
Checkpoints and logs go to ``data_dir``, which every node must see (it is local here).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402

from .device import mps_environment, out_of_memory  # noqa: E402
from .executor_api import CLUSTER, JOB, MEMORY, NodeInfo, Outcome, Placement  # noqa: E402
from .job_network import HOST, PRIVATE, JobNetwork, free_address  # noqa: E402
from .ray_setup import LEAN_HEAD, lean_head_node  # noqa: E402
from .reaper import start_reaper  # noqa: E402
from .reports import checked_iteration  # noqa: E402
from .sandbox import Sandbox  # noqa: E402
from .template_host import start_host, warm_start  # noqa: E402
from .tenant_process import (  # noqa: E402
    TenantError,
    TenantProcess,
    TenantStartError,
    plain,
    stamp,
)

NAMESPACE = "dlsched"
JOBS_PER_GPU = 2  # as the simulator's max_jobs_per_gpu
RESOURCE = re.compile(r"^dlsched_gpu_(?P<node>[A-Za-z0-9-]+)_(?P<index>\d+)$")
# A node that also carries this resource is an inference server (Aryl's loaning).
INFERENCE_RESOURCE = "dlsched_pool_inference"
log = logging.getLogger("dlsched.executor")


CHECKPOINT, SAMPLES = "checkpoint.pt", "samples.jsonl"  # in the job's directory


def gpu_resource(node: str, index: int) -> str:
    return f"dlsched_gpu_{node}_{index}"


@dataclass
class _Run:
    job_id: str
    attempt: int
    placement: list[tuple[str, int]]
    config: dict
    actors: list = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    kill: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    progress: object = None  # the tenant process's last report, unchecked
    resize_to: list[tuple[str, int]] | None = None  # a background resize asked for
    # a background resize that could not be carried out: the run stops (checkpoints) and is
    # reported failed with this (detail, cause), so that it restarts at the size the books hold
    resize_failed: tuple[str, str] | None = None
    network: object = HOST  # its workers' network: HOST, or a ref to its namespace's path


# Chosen: a profiling run's few passes, with a slow build (torch's import alone is seconds on a
# busy node). A build that takes longer holds a slot others wait for: it fails with the reason.
PROFILE_TIMEOUT_S = 120.0
DIR_CHECK_EVERY_S = 5.0  # how often a running job's directory is measured (Sandbox.dir_mib)
# Chosen: how often a run's progress is asked, and until its first iteration (a user waits for
# that one: asked often for the second or so it takes, then the scheduler is told at once), for
# at most a window (a program whose first iteration takes longer is asked at the usual pace)
PROGRESS_EVERY_S = 0.5
FIRST_PROGRESS_EVERY_S = 0.05
FIRST_PROGRESS_WINDOW_S = 5.0


@ray.remote(num_cpus=0)
def _profile_task(
    config: dict, device: int, job_id: str, job_dir: str, log_path: str, sandbox: Sandbox
) -> dict:
    process = _tenant_process(
        sandbox,
        job_id,
        Path(job_dir),
        Path(log_path),
        PRIVATE,
        CUDA_VISIBLE_DEVICES=str(device),
        JOB_PROFILING="1",
    )
    try:
        return process.call(
            "profile", PROFILE_TIMEOUT_S, config={**config, "memory_limit_mib": sandbox.memory_mib}
        )
    finally:
        process.kill()


def _ray_id_of(node: str) -> str | None:
    """Ray's id of the live node that carries ``node``'s GPU resources, if any."""
    prefix = f"dlsched_gpu_{node}_"
    for info in ray.nodes():
        if info["Alive"] and any(r.startswith(prefix) for r in info.get("Resources", {})):
            return info["NodeID"]
    return None


def _netns(network: str) -> str | None:
    """The namespace path in a worker's ``network`` (HOST, PRIVATE or a path), if it is one."""
    return None if network in (HOST, PRIVATE) else network


class _Networked:
    """What a job's workers on one host share (:mod:`.job_network`): the first opens the
    namespace (its holder dies with this actor), each one's tenant process keeps it alive, and a
    worker that joins later enters it through a worker already in it."""

    process: TenantProcess | None = None
    _holder: JobNetwork | None = None

    def open_network(self) -> str:
        self._holder = JobNetwork()
        return self._holder.path

    def network(self) -> str:
        """A path to the namespace this worker is in: its tenant process's, else its holder's."""
        if self.process is not None and self.process.proc.poll() is None:
            return f"/proc/{self.process.proc.pid}/ns/net"
        if self._holder is None:
            raise RuntimeError("this worker has no network to share")
        return self._holder.path

    def address(self, network: str) -> str:
        return free_address(_netns(network))


@ray.remote(num_cpus=0)
class ProfileWorker(_Networked):
    """One worker of GENIE's profiling group (:func:`.profile.profile_placements`), in its
    tenant process."""

    def __init__(
        self, device: int, job_id: str, job_dir: str, log_path: str, sandbox: Sandbox
    ) -> None:
        self.device = str(device)
        self.args = (sandbox, job_id, Path(job_dir), Path(log_path))

    def measure(
        self, config: dict, rank: int, world: int, master: str, network: str, partners: list
    ) -> dict | None:
        self.process = _tenant_process(
            *self.args, network, CUDA_VISIBLE_DEVICES=self.device, JOB_PROFILING="1"
        )
        try:
            return self.process.call(
                "profile_placements",
                PROFILE_TIMEOUT_S,
                config=config,
                rank=rank,
                world=world,
                master=master,
                partner_nodes=partners,
            )
        finally:
            self.process.kill()


def _tenant_process(
    sandbox: Sandbox, job_id: str, job_dir: Path, log_path: Path, network: str, /, **env: str
) -> TenantProcess:
    """A tenant process of the job; ``network`` as :meth:`Sandbox.command` takes it, or the path
    of the namespace to join. Forked from the node's template where there is one."""
    warm = warm_start(sandbox, job_id)
    return TenantProcess(
        sandbox.command(job_dir, job_id, network, placeholder=warm is not None),
        sandbox.environment(job_dir, **env),
        log_path,
        sandbox.control_group(job_id),
        _netns(network) if sandbox.isolate else None,
        warm,
    )


IN_PROGRAM = "in the program"  # a rank's start stage once its tenant's program runs


@ray.remote(num_cpus=0, max_concurrency=4)
class TrainWorker(_Networked):
    """One rank of a job: dlsched's trusted side of it. The tenant's program runs in a tenant
    process of its own (:mod:`.sandbox`), which this actor starts and relays to: ``run``
    trains; ``progress`` and ``stop`` answer meanwhile. The process starts with ``setup`` (or
    ``prepare``), in the run's network; a start that fails is the job's failure only when
    its tenant process failed (:meth:`RayExecutor._start_failure_cause`)."""

    def __init__(
        self,
        job_id: str,
        config: dict,
        rank: int,
        world: int,
        job_dir: str,
        log_path: str,
        device: int,
        sandbox: Sandbox,
    ) -> None:
        folder = Path(job_dir)
        config = {**config, "checkpoint_path": sandbox.job_path(folder, folder / CHECKPOINT)}
        if config.get("record_samples"):
            config["samples_path"] = sandbox.job_path(folder, folder / SAMPLES)
        self.train: dict[str, Any] = {"config": config, "rank": rank, "world": world}
        self.args = (sandbox, job_id, folder, Path(log_path))
        self.device = str(device)
        # read on this node: whether it runs MPS is the node's
        self.mps = mps_environment(config.get("memory_grant_mib"), JOBS_PER_GPU)
        self.stage = "up"

    def _start(self, network: str) -> TenantProcess:
        self.stage = "starting its tenant process"
        self.process = _tenant_process(
            *self.args, network, CUDA_VISIBLE_DEVICES=self.device, **self.mps
        )
        self.stage = "waiting for its tenant process"
        self.process.call("train", **self.train)
        self.stage = IN_PROGRAM  # our part is done: from here the tenant's program runs
        return self.process

    def start_stage(self) -> str:
        """How far this rank's start got: ``IN_PROGRAM`` once its tenant process runs the
        tenant's program (a start that stalls before is not the job's)."""
        return self.stage

    def setup(self, master: str | None, network: str) -> int:
        return self._start(network).call("setup", master=master)

    def prepare(self, network: str) -> None:
        self._start(network).call("prepare")

    def switch(self) -> None:
        if self.process is not None:
            self.process.tell("switch")

    def _started(self) -> TenantProcess:
        if self.process is None:  # (the executor asks in this order: a start, then these)
            raise TenantError("the worker's tenant process was never started")
        return self.process

    def regroup(self, master: str | None, rank: int, world: int) -> int:
        said = self._started().call("regroup", master=master, rank=rank, world=world)
        iteration = checked_iteration(said, None)
        if iteration is None:
            raise TenantError(f"the tenant process answered regroup with {str(said)[:200]!r}")
        return iteration

    def run(self) -> dict:
        process = self._started()
        result = process.call("run")
        if not (
            isinstance(result, dict)
            and result.get("status") in ("done", "stopped", "switch")
            and checked_iteration(result.get("iteration"), None) is not None
        ):
            raise TenantError(f"the tenant process answered run with {str(result)[:200]!r}")
        if result["status"] != "switch":
            process.kill()
        return result

    def progress(self) -> object:
        """The tenant process's report, cut to its four numbers (the service checks them,
        :mod:`dlsched.runtime.reports`); anything else in their place is marked, not passed.
        None when the process does not answer (a run that just ended has no process left):
        no report this time; the run's own result decides its outcome."""
        if self.process is None:
            return None
        try:
            p = self.process.call("progress", 5)
        except TenantError:
            return None
        if p is None or not isinstance(p, dict):
            return p if p is None else "(not a mapping)"
        return {
            k: v if v is None or isinstance(v, (int, float)) else "(not a number)"
            for k in ("iteration", "iterations", "iteration_s", "loss")
            if (v := p.get(k)) is not None
        }

    def stop(self) -> None:
        if self.process is not None:
            self.process.tell("stop")

    def pid(self) -> int:
        return os.getpid()


@ray.remote(num_cpus=0)
class InferenceStandIn:
    """What the inference side runs on a server it holds: a small model answering requests,
    holding every GPU unit of its node, so Ray places no training worker there while it lives
    (and it cannot start while one is left).

    Its being placed is what proves a reclaimed server empty, so nothing slow comes before
    ``ready``: the model (and torch) load on the first request. Ray starts its workers at a low
    priority (niceness 15), and a torch import there took 87 s on this 2-core machine next to two
    busy processes, against 9 s to place the actor itself."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.model: Any = None  # built at its first request

    def ready(self) -> dict:
        return {"node": self.node, "pid": os.getpid()}

    def infer(self, features: list[float]) -> list[float]:
        import torch

        if self.model is None:
            torch.set_num_threads(1)
            self.model = torch.nn.Sequential(
                torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)
            ).eval()
        with torch.no_grad():
            return self.model(torch.tensor([features], dtype=torch.float32))[0].tolist()


class LocalRayCluster:
    """An embedded Ray cluster on this machine: a head without GPUs, ``nodes`` emulated training
    nodes of ``gpus_per_node`` GPUs each (``n0``, ``n1``...) and ``inference_nodes`` emulated
    inference servers (``i0``, ``i1``...) of the same size."""

    def __init__(
        self, nodes: int, gpus_per_node: int, cpus_per_node: int = 4, inference_nodes: int = 0
    ) -> None:
        from ray._private import node as ray_node
        from ray.cluster_utils import Cluster

        self.gpus_per_node, self.cpus_per_node = gpus_per_node, cpus_per_node
        self._reaper = start_reaper()  # no Ray process outlives this one, even killed
        # No worker started ahead on the head as a driver connects (Ray's default): nothing runs
        # there, and each such idle worker cost a CPU-second (benchmarks/suite_cpu.py)
        head = {"num_cpus": 1, "num_gpus": 0, **LEAN_HEAD}
        system = {"prestart_worker_first_driver": False}
        # the head made without the dashboard's API server (``Cluster`` makes it through
        # ``ray._private.node.Node``, swapped for that one call: ``add_node`` runs in the main
        # thread only)
        node_class, ray_node.Node = ray_node.Node, lean_head_node()
        try:
            self.cluster = Cluster(
                initialize_head=True, head_node_args={**head, "_system_config": system}
            )
        finally:
            ray_node.Node = node_class
        self.nodes: dict[str, object] = {}
        for _ in range(nodes):
            self.add_node()
        for _ in range(inference_nodes):
            self.add_node(pool="inference")

    @property
    def address(self) -> str:
        return self.cluster.address

    def add_node(self, pool: str = "training") -> str:
        """Start one more emulated node, named by the smallest free ``n<i>`` (``i<i>`` for an
        inference server)."""
        prefix = "i" if pool == "inference" else "n"
        name = next(
            f"{prefix}{i}" for i in range(len(self.nodes) + 1) if f"{prefix}{i}" not in self.nodes
        )
        resources = {gpu_resource(name, i): JOBS_PER_GPU for i in range(self.gpus_per_node)}
        if pool == "inference":
            resources[INFERENCE_RESOURCE] = 1
        self.nodes[name] = self.cluster.add_node(
            num_cpus=self.cpus_per_node, num_gpus=self.gpus_per_node, resources=resources
        )
        return name

    def remove_node(self, name: str) -> None:
        self.cluster.remove_node(self.nodes.pop(name))

    def shutdown(self) -> None:
        self.cluster.shutdown()
        os.close(self._reaper)  # the watcher sweeps what shutdown left


class RayExecutor:
    """Implements :class:`~dlsched.runtime.executor_api.Executor` on a Ray cluster."""

    def __init__(
        self,
        address: str,
        data_dir: str | Path,
        sandbox: Sandbox,
        start_timeout_s: float = 120.0,
        stop_timeout_s: float = 60.0,
    ) -> None:
        if not ray.is_initialized():
            ray.init(
                address=address,
                namespace=NAMESPACE,
                logging_level=logging.WARNING,
                log_to_driver=False,
            )
        # absolute: workers get these paths in processes with other working directories (the
        # server's default, ``dlsched-data``, is relative)
        self.data_dir = Path(data_dir).resolve()
        self.sandbox = sandbox
        for folder in ("jobs", "logs"):
            (self.data_dir / folder).mkdir(mode=0o700, parents=True, exist_ok=True)
        self.start_timeout_s, self.stop_timeout_s = start_timeout_s, stop_timeout_s
        self._runs: dict[str, _Run] = {}
        self._profiling: dict[str, list] = {}  # job id -> its profiling task or group of actors
        self._outcomes: list[Outcome] = []
        self._lock = threading.Lock()
        self._known: dict[str, NodeInfo] = {}
        self._ray_ids: dict[str, str] = {}  # node name -> Ray's node id
        self._hosts: dict[str, str] = {}  # Ray's node id -> its host's address
        self._stand_ins: dict[str, tuple] = {}  # inference node -> (actor, its ready() ref)
        self._templates: dict[str, object] = {}  # Ray's node id -> its template host
        self.on_report: Callable[[], None] | None = None  # executor_api.Executor.on_report

    # -- the cluster -------------------------------------------------------------------------
    def inventory(self) -> list[NodeInfo]:
        """Nodes that carry dlsched GPU resources, sorted by name; a node seen once and gone
        since stays listed as not alive."""
        alive: dict[str, int] = {}
        pools: dict[str, str] = {}
        for node in ray.nodes():
            if not node["Alive"]:
                continue
            resources = node.get("Resources", {})
            for resource in resources:
                m = RESOURCE.match(resource)
                if m:
                    alive[m["node"]] = max(alive.get(m["node"], 0), int(m["index"]) + 1)
                    self._ray_ids[m["node"]] = node["NodeID"]
                    self._hosts[node["NodeID"]] = node["NodeManagerAddress"]
                    pools[m["node"]] = (
                        "inference" if INFERENCE_RESOURCE in resources else "training"
                    )
        for name, gpus in alive.items():
            self._known[name] = NodeInfo(name, gpus, True, pools[name])
        for name, info in self._known.items():
            if name not in alive and info.alive:
                self._known[name] = NodeInfo(name, info.gpus, False, info.pool)
        return sorted(self._known.values(), key=lambda n: (len(n.name), n.name))

    # -- runs --------------------------------------------------------------------------------
    def job_dir(self, job_id: str) -> Path:
        """The job's own directory (checkpoint, samples), writable by its tenant process."""
        return self.data_dir / "jobs" / job_id

    def log_path(self, job_id: str) -> Path:
        """The job's log: outside its directory, so that its program cannot swap it for a link."""
        return self.data_dir / "logs" / f"{job_id}.log"

    def samples_path(self, job_id: str) -> Path:
        return self.job_dir(job_id) / SAMPLES

    def discard(self, job_id: str, log: bool = False) -> None:
        """Delete a finished job's directory (its checkpoint), and with ``log`` its log."""
        shutil.rmtree(self.job_dir(job_id), ignore_errors=True)
        if log:
            self.log_path(job_id).unlink(missing_ok=True)

    def log(self, job_id: str, line: str) -> None:
        fd = os.open(
            self.log_path(job_id), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600
        )
        with os.fdopen(fd, "a") as f:
            f.write(f"{stamp()} {line}\n")

    def start(
        self, job_id: str, attempt: int, placement: list[tuple[str, int]], config: dict
    ) -> None:
        self.sandbox.prepare_job_dir(self.job_dir(job_id), job_id)
        run = _Run(job_id, attempt, placement, config)
        with self._lock:
            previous = self._runs.get(job_id)
            self._runs[job_id] = run
        run.thread = threading.Thread(
            target=self._drive, args=(run, previous), daemon=True, name=f"run-{job_id}-{attempt}"
        )
        run.thread.start()

    def stop(self, job_id: str, graceful: bool = True) -> None:
        """Ask a run to stop: gracefully (all workers stop after the same iteration and rank 0
        checkpoints; killed after ``stop_timeout_s``) or at once (the work since the last
        checkpoint is lost)."""
        run = self._runs.get(job_id)
        if run is not None:
            (run.stop if graceful else run.kill).set()

    def profile(
        self, job_id: str, config: dict, placements: bool = False, gpus: Placement | None = None
    ) -> None:
        """Start a job's profiling run (:mod:`.profile`) on ``gpus``; reported as a "profiled"
        outcome whose detail is the result as JSON, or "failed". Each of its workers holds its
        GPU whole (every sharing unit of it), or, given ``memory_grant_mib`` in ``config``, one
        place beside a job there; it sees only that device, so on real GPUs its times and
        memory are the device's. With ``placements`` (GENIE) it also times the job on
        2 workers: the first GPU's with each other's, of the same node or of another
        (``placements`` in the result: gpus, nodes, batch, iteration_s)."""
        self.sandbox.prepare_job_dir(self.job_dir(job_id), job_id)
        threading.Thread(
            target=self._profile,
            args=(job_id, config, placements, list(gpus or ())),
            daemon=True,
            name=f"profile-{job_id}",
        ).start()

    def _profile(self, job_id: str, config: dict, placements: bool, gpus: Placement) -> None:
        """Runs in a thread of its own; reports exactly one outcome, whatever fails."""
        args = (job_id, str(self.job_dir(job_id)), str(self.log_path(job_id)), self.sandbox)
        outcome = Outcome(job_id, 0, "failed", detail="profiling failed: no result")
        try:
            if placements:
                result = self._profile_placements(config, gpus, args)
            else:
                [(node, index)] = gpus
                self._template_on(node)
                units = 1 if config.get("memory_grant_mib") else JOBS_PER_GPU  # a slot, or whole
                task = _profile_task.options(resources={gpu_resource(node, index): units})
                ref = task.remote(config, index, *args)
                self._profiling[job_id] = [ref]
                result = ray.get(ref)
            outcome = Outcome(job_id, 0, "profiled", detail=json.dumps(result))
        except Exception as e:  # a program that cannot even build, or Ray or the node failed
            detail = f"profiling failed: {_error_text(e)}"
            tenants = _tenant_failed(e)
            outcome = Outcome(job_id, 0, "failed", detail=detail, cause=JOB if tenants else CLUSTER)
            if not tenants:  # ours, not the tenant's: where it broke
                logging.getLogger("dlsched.executor").error(
                    "profiling of %s failed outside its program", job_id, exc_info=e
                )
            try:
                self.log(job_id, detail)
            except Exception:  # a full disk: the outcome (and its slot) must still come back
                logging.getLogger("dlsched.executor").exception("log of %s not written", job_id)
        finally:
            self._profiling.pop(job_id, None)
            with self._lock:
                self._outcomes.append(outcome)
            self._tell()

    def _network(self, ray_nodes: list[str] | tuple[str, ...], first: Any) -> object:
        """The network of workers on these Ray nodes (:mod:`.job_network`): on one host, a
        namespace of their own, opened by ``first`` of them (a ref to its path); else HOST."""
        if not self.sandbox.isolate or not self._one_host(ray_nodes):
            return HOST
        return first.open_network.remote()

    def _stalled_start_cause(self, actors: list) -> tuple[str, str]:
        """Whose failure workers that were not ready in time (or failed starting) are, and the
        ranks that were behind: the job's only when every rank reached the tenant's program (a
        slow build, a rendezvous its own program holds up); the cluster's when Ray did not
        start a worker, or a rank's tenant process never got that far (its start is ours)."""
        try:
            stages = ray.get([a.start_stage.remote() for a in actors], timeout=5)
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
            return CLUSTER, "a worker Ray did not start"
        behind = [f"rank {r}: {stage}" for r, stage in enumerate(stages) if stage != IN_PROGRAM]
        return (CLUSTER if behind else JOB), "; ".join(behind) or "every rank in its program"

    def _start_failure_cause(self, run: _Run, e: BaseException) -> str:
        """Whose failure a start that raised ``e`` is: the cluster's (not counted against the
        job) when Ray or the node failed, or lost one of its workers (their peers' tenant
        processes then fail too); else the job's."""
        if not _tenant_failed(e):
            return CLUSTER
        try:
            ray.get([a.pid.remote() for a in run.actors], timeout=5)
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
            return CLUSTER
        return JOB

    def _one_host(self, ray_nodes: list[str] | tuple[str, ...]) -> bool:
        hosts = {self._hosts.get(n) for n in ray_nodes}
        return len(hosts) == 1 and None not in hosts

    def _ray_nodes(self, placement: list[tuple[str, int]]) -> list[str]:
        return [self._ray_ids.get(node, "?") for node, _ in placement]

    def _profile_placements(self, config: dict, gpus: Placement, args: tuple) -> dict:
        """GENIE's profile (:func:`.profile.profile_placements`): the job alone, and on 2
        workers with each other GPU's worker (of the first's node, or of another), by one group
        of workers, one per GPU."""
        nodes = self._ray_nodes(gpus)
        partners = [1 if node == gpus[0][0] else 2 for node, _ in gpus[1:]]
        for node, _ in gpus:
            self._template_on(node)
        workers = [
            ProfileWorker.options(  # type: ignore[attr-defined]  # (an actor class: ray.remote)
                resources={gpu_resource(node, index): JOBS_PER_GPU}
            ).remote(index, *args)
            for node, index in gpus
        ]
        self._profiling[args[0]] = workers
        config = {**config, "memory_limit_mib": self.sandbox.memory_mib}
        try:
            network = self._network(nodes, workers[0])
            master = ray.get(workers[0].address.remote(network), timeout=self.start_timeout_s)
            return ray.get(
                [
                    w.measure.remote(config, rank, len(workers), master, network, partners)
                    for rank, w in enumerate(workers)
                ],
                # past the tenant processes' own timeout, so a slow program fails as the job's
                timeout=PROFILE_TIMEOUT_S + self.start_timeout_s,
            )[0]
        finally:
            for w in workers:  # a failed one leaves the others waiting
                ray.kill(w)

    def resize(self, job_id: str, placement: list[tuple[str, int]]) -> None:
        """Background scaling (Amoeba/EDL): workers for the added GPUs start and prepare while
        the others keep training; then all switch to the new group after the same iteration
        (rank 0 hands its state to the newcomers), and workers of removed GPUs exit. Reported
        as a "switched" outcome with the preparation and pause times."""
        run = self._runs.get(job_id)
        if run is not None:
            run.resize_to = list(placement)

    def progress(self, job_id: str) -> object:
        run = self._runs.get(job_id)
        return run.progress if run else None

    def poll(self) -> list[Outcome]:
        with self._lock:
            out, self._outcomes = self._outcomes, []
        return out

    # -- inference servers (Aryl) --------------------------------------------------------------
    def serve_inference(self, node: str) -> None:
        if node in self._stand_ins:
            return
        gpus = self._known[node].gpus
        actor = InferenceStandIn.options(  # type: ignore[attr-defined]  # (as above)
            resources={gpu_resource(node, i): JOBS_PER_GPU for i in range(gpus)},
            runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
            name=f"inference-{node}",
        ).remote(node)
        self._stand_ins[node] = (actor, actor.ready.remote())

    def inference_ready(self, node: str) -> bool:
        entry = self._stand_ins.get(node)
        if entry is None:
            return False
        done, _ = ray.wait([entry[1]], timeout=0)
        return bool(done)

    def release_inference(self, node: str) -> None:
        entry = self._stand_ins.pop(node, None)
        if entry is not None:
            ray.kill(entry[0])

    def evict(self, node: str) -> list[str]:
        with self._lock:
            runs = [
                r
                for r in self._runs.values()
                if any(n == node for n, _ in r.placement + (r.resize_to or []))
            ]
        for run in runs:
            run.kill.set()
        return [r.job_id for r in runs]

    def active(self) -> list[str]:
        return [jid for jid, r in self._runs.items() if r.thread and r.thread.is_alive()]

    def worker_pids(self, job_id: str) -> list[int]:
        run = self._runs.get(job_id)
        return [ray.get(a.pid.remote(), timeout=10) for a in run.actors] if run else []

    def shutdown(self, checkpoint_s: float = 0.0) -> None:
        """End every run: with ``checkpoint_s``, each is first asked to stop gracefully (it
        checkpoints, as when preempted: reported "stopped") and given that long in all; what
        is left is killed."""
        # profiling runs hold GPUs: none may outlive the server that leased them
        for held in list(self._profiling.values()):
            for task_or_actor in held:
                if isinstance(task_or_actor, ray.ObjectRef):
                    ray.cancel(task_or_actor, force=True)
                else:
                    ray.kill(task_or_actor)
        runs = list(self._runs.values())
        if checkpoint_s > 0:
            for run in runs:
                run.stop.set()
            deadline = time.monotonic() + checkpoint_s
            for run in runs:
                if run.thread:
                    run.thread.join(timeout=max(0.0, deadline - time.monotonic()))
        for run in runs:
            run.kill.set()
        for run in runs:
            if run.thread:
                run.thread.join(timeout=30)

    # -- one run, in its own thread ----------------------------------------------------------
    def _report(
        self,
        run: _Run,
        kind: str,
        iteration: int | None = None,
        detail: str = "",
        cause: str = JOB,
    ) -> None:
        with self._lock:
            self._outcomes.append(Outcome(run.job_id, run.attempt, kind, iteration, detail, cause))
        self._tell()

    def _tell(self) -> None:
        if self.on_report is not None:
            self.on_report()

    def _template_on(self, node: str) -> None:
        """Start the node's tenant template (:mod:`.template_host`) unless it has one: before
        the first worker that will ask for it, without waiting."""
        if not (self.sandbox.isolate and self.sandbox.warm):
            return
        ray_id = self._ray_ids.get(node) or _ray_id_of(node)  # (one not listed yet)
        if ray_id is not None and ray_id not in self._templates:
            self._templates[ray_id] = start_host(ray_id, self.sandbox)

    def _new_worker(self, run: _Run, node: str, index: int, rank: int, world: int) -> Any:
        self._template_on(node)
        # (an actor class, as above; not detached: its actors go if the server goes)
        return TrainWorker.options(  # type: ignore[attr-defined]
            name=f"{run.job_id}-a{run.attempt}-{node}-{index}",
            namespace=NAMESPACE,
            resources={gpu_resource(node, index): 1},
        ).remote(
            run.job_id,
            run.config,
            rank,
            world,
            str(self.job_dir(run.job_id)),
            str(self.log_path(run.job_id)),
            index,
            self.sandbox,
        )

    def _wait_for_leavers(self, run: _Run) -> None:
        """A run that preempts others starts only once every stopping run on its GPUs has
        released them (checkpointed and exited)."""
        mine = set(run.placement)
        with self._lock:
            leaving = [
                r
                for r in self._runs.values()
                if r is not run and (r.stop.is_set() or r.kill.is_set()) and mine & set(r.placement)
            ]
        for other in leaving:
            if other.thread is not None:
                self.log(run.job_id, f"waits for {other.job_id} to release its GPUs")
                other.thread.join()

    def _finish(
        self,
        run: _Run,
        kind: str,
        iteration: int | None = None,
        detail: str = "",
        cause: str = JOB,
    ) -> None:
        if kind == "stopped" and run.resize_failed is not None:
            detail, cause = run.resize_failed  # stopped for it: its failure, checkpointed
            kind = "failed"
        for actor in run.actors:
            try:
                ray.kill(actor)
            except Exception:  # already dead
                pass
        self._report(run, kind, iteration, detail, cause)
        with self._lock:
            if self._runs.get(run.job_id) is run:
                del self._runs[run.job_id]

    def _drive(self, run: _Run, previous: _Run | None) -> None:
        if previous is not None and previous.thread is not None:
            previous.thread.join()  # its final checkpoint first
        self._wait_for_leavers(run)
        world = len(run.placement)
        started = False  # every worker set up: from here on a failure is the job's
        timeout_s = self.start_timeout_s  # this start's (its events name what it waited)
        try:
            for rank, (node, index) in enumerate(run.placement):
                run.actors.append(self._new_worker(run, node, index, rank, world))
            run.network = self._network(self._ray_nodes(run.placement), run.actors[0])
            master = None
            if world > 1:
                address = run.actors[0].address.remote(run.network)
                ready, _ = ray.wait([address], timeout=timeout_s)
                if not ready:
                    return self._finish(
                        run,
                        "failed",
                        detail=f"workers not placed within {timeout_s:g} s",
                        cause=CLUSTER,
                    )
                master = ray.get(ready[0])
            setups = [a.setup.remote(master, run.network) for a in run.actors]
            deadline = time.monotonic() + timeout_s
            while True:
                # (looked at no later than the deadline: whose failure a stalled start is
                # depends on how far its ranks got by then, not half a second later)
                wait_s = min(0.5, max(0.0, deadline - time.monotonic()))
                ready, waiting = ray.wait(setups, num_returns=len(setups), timeout=wait_s)
                if not waiting:
                    break
                if run.kill.is_set() or run.stop.is_set():
                    return self._finish(run, "stopped", detail="stopped while starting")
                if time.monotonic() > deadline:
                    cause, where = self._stalled_start_cause(run.actors)
                    return self._finish(
                        run,
                        "failed",
                        detail=f"gang not ready within {timeout_s:g} s ({where})",
                        cause=cause,
                    )
            # 0, or its checkpoint's (as its process says: only for telling its first progress)
            start_iteration = checked_iteration(ray.get(setups)[0], None) or 0
            started = True
            results = [a.run.remote() for a in run.actors]
            stop_sent_at = None
            dir_checked = time.monotonic()
            first_iteration = False  # done since the start: until then progress is asked often
            often_until = time.monotonic() + FIRST_PROGRESS_WINDOW_S
            while True:
                often = not first_iteration and time.monotonic() < often_until
                every_s = FIRST_PROGRESS_EVERY_S if often else PROGRESS_EVERY_S
                ready, waiting = ray.wait(results, num_returns=len(results), timeout=every_s)
                for ref in ready:
                    ray.get(ref)  # raises if a worker died
                if not waiting:
                    break
                try:
                    run.progress = ray.get(run.actors[0].progress.remote(), timeout=5)
                except ray.exceptions.RayError:
                    pass  # no report this time: a worker that died fails ``results`` above
                if not first_iteration and isinstance(run.progress, dict):
                    iteration = run.progress.get("iteration")
                    first_iteration = isinstance(iteration, int) and iteration > start_iteration
                    if first_iteration:
                        self._tell()
                if run.kill.is_set():
                    return self._finish(run, "stopped", detail="killed")
                if time.monotonic() - dir_checked > DIR_CHECK_EVERY_S:
                    dir_checked = time.monotonic()
                    over = self.sandbox.job_dir_problem(self.job_dir(run.job_id))
                    if over:
                        raise TenantError(f"stopped: {over}")  # the job's failure
                if run.resize_to is not None and stop_sent_at is None and not run.stop.is_set():
                    switched = self._background_switch(run, results, run.resize_to)
                    if switched is None:
                        return
                    results = switched
                    continue
                if run.stop.is_set() and stop_sent_at is None:
                    for a in run.actors:
                        a.stop.remote()
                    stop_sent_at = time.monotonic()
                if (
                    stop_sent_at is not None
                    and time.monotonic() - stop_sent_at > self.stop_timeout_s
                ):
                    return self._finish(run, "stopped", detail="did not stop in time: killed")
            outcome = ray.get(results[0])
            last = run.progress if isinstance(run.progress, dict) else {}
            run.progress = {**last, "iteration": outcome["iteration"]}
            self._finish(run, outcome["status"], outcome["iteration"])
        except Exception as e:  # a worker died or raised: the whole gang goes
            detail = _error_text(e)
            self.log(run.job_id, f"attempt {run.attempt} failed: {detail}")
            cause = JOB if started else self._start_failure_cause(run, e)
            if started and run.config.get("memory_grant_mib") and out_of_memory(detail):
                cause = MEMORY
            self._finish(run, "failed", detail=detail, cause=cause)

    def _background_switch(
        self, run: _Run, results: list, target: list[tuple[str, int]]
    ) -> list | None:
        """Carry out ``run.resize_to`` (``target``) by background scaling; the new ``run``
        refs, or None if the run ended meanwhile (then it has been reported)."""
        run.resize_to = None
        old = dict(zip(run.placement, run.actors))
        kept = [p for p in target if p in old]
        added = [p for p in target if p not in old]
        if not kept:
            raise RuntimeError("a background resize must keep at least one worker")
        private = run.network is not HOST
        if private and not self._one_host(self._ray_nodes(run.placement + target)):
            # its network is on one host; a restart gets it one that spans hosts
            detail = "a background resize onto another host needs a restart of the job"
            self._finish(run, "failed", detail=detail, cause=CLUSTER)
            return None
        t0, timeout_s = time.monotonic(), self.start_timeout_s
        newcomers = [self._new_worker(run, node, index, -1, len(target)) for node, index in added]
        if private:  # through a worker that stays: the first one, and its holder, may leave
            run.network = old[kept[0]].network.remote()
        preparing = [a.prepare.remote(run.network) for a in newcomers]
        while preparing:  # the old workers keep training meanwhile
            wait_s = min(0.5, max(0.0, t0 + timeout_s - time.monotonic()))  # (as a start's)
            done, preparing = ray.wait(preparing, num_returns=len(preparing), timeout=wait_s)
            try:
                ray.get(done)
                failed = (
                    f"not ready within {timeout_s:g} s"
                    if time.monotonic() - t0 > timeout_s
                    else None
                )
            except Exception as e:
                failed = _error_text(e)
            finished, _ = ray.wait(results, num_returns=len(results), timeout=0)
            ending = finished or run.kill.is_set() or run.stop.is_set()  # the resize is moot
            if failed and not ending:
                # The books hold the job at the new size: it checkpoints and fails, and
                # restarts at that size (not the job's failure unless its program failed)
                cause, where = self._stalled_start_cause(newcomers)
                detail = f"a background resize's new workers failed: {failed} ({where})"
                self.log(run.job_id, detail)
                run.resize_failed = (detail, cause)
                run.stop.set()
            if ending or failed:
                for a in newcomers:
                    ray.kill(a)
                return results
        prepared = time.monotonic()
        for a in run.actors:
            a.switch.remote()
        outs = ray.get(results)  # every worker stops after the same iteration
        if any(o["status"] != "switch" for o in outs):
            for a in newcomers:
                ray.kill(a)
            self._finish(run, outs[0]["status"], outs[0]["iteration"])
            return None
        switch_at = time.monotonic()
        for p, actor in old.items():
            if p not in target:
                ray.kill(actor)  # leaving workers exit at the boundary
        actors = [old[p] for p in kept] + newcomers
        master = ray.get(actors[0].address.remote(run.network)) if len(actors) > 1 else None
        iterations = ray.get(
            [a.regroup.remote(master, rank, len(actors)) for rank, a in enumerate(actors)]
        )
        run.actors, run.placement = actors, kept + added
        pause = time.monotonic() - switch_at
        self.log(
            run.job_id,
            f"background resize to {len(actors)} workers at iteration {iterations[0]}: "
            f"prepared in {prepared - t0:.2f} s while training, paused {pause:.3f} s",
        )
        self._report(
            run, "switched", iterations[0], f"prepare_s={prepared - t0:.3f} pause_s={pause:.3f}"
        )
        return [a.run.remote() for a in actors]


def _tenant_failed(e: BaseException) -> bool:
    """Whether ``e`` is a tenant process's failure (its program raised or died, or broke the
    protocol), not Ray's, the node's or the sandbox's (a process that did not start)."""
    if isinstance(e, ray.exceptions.RayTaskError):
        e = getattr(e, "cause", None) or e
    return isinstance(e, TenantError) and not isinstance(e, TenantStartError)


def _cause(e: BaseException) -> BaseException:
    """What a Ray worker raised, without Ray's wrapping."""
    if isinstance(e, ray.exceptions.RayTaskError) and getattr(e, "cause", None) is not None:
        return e.cause
    return e


def _error_text(e: BaseException) -> str:
    """The whole reason a run failed: the tenant's own traceback when it raised, else Ray's
    error and, for an error raised in a worker, where (a bare ``OSError: [Errno 22] Invalid
    argument`` says nothing), without terminal colour codes."""
    cause = _cause(e)
    if isinstance(cause, TenantError):
        return plain(str(cause))
    where = [
        line.strip()
        for line in (str(e) if cause is not e else "").splitlines()
        if line.strip().startswith('File "')
    ]
    at = f" (at {where[-1]})" if where else ""
    return plain(f"{type(cause).__name__}: {cause}{at}")
