"""Elastic scheduling (Amoeba/EDL, PAPERS.md section 2): phases around a preemptive policy's pass.

Reconstructed from a third-party implementation of elastic Tiresias; every choice below is a
parameter or stated:

1. Jobs start in the base policy's order at their requested size (phase 1), preempting as the
   base policy does.
2. GPUs a job holds above its request are the first to go: before the pass, grown jobs give them
   back (lowest priority first) when the jobs at the head of the queue could then start.
3. When more than ``shrink_when_waiting`` jobs wait (default 10), elastic jobs of low priority
   (Tiresias: below the top queue; FIFO: all) shrink to their minimum, lowest priority first.
   A shrink keeps the global batch, so each GPU holds more: rules 2 and 3 shrink a job only as
   far as its memory per GPU (from the workload model) still fits its GPUs.
4. GPUs left after the pass go one at a time to the elastic job with the largest marginal
   speedup (its speed at n + 1 GPUs minus at n, relative to its speed at its request, from the
   performance model), up to its maximum (phase 2). A job started in this pass simply starts
   larger; a running one is resized.

Two guards keep the phases from undoing each other at every event (each resize is an event, so
a cycle would never end): phase 2 leaves free the GPUs the head of the queue could use with the
extras given back (rule 2 would take them back at once), and does not grow a job that rule 3
would shrink. A job resized in a pass is not resized again in it, and a preempted job's resize
is dropped. Without a performance model (``--no-perf``) speeds at other sizes are unknown, so
nothing grows.

The policy keeps the planned size of every running elastic job and three small indexes (grown,
shrinkable by rule 3, growable), so a pass touches only the jobs it may resize.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from ..jobs import JobSpec, JobState
from ..state.free import FreeGpus
from .base import Plan, PolicyView
from .placement import best_fit
from .preemptive import PreemptiveOrder, PreemptivePolicy
from .tiresias import DEFAULT_STARVATION_FACTOR, DEFAULT_THRESHOLDS_GPU_S, TiresiasOrder

DEFAULT_SHRINK_WHEN_WAITING = 10  # the third-party implementation's threshold


def smallest_fitting(job: JobState, size: int, view: PolicyView) -> int | None:
    """The smallest size from ``size`` up (below its current one) at which a running job's
    memory per GPU, its global batch kept, fits its GPUs; None if none does. Unknown memory
    fits. Every scale-in asks this: fewer GPUs hold a larger share of the batch."""
    cluster = view.cluster
    capacity = min(cluster.nodes[cluster.gpu_node[g]].gpu_mem_mib for g in job.gpus)
    for n in range(size, len(job.gpus)):
        memory = view.workload.memory_mib(job.spec, n, job.accumulation)
        if memory is None or memory <= capacity:
            return n
    return None


def keep_consolidated(gpus: tuple[int, ...], k: int, gpu_node: list[int]) -> tuple[int, ...]:
    """The ``k`` GPUs to keep when shrinking: those on the nodes holding most of the job."""
    per_node: dict[int, int] = {}
    for g in gpus:
        per_node[gpu_node[g]] = per_node.get(gpu_node[g], 0) + 1
    return tuple(sorted(gpus, key=lambda g: (-per_node[gpu_node[g]], gpu_node[g], g))[:k])


class ElasticGrowth:
    """Rules 2-4 above, as a part of a :class:`PreemptivePolicy`."""

    policy: PreemptivePolicy
    is_low_priority: Callable[[JobState], bool]
    worst_first: Callable[[JobState], tuple]

    def __init__(self, shrink_when_waiting: int = DEFAULT_SHRINK_WHEN_WAITING) -> None:
        self.shrink_when_waiting = int(shrink_when_waiting)
        self.size: dict[str, int] = {}  # running elastic job -> GPUs once planned
        self.grown: dict[str, JobState] = {}  # holding more than requested
        self.shrinkable: dict[str, JobState] = {}  # low priority, above its minimum
        self.growable: dict[str, JobState] = {}  # below its maximum with a positive gain
        self.extra_gpus = 0  # GPUs held above requests, in total
        self._planned: dict[str, tuple[int, ...]] = {}  # this pass's resizes
        # the quota layer's scale-ins, told before the pass they belong to: (time, GPUs kept)
        self._layer_resized: dict[str, tuple[float, tuple[int, ...]]] = {}
        self._speed_at: Callable[[JobSpec, int], float | None] | None = None

    def params(self) -> dict:
        return {"shrink_when_waiting": self.shrink_when_waiting}

    def attach(self, policy: PreemptivePolicy) -> None:
        """Become ``policy``'s part: its order says which jobs are of low priority (rule 3)
        and which go first (worst first)."""
        self.policy = policy
        self.is_low_priority = policy.order.is_low_priority
        self.worst_first = policy.order.worst_first

    # -- indexes ----------------------------------------------------------------------------
    def _track(self, job: JobState, size: int) -> None:
        jid, (low, high) = job.job_id, job.spec.gpu_range
        self._untrack(job)
        self.size[jid] = size
        if size > job.num_gpus:
            self.grown[jid] = job
            self.extra_gpus += size - job.num_gpus
        if size > low and self.is_low_priority(job):
            self.shrinkable[jid] = job
        if size < high and self._gain(job, size) > 0:
            self.growable[jid] = job

    def _untrack(self, job: JobState) -> None:
        jid = job.job_id
        size = self.size.pop(jid, None)
        if size is not None and size > job.num_gpus:
            self.extra_gpus -= size - job.num_gpus
        self.grown.pop(jid, None)
        self.shrinkable.pop(jid, None)
        self.growable.pop(jid, None)

    def _gain(self, job: JobState, size: int) -> float:
        """Speed gained by one more GPU, relative to the speed at the request (0 if unknown)."""
        if self._speed_at is None:
            return 0.0
        now, more = self._speed_at(job.spec, size), self._speed_at(job.spec, size + 1)
        return 0.0 if now is None or more is None else more - now

    def started(self, job: JobState) -> None:
        if job.spec.elastic:
            self._track(job, job.num_gpus)

    def stopped(self, job: JobState) -> None:
        self._untrack(job)

    def resized(self, job: JobState, gpus: tuple[int, ...], now: float) -> None:
        """A layer above changed its planned size (see :meth:`Policy.job_resized`). A scale-in
        told before this pass is this pass's resize of the job: it is not resized again, and
        its GPUs are the ones kept (the layer's view has the others free already)."""
        if job.spec.elastic:
            self._track(job, len(gpus))
            self._layer_resized[job.job_id] = (now, tuple(gpus))

    def rekeyed(self, job: JobState) -> None:
        if job.job_id in self.size:  # its priority changed: so may its rule-3 status
            self._track(job, self.size[job.job_id])

    def planned_gpus(self, job: JobState) -> tuple[int, ...]:
        return self._planned.get(job.job_id, job.gpus)

    def victim_preempted(self, victim: JobState, plan: Plan) -> None:
        if self._planned.pop(victim.job_id, None) is not None:
            plan.resize = [(j, g) for j, g in plan.resize if j is not victim]

    def _resizable(self, job: JobState, view: PolicyView) -> bool:
        return (
            job.job_id not in self._planned
            and not view.resizing(job)
            and not view.occupancy.partners(job)
        )

    def _shrink(
        self, job: JobState, size: int, view: PolicyView, plan: Plan, scratch: FreeGpus
    ) -> None:
        kept = keep_consolidated(job.gpus, size, view.cluster.gpu_node)
        scratch.release([g for g in job.gpus if g not in kept])
        plan.resize.append((job, kept))
        self._planned[job.job_id] = kept
        self._track(job, size)

    def _head_need(self, free_total: int, waiting: Iterable[JobState]) -> int:
        """GPUs the jobs at the head of the queue, in order, could use if the grown jobs gave
        their extras back."""
        budget, need = free_total + self.extra_gpus, 0
        for job in waiting:
            n = job.num_gpus
            if need + n > budget:
                break
            need += n
        return need

    # -- before the pass: give back extras, shrink when many wait (rules 2 and 3) -------------
    def before_pass(self, view: PolicyView, plan: Plan, scratch: FreeGpus) -> None:
        self._planned = {j: gpus for j, (t, gpus) in self._layer_resized.items() if t == view.now}
        self._layer_resized = {}
        self._speed_at = view.workload.speed_at_size
        if not self.grown and not self.shrinkable:
            return
        count, waiting = self.policy.waiting_after(view, plan)
        if not count:
            return
        if self.grown:
            missing = self._head_need(scratch.total, waiting) - scratch.total
            if missing > 0:
                for job in sorted(self.grown.values(), key=self.worst_first):
                    if missing <= 0:
                        break
                    if self._resizable(job, view):
                        size = smallest_fitting(job, job.num_gpus, view)
                        if size is not None:
                            missing -= self.size[job.job_id] - size
                            self._shrink(job, size, view, plan, scratch)
        if count > self.shrink_when_waiting and self.shrinkable:
            for job in sorted(self.shrinkable.values(), key=self.worst_first):
                if self._resizable(job, view):
                    size = smallest_fitting(job, job.base_gpus, view)
                    if size is not None:
                        self._shrink(job, size, view, plan, scratch)

    # -- after the pass: hand out what is left, largest marginal speedup first (rule 4) --------
    def after_pass(self, view: PolicyView, plan: Plan, scratch: FreeGpus) -> None:
        if not scratch.total or not self.growable:
            return  # (what is spare is at most what is idle)
        count, waiting = self.policy.waiting_after(view, plan)
        spare = scratch.total - self._head_need(scratch.total, waiting) if count else scratch.total
        if spare <= 0 or not self.growable:
            return
        many_wait = count > self.shrink_when_waiting
        starting = {job.job_id: index for index, (job, _) in enumerate(plan.start)}
        sizes: dict[str, list[int]] = {}  # job id -> its GPUs as planned, growing
        heap: list[tuple[float, int, str]] = []
        for jid, job in self.growable.items():
            if (many_wait and self.is_low_priority(job)) or not (
                jid in starting or self._resizable(job, view)
            ):
                continue
            sizes[jid] = list(plan.start[starting[jid]][1] if jid in starting else job.gpus)
            heap.append((-self._gain(job, len(sizes[jid])), job.seq, jid))
        heapq.heapify(heap)
        grown: dict[str, JobState] = {}
        gpu_node = view.cluster.gpu_node
        while heap and spare > 0:
            _, _, jid = heapq.heappop(heap)
            job, gpus = self.growable[jid], sizes[jid]
            near = [
                g for nid in sorted({gpu_node[x] for x in gpus}) for g in sorted(scratch.free[nid])
            ]
            pick = (near[0],) if near else best_fit(scratch, 1, job.spec.gpu_types)
            if not pick:
                continue
            scratch.take(pick)
            spare -= 1
            gpus.append(pick[0])
            grown[jid] = job
            if len(gpus) < job.spec.gpu_range[1]:
                gain = self._gain(job, len(gpus))
                if gain > 0:
                    heapq.heappush(heap, (-gain, job.seq, jid))
        for jid, job in grown.items():
            planned = tuple(sizes[jid])
            if jid in starting:
                plan.start[starting[jid]] = (job, planned)
            else:
                plan.resize.append((job, planned))
                self._planned[jid] = planned
            self._track(job, len(planned))


class NoPreemptionFifo(PreemptiveOrder):
    """FIFO by submit time that never preempts: with elastic growth, the simplest elastic
    baseline, where only elasticity changes who runs when."""

    def rank(self, job: JobState, now: float) -> tuple:
        return (job.spec.submit_time_s, job.seq)

    def worst_first(self, job: JobState) -> tuple:
        return (-job.spec.submit_time_s, -job.seq)

    def outranks(self, job: JobState, victim: JobState, now: float) -> bool:
        return False

    def preemptible_gpus(self, job: JobState) -> float:
        return 0.0


class ElasticTiresias(PreemptivePolicy):
    name = "elastic-tiresias"
    description = (
        "Tiresias that grows elastic jobs into idle GPUs by marginal speedup and shrinks them "
        "when jobs wait"
    )

    def __init__(
        self,
        placement: str = "best-fit",
        scan: str = "greedy",
        thresholds_gpu_s: tuple[float, ...] | list[float] | str = DEFAULT_THRESHOLDS_GPU_S,
        starvation_factor: float | None = DEFAULT_STARVATION_FACTOR,
        shrink_when_waiting: int = DEFAULT_SHRINK_WHEN_WAITING,
    ) -> None:
        super().__init__(
            TiresiasOrder(thresholds_gpu_s, starvation_factor),
            placement,
            scan,
            ElasticGrowth(shrink_when_waiting),
        )


class ElasticFifo(PreemptivePolicy):
    name = "elastic-fifo"
    description = (
        "FIFO (no preemption) that grows elastic jobs into idle GPUs and shrinks them when "
        "jobs wait"
    )

    def __init__(
        self,
        placement: str = "best-fit",
        scan: str = "strict",
        shrink_when_waiting: int = DEFAULT_SHRINK_WHEN_WAITING,
    ) -> None:
        super().__init__(NoPreemptionFifo(), placement, scan, ElasticGrowth(shrink_when_waiting))
