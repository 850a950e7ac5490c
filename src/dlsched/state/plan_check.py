"""Validation of a whole plan before any of it is applied, so that a plan is all or nothing.

The check replays the plan in the order the state applies it (preemptions, then resizes, then
starts) over the state's idle GPUs with an overlay (the GPUs the plan frees and claims, the jobs
that leave and join each GPU), and raises :class:`~dlsched.errors.PlanError` naming the policy,
the job and the reason at the first entry that could not be applied. The state's own
structures are not touched; what the check worked out (each start's memory and the GPUs it
joins) is kept for the commit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Protocol, cast

from ..cluster import Cluster
from ..errors import PlanError
from ..jobs import PENDING, RUNNING, JobView, Status
from ..view import Plan, PolicyHooks
from ..workload_model import WorkloadModel
from .free import FreeGpus
from .occupancy import GpuOccupancy


class Books(Protocol):
    """What the check reads of :class:`~dlsched.state.cluster_state.ClusterState`."""

    policy: PolicyHooks
    cluster: Cluster
    workload: WorkloadModel
    free: FreeGpus
    occupancy: GpuOccupancy
    cordoned: set[int]

    @property
    def pending(self) -> Mapping[str, JobView]: ...
    @property
    def running(self) -> Mapping[str, JobView]: ...

    restore_full_batch: bool

    def leaving_workers_wait(self, scales_out: bool) -> bool: ...


def unknown_gpu(cluster: Cluster, gpus: tuple[int, ...]) -> str | None:
    """A plan's GPU ids come from a policy (maybe a plug-in): each must be one of ours."""
    count = len(cluster.gpu_node)
    for g in gpus:
        if type(g) is not int or not 0 <= g < count:
            return f"GPU {g!r}, which this cluster does not have (0..{count - 1})"
    return None


# read-only empties (a write would raise): run() replaces them before it checks a preemption
# or a resize
_NONE = cast(set, frozenset())
_NO_STATUS = cast(dict, MappingProxyType({}))


class PlanCheck:
    __slots__ = (
        "state",
        "retiring",
        "claimed",
        "released",
        "memory",
        "joined",
        "status",
        "leaving",
        "resized",
        "started",
    )

    def __init__(self, state: Books, retiring: Sequence[int] = ()) -> None:
        self.state = state
        self.retiring = retiring  # servers being reclaimed: nothing may start or grow there
        self.claimed: set[int] = set()  # GPUs an entry took
        self.memory: dict[str, float | None] = {}  # job id -> MiB per GPU where it starts
        self.joined: dict[str, list[int]] = {}  # job id -> GPUs it starts on beside others
        self.started: list[tuple[JobView, tuple[int, ...]]] = []  # the starts checked so far
        # What only preemptions and resizes change, made by run() for a plan that has any (a
        # plan of starts alone, most of them, does without): shared empties until then.
        self.released: set[int] = _NONE  # GPUs the plan's preemptions and scale-ins make idle
        self.status: dict[str, Status] = _NO_STATUS  # job id -> its status once entries apply
        self.leaving: set[JobView] = _NONE  # running jobs preempted by the plan
        self.resized: dict[str, float | None] = _NO_STATUS  # job id -> its new MiB per GPU

    def run(self, plan: Plan) -> None:
        if plan.preempt or plan.resize:
            self.released, self.status, self.leaving, self.resized = set(), {}, set(), {}
        for job in plan.preempt:
            self._preempt(job)
        for job, gpus in plan.resize:
            self._resize(job, tuple(gpus))
        accumulation, start = plan.accumulation, self._start
        for job, gpus in plan.start:
            start(job, tuple(gpus), accumulation.get(job.job_id, 1) if accumulation else 1)

    def _fail(self, job: JobView, what: str, why: str) -> PlanError:
        return PlanError(f"policy {self.state.policy.name} {what} job {job.job_id}: {why}")

    def _status(self, job: JobView, what: str) -> Status:
        jid, state = job.job_id, self.state
        status = self.status.get(jid)
        if status is not None:
            return status
        if state.pending.get(jid) is not job and state.running.get(jid) is not job:
            raise self._fail(job, what, "it is not a live job of this cluster")
        return job.status

    def _holders(self, g: int) -> list[tuple[JobView, float | None]]:
        """Who holds GPU ``g`` once the entries so far apply, with their memory per GPU."""
        occupancy = self.state.occupancy
        out = [(h, self._memory_after(h)) for h in occupancy.jobs[g] if h not in self.leaving]
        return out + [(j, self.memory[j.job_id]) for j, gpus in self.started if g in gpus]

    def _memory_after(self, job: JobView) -> float | None:
        """A running job's memory per GPU once the preemptions and resizes apply: one resized
        holds its new size's; one left with no partner goes back to its full batch (when the
        state restores it)."""
        state = self.state
        if job.job_id in self.resized:
            return self.resized[job.job_id]
        if not (state.restore_full_batch and job.accumulation > 1 and self.leaving):
            return job.memory_mib
        if any(p not in self.leaving for p in state.occupancy.partners(job)):
            return job.memory_mib
        return state.workload.memory_mib(job.spec, len(job.gpus), 1)

    def _preempt(self, job: JobView) -> None:
        status = self._status(job, "preempted")
        if status is not RUNNING:
            raise self._fail(job, "preempted", f"it is {status.value}")
        self.status[job.job_id] = PENDING
        leaving = self.leaving
        leaving.add(job)
        holders = self.state.occupancy.jobs
        self._release(
            [g for g in job.gpus if len(holders[g]) == 1 or all(h in leaving for h in holders[g])]
        )
        if job.leaving:  # a move's old workers stop with it
            self._release(job.leaving)

    def _resize(self, job: JobView, gpus: tuple[int, ...]) -> None:
        state = self.state
        status = self._status(job, "resized")
        low, high = job.spec.gpu_range
        problem = None
        if status is not RUNNING:
            problem = f"it is {status.value}"
        elif job.job_id in self.resized:
            problem = "the plan resizes it twice"
        elif unknown := unknown_gpu(state.cluster, gpus):
            problem = f"onto {unknown}"
        elif not low <= len(set(gpus)) == len(gpus) <= high:
            problem = f"{len(set(gpus))} distinct GPUs is outside its {low}..{high}"
        elif job.switch_at is not None:
            problem = "its previous resize is still under way"
        elif kept_away := [
            g
            for g in gpus
            if g in job.gpus
            and not self._usable(nid := state.cluster.gpu_node[g])
            and nid not in state.cordoned  # (out of service, not taken away: it may stay)
        ]:
            problem = f"it keeps GPU {kept_away[0]}, whose node is being taken away"
        elif job.sharing and any(len(self._holders(g)) > 1 for g in job.gpus):
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
        added = [g for g in gpus if g not in old]
        if taken := self._take(added):
            raise self._fail(job, "resized", taken)
        if not state.leaving_workers_wait(bool(added)):  # (a move's: held until its switch)
            new = set(gpus)
            self._release([g for g in job.gpus if g not in new])
        self.resized[job.job_id] = memory

    def _start(self, job: JobView, gpus: tuple[int, ...], accumulation: int) -> None:
        state, jid, memory_of = self.state, job.job_id, self.memory
        if jid in memory_of or state.pending.get(jid) is not job:  # else: waiting, not started
            status = RUNNING if jid in memory_of else self._status(job, "started")
            if status is not PENDING:
                raise self._fail(job, "started", f"it is {status.value}")
        if not job.admitted:
            raise self._fail(job, "started", "it is not admitted (it waits for quota)")
        cluster = state.cluster
        free, gpu_node = state.free.free, cluster.gpu_node
        count = len(gpu_node)
        for g in gpus:  # (unknown_gpu's test inlined: the hot path)
            if type(g) is not int or not 0 <= g < count:
                raise self._fail(job, "started", f"onto {unknown_gpu(cluster, gpus)}")
        spec, n = job.spec, len(gpus)
        # (its request is always in its range: the range is looked up only for another count)
        distinct = n == 1 or len(set(gpus)) == n
        if n != spec.num_gpus or not distinct:
            low, high = spec.start_range(state.policy.moldable)
            if not (distinct and low <= n <= high):
                raise self._fail(
                    job,
                    "started",
                    f"{len(set(gpus))} distinct GPUs; it needs "
                    f"{low if low == high else f'{low}..{high}'} (gang)",
                )
        if type(accumulation) is not int or accumulation < 1:  # (a bool or 1.0 is not a count)
            raise self._fail(job, "started", f"sub-batch count {accumulation!r} is not >= 1")
        memory = state.workload.memory_mib(spec, n, accumulation)
        claimed, released = self.claimed, self.released
        joined: list[int] = []  # (loops, not comprehensions: a start has a GPU or a few)
        if self.retiring:
            idle = self._idle
            joined = [g for g in gpus if not idle(g)]
        elif claimed or released:  # _idle inlined (most starts)
            for g in gpus:
                if g in claimed or (g not in released and g not in free[gpu_node[g]]):
                    joined.append(g)
        else:  # the plan's first entry: idle is the state's free
            for g in gpus:
                if g not in free[gpu_node[g]]:
                    joined.append(g)
        if joined:
            for g in joined:
                if why := self._why_not_join(job, g, memory):
                    raise self._fail(job, "started", why)
            self.joined[jid] = joined
            self.claimed.update([g for g in gpus if g not in joined])
        else:
            self.claimed.update(gpus)
        self.started.append((job, gpus))
        memory_of[jid] = memory  # also: started (a second start is refused)

    # -- idle GPUs once the entries so far apply --------------------------------------------
    def _usable(self, nid: int) -> bool:
        return nid in self.state.free.usable and nid not in self.retiring

    def _idle(self, g: int) -> bool:
        if g in self.claimed:
            return False
        if g in self.released:
            return True
        nid = self.state.cluster.gpu_node[g]
        return g in self.state.free.free[nid] and nid not in self.retiring

    def _take(self, gpus: Sequence[int]) -> str | None:
        """Claim idle GPUs; why not, when one is not idle."""
        for g in gpus:
            if not self._idle(g):
                return f"GPU {g} is not free"
            self.claimed.add(g)
        return None

    def _release(self, gpus: Sequence[int]) -> None:
        """GPUs that go idle (given back only on a usable node, as the state does)."""
        gpu_node, usable, retiring = (
            self.state.cluster.gpu_node,
            self.state.free.usable,
            self.retiring,
        )
        for g in gpus:
            nid = gpu_node[g]
            if nid in usable and nid not in retiring:
                self.released.add(g)
                self.claimed.discard(g)

    def _why_not_join(self, job: JobView, g: int, memory: float | None) -> str | None:
        """As :meth:`GpuOccupancy.why_not_join`, on the GPU's holders once the plan so far
        applies."""
        state = self.state
        holders = self._holders(g)
        used: float | None = 0.0
        for _, mib in holders:
            used = None if used is None or mib is None else used + mib
        if why := state.occupancy.why_not_join_holders(g, len(holders), used, memory):
            return why
        if not self._usable(state.cluster.gpu_node[g]):
            return f"GPU {g}: its node is out of service (cordoned or being reclaimed)"
        if any(state.workload.slowdown(job, other) is None for other, _ in holders):
            return f"GPU {g}: no co-location measurement for this pair"
        return None
