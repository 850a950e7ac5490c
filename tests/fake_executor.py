"""An in-memory executor (the :class:`dlsched.runtime.executor_api.Executor` interface) and a fake
clock, so the scheduling service's logic runs in milliseconds without Ray or PyTorch."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from dlsched.runtime.executor_api import CLUSTER, JOB, NodeInfo, Outcome

JOBS_PER_GPU = 2
# what a profiling run reports (dlsched.runtime.profile): small enough for two jobs per GPU
PROFILE = {
    "fixed_mib": 500.0,
    "per_sample_mib": 10.0,
    "c0_s": 0.01,
    "c1_s": 0.001,
    "local_batch": 8,
}


class Clock:
    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@dataclass
class Run:
    attempt: int
    placement: list[tuple[str, int]]
    config: dict
    resize_to: list[tuple[str, int]] | None = None

    def workers(self) -> set[tuple[str, int]]:
        """Its workers' GPUs: its placement's and those a resize under way adds (one a resize
        keeps is one worker, one GPU unit on Ray)."""
        return set(self.placement).union(self.resize_to or ())

    def leaving_at_boundary(self) -> set[tuple[str, int]]:
        """The GPUs a background scale-in under way leaves: its workers there exit at their
        next mini-batch boundary (on Ray, a worker placed there meanwhile that finds the GPU's
        units taken waits for them), so the capacity check leaves them out."""
        if self.resize_to is None or not set(self.resize_to) <= set(self.placement):
            return set()
        return set(self.placement) - set(self.resize_to)


class FakeExecutor:
    def __init__(self, nodes: dict[str, int], inference: tuple[str, ...] = ()) -> None:
        self.nodes = {
            name: NodeInfo(name, gpus, True, "inference" if name in inference else "training")
            for name, gpus in nodes.items()
        }
        self.stand_ins: set[str] = set()  # inference nodes whose stand-in was started
        self.runs: dict[str, Run] = {}
        self.outcomes: list[Outcome] = []
        self.progress_of: dict[str, dict] = {}
        self.profiling: list[str] = []
        # GPUs and the units of each a profiling run holds
        self.profiling_gpus: dict[str, tuple[list[tuple[str, int]], int]] = {}
        self.placements: dict[str, bool] = {}  # job id -> its run times placements (GENIE)
        self.log: list[tuple] = []  # every call, in order
        self.on_report = None

    # -- the interface ---------------------------------------------------------------------------
    def inventory(self) -> list[NodeInfo]:
        return sorted(self.nodes.values(), key=lambda n: (len(n.name), n.name))

    def start(self, job_id, attempt, placement, config) -> None:
        self.log.append(("start", job_id, attempt, tuple(map(tuple, placement))))
        assert job_id not in self.runs, f"{job_id} started while its previous run still holds GPUs"
        for node, index in placement:
            assert self.nodes[node].alive, f"{job_id} started on lost node {node}"
            assert 0 <= index < self.nodes[node].gpus
        self.runs[job_id] = Run(attempt, [tuple(p) for p in placement], dict(config))
        load = self.gpu_load(leaving=False)
        assert max(load.values()) <= JOBS_PER_GPU, f"more jobs on a GPU than it may hold: {load}"

    def stop(self, job_id, graceful=True) -> None:
        self.log.append(("stop", job_id, graceful))
        run = self.runs.pop(job_id, None)
        self.progress_of.pop(job_id, None)
        if run is not None and graceful:
            self.outcomes.append(Outcome(job_id, run.attempt, "stopped", 0, "checkpointed"))

    def resize(self, job_id, placement) -> None:
        self.log.append(("resize", job_id, tuple(map(tuple, placement))))
        self.runs[job_id].resize_to = [tuple(p) for p in placement]

    def profile(self, job_id, config, placements=False, gpus=()) -> None:
        self.log.append(("profile", job_id))
        assert gpus, f"{job_id} profiled on no GPU"
        for node, index in gpus:
            assert self.nodes[node].alive and 0 <= index < self.nodes[node].gpus
        self.profiling.append(job_id)
        self.placements[job_id] = placements
        units = 1 if config.get("memory_grant_mib") else JOBS_PER_GPU  # beside a job, or whole
        self.profiling_gpus[job_id] = ([tuple(p) for p in gpus], units)
        assert max(self.gpu_load(leaving=False).values()) <= JOBS_PER_GPU, (
            "a profiling run on a busy GPU"
        )

    def progress(self, job_id):
        return self.progress_of.get(job_id)

    def poll(self) -> list[Outcome]:
        out, self.outcomes = self.outcomes, []
        return out

    def log_path(self, job_id) -> Path:
        return Path("/nonexistent") / f"{job_id}.log"

    def discard(self, job_id, log=False) -> None:
        self.log.append(("discard", job_id, log) if log else ("discard", job_id))

    def serve_inference(self, node) -> None:
        self.log.append(("serve_inference", node))
        self.stand_ins.add(node)

    def inference_ready(self, node) -> bool:
        """As Ray would: the stand-in runs once no run has a worker there."""
        return node in self.stand_ins and not any(
            load for (n, _), load in self.gpu_load().items() if n == node
        )

    def release_inference(self, node) -> None:
        self.log.append(("release_inference", node))
        self.stand_ins.discard(node)

    def evict(self, node) -> list[str]:
        self.log.append(("evict", node))
        victims = [
            j
            for j, r in self.runs.items()
            if any(n == node for n, _ in r.placement + (r.resize_to or []))
        ]
        for job_id in victims:
            run = self.runs.pop(job_id)
            self.outcomes.append(Outcome(job_id, run.attempt, "stopped", 0, "killed"))
        return victims

    # -- what a test makes happen ------------------------------------------------------------------
    def gpu_load(self, leaving: bool = True) -> dict[tuple[str, int], int]:
        load: dict[tuple[str, int], int] = {
            (n, i): 0 for n, info in self.nodes.items() for i in range(info.gpus)
        }
        for run in self.runs.values():  # (without ``leaving``: not a scale-in's leaving ones)
            for p in run.workers() if leaving else run.workers() - run.leaving_at_boundary():
                load[p] = load.get(p, 0) + 1
        for gpus, units in self.profiling_gpus.values():
            for p in gpus:
                load[p] = load.get(p, 0) + units
        return load

    def finish_profiling(self, profile: dict | None = None, only: tuple = ()) -> None:
        """Every profiling run under way ends (``only``: those jobs') with ``profile``."""
        done = [j for j in self.profiling if not only or j in only]
        for job_id in done:
            self.outcomes.append(
                Outcome(job_id, 0, "profiled", detail=json.dumps(profile or PROFILE))
            )
        self.profiling = [j for j in self.profiling if j not in done]
        for job_id in done:
            del self.profiling_gpus[job_id]

    def fail_profiling(self, job_id: str, why: str, cause: str = JOB) -> None:
        self.profiling.remove(job_id)
        del self.profiling_gpus[job_id]
        self.outcomes.append(Outcome(job_id, 0, "failed", detail=why, cause=cause))

    def finish(self, job_id: str) -> None:
        run = self.runs.pop(job_id)
        self.progress_of.pop(job_id, None)
        self.outcomes.append(Outcome(job_id, run.attempt, "done", run.config.get("iterations")))

    def crash(self, job_id: str, why: str = "RuntimeError: worker died", cause: str = JOB) -> None:
        run = self.runs.pop(job_id)
        self.progress_of.pop(job_id, None)
        self.outcomes.append(Outcome(job_id, run.attempt, "failed", 0, why, cause))

    def switched(self, job_id: str) -> None:
        run = self.runs[job_id]
        run.placement, run.resize_to = run.resize_to, None
        self.outcomes.append(Outcome(job_id, run.attempt, "switched", 0, "prepared in 1 s"))

    def report_progress(
        self, job_id: str, iteration: int, iterations: int, iteration_s: float
    ) -> None:
        self.progress_of[job_id] = {
            "iteration": iteration,
            "iterations": iterations,
            "iteration_s": iteration_s,
        }

    def lose_node(self, name: str) -> None:
        info = self.nodes[name]
        self.nodes[name] = NodeInfo(name, info.gpus, False)
        for job_id in [j for j, r in self.runs.items() if any(n == name for n, _ in r.placement)]:
            run = self.runs.pop(job_id)  # its workers died with the node
            self.outcomes.append(Outcome(job_id, run.attempt, "failed", 0, f"node {name} lost"))
        for job_id, (gpus, _) in list(self.profiling_gpus.items()):
            if any(n == name for n, _ in gpus):
                self.fail_profiling(job_id, f"profiling failed: node {name} lost", CLUSTER)

    def restore_node(self, name: str) -> None:
        info = self.nodes[name]
        self.nodes[name] = NodeInfo(name, info.gpus, True)
