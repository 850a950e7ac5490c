"""Elastic Tiresias: Tiresias that resizes elastic jobs (Amoeba/EDL, PAPERS.md section 2).

Reconstructed from a third-party implementation; every choice below is a parameter or stated:

1. Jobs start and run in Tiresias order at their requested size (phase 1), preempting across
   queues as Tiresias does.
2. GPUs a job holds above its request are the first to go: before the pass, grown jobs give them
   back (lowest priority first) when the waiting jobs at the head of the queue could then start.
3. When more than ``shrink_when_waiting`` jobs wait (default 10), elastic jobs of the lower
   queues (below the top one) shrink to their minimum, lowest priority first.
4. GPUs left after the pass go one at a time to the elastic job with the largest marginal
   speedup (its speed at n + 1 GPUs minus at n, relative to its speed at its request, from the
   performance model), up to its maximum (phase 2). A job started in this pass simply starts
   larger; a running one is resized.

A job resized in a pass is not resized again in it, and a preempted job's resize is dropped.
Without a performance model (``--no-perf``) speeds at other sizes are unknown, so nothing grows.
"""

from __future__ import annotations

import heapq

from ..jobs import JobState
from .base import ClusterView, Plan, register
from .placement import best_fit
from .tiresias import DEFAULT_STARVATION_FACTOR, DEFAULT_THRESHOLDS_GPU_S, Tiresias

DEFAULT_SHRINK_WHEN_WAITING = 10   # the third-party implementation's threshold


def keep_consolidated(gpus: tuple[int, ...], k: int, gpu_node: list[int]) -> tuple[int, ...]:
    """The ``k`` GPUs to keep when shrinking: those on the nodes holding most of the job."""
    per_node: dict[int, int] = {}
    for g in gpus:
        per_node[gpu_node[g]] = per_node.get(gpu_node[g], 0) + 1
    return tuple(sorted(gpus, key=lambda g: (-per_node[gpu_node[g]], gpu_node[g], g))[:k])


@register
class ElasticTiresias(Tiresias):
    name = "elastic-tiresias"
    description = "Tiresias that grows elastic jobs into idle GPUs by marginal speedup and shrinks them when jobs wait"
    uses_pass_hooks = True

    def __init__(self, placement: str = "best-fit", backfill: bool = False,
                 thresholds_gpu_s=DEFAULT_THRESHOLDS_GPU_S, starvation_factor=DEFAULT_STARVATION_FACTOR,
                 shrink_when_waiting: int = DEFAULT_SHRINK_WHEN_WAITING) -> None:
        super().__init__(placement, backfill, thresholds_gpu_s, starvation_factor)
        self.shrink_when_waiting = int(shrink_when_waiting)
        self.elastic_running: dict[str, JobState] = {}
        self._planned: dict[str, tuple[int, ...]] = {}   # this pass's resizes

    def params(self) -> dict:
        return {**super().params(), "shrink_when_waiting": self.shrink_when_waiting}

    # -- bookkeeping ------------------------------------------------------------------------
    def started(self, job: JobState, now: float) -> None:
        super().started(job, now)
        if job.spec.elastic:
            self.elastic_running[job.job_id] = job

    def stopped(self, job: JobState, now: float) -> None:
        super().stopped(job, now)
        self.elastic_running.pop(job.job_id, None)

    def planned_gpus(self, job: JobState) -> tuple[int, ...]:
        return self._planned.get(job.job_id, job.gpus)

    def victim_preempted(self, victim: JobState, plan: Plan) -> None:
        if self._planned.pop(victim.job_id, None) is not None:
            plan.resize = [(j, g) for j, g in plan.resize if j is not victim]

    def _resizable(self, job: JobState, view: ClusterView) -> bool:
        return job.switch_at is None and job.job_id not in self._planned and not view.occupancy.partners(job)

    def _shrink(self, job: JobState, size: int, view: ClusterView, plan: Plan, scratch) -> None:
        kept = keep_consolidated(job.gpus, size, view.cluster.gpu_node)
        scratch.release([g for g in job.gpus if g not in kept])
        plan.resize.append((job, kept))
        self._planned[job.job_id] = kept

    # -- before the pass: give back extras, shrink when many wait ----------------------------
    def before_pass(self, view: ClusterView, plan: Plan, scratch) -> None:
        self._planned = {}
        if not self.queue or not self.elastic_running:
            return
        by_priority = sorted(self.elastic_running.values(), key=lambda j: self.worst_first(j))  # worst first
        grown = [j for j in by_priority if len(j.gpus) > j.num_gpus and self._resizable(j, view)]
        if grown:
            extras = sum(len(j.gpus) - j.num_gpus for j in grown)
            need = 0
            for entry in self.queue:           # what the head of the queue could use
                n = entry[-1].num_gpus
                if need + n > scratch.total + extras:
                    break
                need += n
            missing = need - scratch.total
            for job in grown:
                if missing <= 0:
                    break
                self._shrink(job, job.num_gpus, view, plan, scratch)
                missing -= len(job.gpus) - job.num_gpus
        if len(self.queue) > self.shrink_when_waiting:
            for job in by_priority:
                low = job.spec.gpu_range[0]
                if self.level.get(job.job_id, 0) > 0 and len(job.gpus) > low and self._resizable(job, view):
                    self._shrink(job, low, view, plan, scratch)

    # -- after the pass: hand out what is left, largest marginal speedup first ----------------
    def after_pass(self, view: ClusterView, plan: Plan, scratch) -> None:
        if scratch.total == 0:
            return
        speed_at = view.speed.speed_at_size
        victims = {j.job_id for j in plan.preempt}
        sizes: dict[str, list[int]] = {}         # job id -> its GPUs as planned, growing
        owners: dict[str, tuple[JobState, int | None]] = {}   # job id -> (job, index in plan.start)
        heap: list[tuple[float, int, str]] = []

        def offer(job: JobState, gpus: list[int]) -> None:
            high = job.spec.gpu_range[1]
            if len(gpus) >= high:
                return
            now_speed, next_speed = speed_at(job.spec, len(gpus)), speed_at(job.spec, len(gpus) + 1)
            if now_speed is None or next_speed is None or next_speed <= now_speed:
                return
            heapq.heappush(heap, (now_speed - next_speed, job.seq, job.job_id))

        for index, (job, gpus) in enumerate(plan.start):
            if job.spec.elastic:
                sizes[job.job_id] = list(gpus)
                owners[job.job_id] = (job, index)
                offer(job, sizes[job.job_id])
        for job in self.elastic_running.values():
            if job.job_id not in victims and job.job_id not in sizes and self._resizable(job, view):
                sizes[job.job_id] = list(job.gpus)
                owners[job.job_id] = (job, None)
                offer(job, sizes[job.job_id])
        grown: set[str] = set()
        gpu_node = view.cluster.gpu_node
        while heap and scratch.total > 0:
            _, _, jid = heapq.heappop(heap)
            job, gpus = owners[jid][0], sizes[jid]
            near = [g for nid in sorted({gpu_node[x] for x in gpus}) for g in sorted(scratch.free[nid])]
            pick = (near[0],) if near else best_fit(scratch, 1, job.spec.gpu_types)
            if not pick:
                continue
            scratch.take(pick)
            gpus.append(pick[0])
            grown.add(jid)
            offer(job, gpus)
        for jid in grown:
            job, index = owners[jid]
            if index is None:
                plan.resize.append((job, tuple(sizes[jid])))
                self._planned[jid] = tuple(sizes[jid])
            else:
                plan.start[index] = (job, tuple(sizes[jid]))
