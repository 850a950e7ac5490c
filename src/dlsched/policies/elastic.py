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
   larger; a running one is resized. ``grow=False`` turns this phase off (for ablations: the
   jobs then only shrink).

Two guards keep the phases from undoing each other at every event (each resize is an event, so
a cycle would never end): phase 2 leaves free the GPUs the head of the queue could use with the
extras given back (rule 2 would take them back at once), and does not grow a job that rule 3
would shrink. A job resized in a pass is not resized again in it, and a preempted job's resize
is dropped. Without a performance model (``--no-perf``) speeds at other sizes are unknown, so
nothing grows.

The state keeps the running elastic jobs, those above their base sizes and the GPUs held above
requests (:class:`~dlsched.view.PolicyView`), so a pass touches only the jobs it may resize.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Container, Iterable

from ..errors import SpecError
from ..jobs import JobSpec, JobView
from ..state.free import FreeGpus
from ..workload_model import one_more_gpu_helps
from .base import Plan, PolicyView
from .placement import best_fit
from .preemptive import PreemptiveOrder, PreemptivePolicy
from .tiresias import DEFAULT_STARVATION_FACTOR, DEFAULT_THRESHOLDS_GPU_S, TiresiasOrder

DEFAULT_SHRINK_WHEN_WAITING = 10  # the third-party implementation's threshold


def smallest_fitting(job: JobView, size: int, view: PolicyView) -> int | None:
    """The smallest size from ``size`` up (below its current one) at which a running job's
    memory per GPU, its global batch kept, fits its GPUs; None if none does. Unknown memory
    fits. Every scale-in asks this: fewer GPUs hold a larger share of the batch."""
    if size >= len(job.gpus):
        return None  # nothing to scale in (the quota stage asks this of every borrower)
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
    """Rules 2-4 above, as a part of a :class:`PreemptivePolicy`. It keeps nothing between
    passes: the running elastic jobs, their sizes and the GPUs they hold above their requests
    are the view's. Within a pass it keeps its plan: the jobs it resized (and those the quota stage
    scaled in, which the view shows on fewer GPUs), not resized again, and how the plan
    so far changes the GPUs held above requests."""

    policy: PreemptivePolicy
    low_priority: Callable[[], Container[str]]
    worst_first: Callable[[JobView], tuple]

    def __init__(
        self, shrink_when_waiting: int = DEFAULT_SHRINK_WHEN_WAITING, grow: bool = True
    ) -> None:
        if not isinstance(grow, bool):
            raise SpecError("grow", f"must be true or false, got {grow!r}")
        self.shrink_when_waiting = int(shrink_when_waiting)
        self.grow = grow
        self._view: PolicyView | None = None  # this pass's
        self._planned: dict[str, tuple[int, ...]] = {}  # this pass's resizes
        # GPUs held above requests once this pass's plan so far applies (preempting their jobs
        # could free them too)
        self.extra_gpus = 0
        self._speed_at: Callable[[JobSpec, int], float | None] | None = None

    def params(self) -> dict:
        return {"shrink_when_waiting": self.shrink_when_waiting, "grow": self.grow}

    def attach(self, policy: PreemptivePolicy) -> None:
        """Become ``policy``'s part: its order says which jobs are of low priority (rule 3)
        and which go first (worst first)."""
        self.policy = policy
        self.low_priority = policy.order.low_priority
        self.worst_first = policy.order.worst_first

    def _gain(self, job: JobView, size: int) -> float:
        """Speed gained by one more GPU, relative to the speed at the request (0 if unknown)."""
        if self._speed_at is None:
            return 0.0
        now, more = self._speed_at(job.spec, size), self._speed_at(job.spec, size + 1)
        return 0.0 if now is None or more is None else more - now

    def planned_gpus(self, job: JobView) -> tuple[int, ...]:
        planned = self._planned.get(job.job_id)
        if planned is not None:
            return planned
        return job.gpus if self._view is None else self._view.gpus_of(job)

    def _plan_resize(self, job: JobView, gpus: tuple[int, ...]) -> None:
        before = len(self.planned_gpus(job))
        self.extra_gpus += _above_request(job, len(gpus)) - _above_request(job, before)
        self._planned[job.job_id] = gpus

    def victim_preempted(self, victim: JobView, plan: Plan) -> None:
        self.extra_gpus -= _above_request(victim, len(self.planned_gpus(victim)))
        if self._planned.pop(victim.job_id, None) is not None:
            plan.resize = [(j, g) for j, g in plan.resize if j is not victim]

    def _resizable(self, job: JobView, view: PolicyView) -> bool:
        """Not resized in this pass (by this part or the quota stage), nor resizing, nor
        sharing a GPU."""
        return (
            job.job_id not in self._planned
            and view.gpus_of(job) == job.gpus
            and not view.resizing(job)
            and not job.sharing  # (the state keeps it: partners on any of its GPUs)
        )

    def _shrink(
        self, job: JobView, size: int, view: PolicyView, plan: Plan, scratch: FreeGpus
    ) -> None:
        kept = keep_consolidated(job.gpus, size, view.cluster.gpu_node)
        scratch.release([g for g in job.gpus if g not in kept])
        plan.resize.append((job, kept))
        self._plan_resize(job, kept)

    def _head_need(self, free_total: int, waiting: Iterable[JobView]) -> int:
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
        self._view, self._planned, self.extra_gpus = view, {}, view.elastic_grown_gpus
        self._speed_at = view.workload.speed_at_size
        above_base = view.elastic_above_base  # (those grown are above their base too)
        if not above_base:
            return
        count, waiting = self.policy.waiting_after(view, plan)
        if not count:
            return
        if view.elastic_grown_gpus:
            missing = self._head_need(scratch.total, waiting) - scratch.total
            if missing > 0:
                grown = [j for j in above_base.values() if len(view.gpus_of(j)) > j.num_gpus]
                for job in sorted(grown, key=self.worst_first):
                    if missing <= 0:
                        break
                    if self._resizable(job, view):
                        # only what the head still misses: the rest would sit idle until the
                        # next pass (in the simulator, the next event), as this pass grows no
                        # job it shrank, or cost a second resize to take back
                        size = smallest_fitting(
                            job, max(job.num_gpus, len(job.gpus) - missing), view
                        )
                        if size is not None:
                            missing -= len(job.gpus) - size
                            self._shrink(job, size, view, plan, scratch)
        if count > self.shrink_when_waiting:
            low_ids = self.low_priority()
            low = [j for jid, j in above_base.items() if jid in low_ids]
            for job in sorted(low, key=self.worst_first):
                if self._resizable(job, view):
                    size = smallest_fitting(job, job.base_gpus, view)
                    if size is not None:
                        self._shrink(job, size, view, plan, scratch)

    # -- after the pass: hand out what is left, largest marginal speedup first (rule 4) --------
    def after_pass(self, view: PolicyView, plan: Plan, scratch: FreeGpus) -> None:
        if not self.grow or not scratch.total or not (view.elastic_growable or plan.start):
            return  # (what is spare is at most what is idle)
        count, waiting = self.policy.waiting_after(view, plan)
        spare = scratch.total - self._head_need(scratch.total, waiting) if count else scratch.total
        if spare <= 0:
            return
        # the jobs that do not grow while many wait (rule 3 would shrink them)
        low_ids: Container[str] = self.low_priority() if count > self.shrink_when_waiting else ()
        starting = {job.job_id: index for index, (job, _) in enumerate(plan.start)}
        leaving = {job.job_id for job in plan.preempt}
        sizes: dict[str, list[int]] = {}  # job id -> its GPUs as planned, growing
        jobs: dict[str, JobView] = {}
        heap: list[tuple[float, int, str]] = []

        def candidate(job: JobView, gpus: tuple[int, ...], gain: float) -> None:
            sizes[job.job_id], jobs[job.job_id] = list(gpus), job
            heap.append((-gain, job.seq, job.job_id))

        for jid, job in view.elastic_growable.items():  # one more GPU speeds them up
            if not (jid in leaving or jid in low_ids or not self._resizable(job, view)):
                candidate(job, job.gpus, self._gain(job, len(job.gpus)))
        for job, gpus in plan.start:
            if job.spec.elastic and job.job_id not in low_ids:
                if one_more_gpu_helps(view.workload, job.spec, len(gpus)):  # as the state's index
                    candidate(job, gpus, self._gain(job, len(gpus)))
        if not heap:
            return
        heapq.heapify(heap)
        grown: dict[str, JobView] = {}
        gpu_node = view.cluster.gpu_node
        while heap and spare > 0:
            _, _, jid = heapq.heappop(heap)
            job, planned = jobs[jid], sizes[jid]
            near = [
                g
                for nid in sorted({gpu_node[x] for x in planned})
                for g in sorted(scratch.free[nid])
            ]
            pick = (near[0],) if near else best_fit(scratch, 1, job.spec.gpu_types)
            if not pick:
                continue
            scratch.take(pick)
            spare -= 1
            planned.append(pick[0])
            grown[jid] = job
            if len(planned) < job.spec.gpu_range[1]:
                gain = self._gain(job, len(planned))
                if gain > 0:
                    heapq.heappush(heap, (-gain, job.seq, jid))
        for jid, job in grown.items():
            gpus = tuple(sizes[jid])
            if jid in starting:
                plan.start[starting[jid]] = (job, gpus)
            else:
                plan.resize.append((job, gpus))
                self._plan_resize(job, gpus)
            self.policy.order.resized(job, len(gpus), view.now)


def _above_request(job: JobView, size: int) -> int:
    return max(0, size - job.num_gpus)


class NoPreemptionFifo(PreemptiveOrder):
    """FIFO by submit time that never preempts: with elastic growth, the simplest elastic
    baseline, where only elasticity changes who runs when."""

    def rank(self, job: JobView, now: float) -> tuple:
        return (job.spec.submit_time_s, job.seq)

    def worst_first(self, job: JobView) -> tuple:
        return (-job.spec.submit_time_s, -job.seq)

    def outranks(self, job: JobView, victim: JobView, now: float) -> bool:
        return False

    def preemptible_gpus(self, job: JobView, enough: float = math.inf) -> float:
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
        grow: bool = True,
    ) -> None:
        super().__init__(
            TiresiasOrder(thresholds_gpu_s, starvation_factor),
            placement,
            scan,
            ElasticGrowth(shrink_when_waiting, grow),
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
        grow: bool = True,
    ) -> None:
        super().__init__(
            NoPreemptionFifo(), placement, scan, ElasticGrowth(shrink_when_waiting, grow)
        )
