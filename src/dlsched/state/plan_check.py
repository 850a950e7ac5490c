"""Validation of a whole plan before any of it is applied, so that a plan is all or nothing.

The check replays the plan in the order the state applies it (preemptions, then resizes, then
starts) against a copy of the free-GPU index and an overlay of the GPUs' holders, and raises
:class:`~dlsched.errors.PlanError` naming the policy, the job and the reason at the first entry
that could not be applied. The state's own structures are not touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import PlanError
from ..jobs import JobState, Status
from ..view import Plan

if TYPE_CHECKING:
    from .cluster_state import ClusterState


class PlanCheck:
    def __init__(self, state: ClusterState, retiring: Sequence[int] = ()) -> None:
        self.state = state
        self.name = state.policy.name
        self.free = state.free.copy()
        for nid in retiring:  # servers being reclaimed: nothing may start or grow there
            self.free.retire_node(nid)
        self.status: dict[str, Status] = {}  # job id -> its status once the entries so far apply
        self.leaving: set[JobState] = set()  # running jobs preempted by the plan
        self.resized: set[str] = set()
        self.joining: dict[int, list[tuple[JobState, float | None]]] = {}  # GPU -> (job, MiB)

    def run(self, plan: Plan) -> None:
        for job in plan.preempt:
            self.preempt(job)
        for job, gpus in plan.resize:
            self.resize(job, tuple(gpus))
        for job, gpus in plan.start:
            self.start(job, tuple(gpus), plan.accumulation.get(job.job_id, 1))

    def _fail(self, job: JobState, what: str, why: str) -> PlanError:
        return PlanError(f"policy {self.name} {what} job {job.job_id}: {why}")

    def _status(self, job: JobState, what: str) -> Status:
        state = self.state
        ours = state.running.get(job.job_id) is job or state.pending.get(job.job_id) is job
        if not ours and job not in self.leaving:
            raise self._fail(job, what, "it is not a live job of this cluster")
        return self.status.get(job.job_id, job.status)

    def _holders(self, g: int) -> list[tuple[JobState, float | None]]:
        """Who holds GPU ``g`` once the entries so far apply, with their memory per GPU."""
        occupancy = self.state.occupancy
        out = [(h, self._memory_after(h)) for h in occupancy.jobs[g] if h not in self.leaving]
        return out + self.joining.get(g, [])

    def _memory_after(self, job: JobState) -> float | None:
        """A running job's memory per GPU once the preemptions apply: one left with no partner
        goes back to its full batch (when the state restores it)."""
        state = self.state
        if not (state.restore_full_batch and job.accumulation > 1 and self.leaving):
            return job.memory_mib
        if any(p not in self.leaving for p in state.occupancy.partners(job)):
            return job.memory_mib
        return state.workload.memory_mib(job.spec, len(job.gpus), 1)

    def preempt(self, job: JobState) -> None:
        status = self._status(job, "preempted")
        if status is not Status.RUNNING:
            raise self._fail(job, "preempted", f"it is {status.value}")
        self.status[job.job_id] = Status.PENDING
        self.leaving.add(job)
        occupancy = self.state.occupancy
        self.free.release(
            [g for g in job.gpus if all(h in self.leaving for h in occupancy.jobs[g])]
        )

    def resize(self, job: JobState, gpus: tuple[int, ...]) -> None:
        state = self.state
        status = self._status(job, "resized")
        low, high = job.spec.gpu_range
        problem = None
        if status is not Status.RUNNING:
            problem = f"it is {status.value}"
        elif job.job_id in self.resized:
            problem = "the plan resizes it twice"
        elif unknown := state._unknown_gpu(gpus):
            problem = f"onto {unknown}"
        elif not low <= len(set(gpus)) == len(gpus) <= high:
            problem = f"{len(set(gpus))} distinct GPUs is outside its {low}..{high}"
        elif job.switch_at is not None:
            problem = "its previous resize is still under way"
        elif kept_away := [
            g for g in gpus if g in job.gpus and state.cluster.gpu_node[g] not in self.free.usable
        ]:
            problem = f"it keeps GPU {kept_away[0]}, whose node is being taken away"
        elif any(len(self._holders(g)) > 1 for g in job.gpus):
            problem = "it shares a GPU"
        else:
            memory = state.workload.memory_mib(job.spec, len(gpus), job.accumulation)
            nodes, gpu_node = state.cluster.nodes, state.cluster.gpu_node
            capacity = min(nodes[gpu_node[g]].gpu_mem_mib for g in gpus)
            if memory is not None and memory > capacity:
                problem = (
                    f"{memory:.0f} MiB per GPU at {len(gpus)} GPUs exceeds their {capacity} MiB"
                )
        if problem:
            raise self._fail(job, "resized", problem)
        old = set(job.gpus)
        try:
            self.free.take([g for g in gpus if g not in old])
        except ValueError as e:
            raise self._fail(job, "resized", str(e)) from None
        new = set(gpus)
        self.free.release([g for g in job.gpus if g not in new])
        self.resized.add(job.job_id)

    def start(self, job: JobState, gpus: tuple[int, ...], accumulation: int) -> None:
        state = self.state
        status = self._status(job, "started")
        if status is not Status.PENDING:
            raise self._fail(job, "started", f"it is {status.value}")
        if unknown := state._unknown_gpu(gpus):
            raise self._fail(job, "started", f"onto {unknown}")
        low, high = job.spec.start_range(state.policy.moldable)
        if not low <= len(set(gpus)) == len(gpus) <= high:
            raise self._fail(
                job,
                "started",
                f"{len(set(gpus))} distinct GPUs; it needs "
                f"{low if low == high else f'{low}..{high}'} (gang)",
            )
        if not isinstance(accumulation, int) or accumulation < 1:
            raise self._fail(job, "started", f"sub-batch count {accumulation!r} is not >= 1")
        memory = state.workload.memory_mib(job.spec, len(gpus), accumulation)
        free = self.free
        joined = [g for g in gpus if not free.is_free(g)]
        for g in joined:
            if why := self._why_not_join(job, g, memory):
                raise self._fail(job, "started", why)
        try:
            free.take([g for g in gpus if g not in joined] if joined else gpus)
        except ValueError as e:
            raise self._fail(job, "started", str(e)) from None
        for g in gpus:
            self.joining.setdefault(g, []).append((job, memory))
        self.status[job.job_id] = Status.RUNNING

    def _why_not_join(self, job: JobState, g: int, memory: float | None) -> str | None:
        """As :meth:`GpuOccupancy.why_not_join`, on the GPU's holders once the plan so far
        applies."""
        state = self.state
        holders = self._holders(g)
        if not holders:
            return f"GPU {g} is neither free nor held: its node is not usable"
        most = state.occupancy.max_jobs_per_gpu
        if len(holders) >= most:
            return f"GPU {g} already holds {len(holders)} jobs (at most {most})"
        used: float | None = 0.0
        for _, mib in holders:
            used = None if used is None or mib is None else used + mib
        if used is None or memory is None:
            return f"GPU {g}: memory of a job there is unknown, so it cannot be shared"
        capacity = state.cluster.nodes[state.cluster.gpu_node[g]].gpu_mem_mib
        if used + memory > capacity:
            return f"GPU {g}: {used:.0f} + {memory:.0f} MiB exceeds its {capacity} MiB"
        if any(state.workload.slowdown(job, other) is None for other, _ in holders):
            return f"GPU {g}: no co-location measurement for this pair"
        return None
