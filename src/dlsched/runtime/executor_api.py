"""What the scheduling service asks of an executor, and what it hears back. The Ray executor
(:mod:`.executor`) implements it for real; the tests' in-memory one lets the service's logic
run in milliseconds. Nothing here imports Ray."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class NodeInfo:
    name: str  # the node part of its GPUs' resource names
    gpus: int
    alive: bool
    pool: str = "training"  # "inference": a server lent to training only while idle (Aryl)


JOB, CLUSTER = "job", "cluster"  # whose failure a failed run was
MEMORY = "memory"  # a capped job outgrew its memory grant (dlsched.runtime.device)


@dataclass
class Outcome:
    job_id: str
    attempt: int  # 0: a profiling run
    kind: str  # "done" | "stopped" | "failed" | "switched" (a background resize) | "profiled"
    iteration: int | None = None
    detail: str = ""
    cause: str = JOB  # of a failure: the job's program, the cluster or MEMORY (neither counts)


Placement = list[tuple[str, int]]  # (node name, GPU index on it) per worker


class Executor(Protocol):
    # Called (from any thread) once the executor has news for the scheduler: an outcome for
    # :meth:`poll`, or a run's first progress. The service sets it to wake its loop, so a
    # finish or a first iteration is taken at once, not at the next pass.
    on_report: Callable[[], None] | None

    def inventory(self) -> list[NodeInfo]:
        """Nodes with dlsched GPUs, sorted by name; a node seen once and gone since is listed
        as not alive."""

    def start(self, job_id: str, attempt: int, placement: Placement, config: dict) -> None:
        """Start a run of the job on exactly these GPUs (reported through :meth:`poll`)."""

    def stop(self, job_id: str, graceful: bool = True) -> None:
        """Stop the job's run: gracefully (checkpoint first) or at once."""

    def resize(self, job_id: str, placement: Placement) -> None:
        """Move a running job to these GPUs in the background (reported as "switched")."""

    def profile(
        self, job_id: str, config: dict, placements: bool = False, gpus: Placement | None = None
    ) -> None:
        """Profile the job on these GPUs, held whole for it in the books (reported as
        "profiled" with the result as JSON, or "failed"); with ``placements``, also on 2
        workers, the first GPU's with each other's, of its node or another (GENIE's
        samples)."""

    def progress(self, job_id: str) -> object:
        """The run's last report of its progress (iteration, iterations, iteration_s, loss), as
        the tenant's process gave it: unchecked (:mod:`dlsched.runtime.reports` checks it)."""

    def poll(self) -> list[Outcome]:
        """What happened since the last call."""

    def log_path(self, job_id: str) -> Path:
        """The job's log (its program's output and the executor's notes)."""

    def discard(self, job_id: str, log: bool = False) -> None:
        """Delete what a finished job left (its checkpoint), and with ``log`` its log."""

    def serve_inference(self, node: str) -> None:
        """Start the inference stand-in on the node: it takes every GPU there, so it runs only
        once no training worker is left (see :meth:`inference_ready`)."""

    def inference_ready(self, node: str) -> bool:
        """The node's stand-in holds its GPUs and answered."""

    def release_inference(self, node: str) -> None:
        """Stop the node's stand-in: the server is lent to training."""

    def evict(self, node: str) -> list[str]:
        """Kill at once every run with a worker on the node (a reclaim's notice ran out);
        returns their job ids."""
