"""Aryl (Li et al., arXiv 2202.07896; Lyra, EuroSys'23): capacity loaning and elastic scaling
(PAPERS.md section 3; what is reconstructed is stated there and below).

A pass:

1. **Base demand, shortest job first.** Waiting jobs in order of (oracle) duration start at their
   base size: an elastic job's minimum (or the fewest GPUs above it where its memory fits), a
   rigid job's request. Placement is best-fit
   (decreasing: the pass takes the queue as it comes, but each job gets the fullest node that
   fits it), on owned (training) servers first, then on loaned ones. A job that does not fit may
   take GPUs back from elastic jobs' extra workers (scaled in, background, no preemption), those
   whose loss lengthens their job least first; if even all extras would not make room, nothing
   is taken. Later jobs may start past one that cannot (``scan="backfill"``).
2. **Extra workers by a multiple-choice knapsack.** The GPUs left go to elastic jobs (those
   starting in this pass, then the running ones in the order they started, as the cluster state
   lists them) as extra workers: each job offers options "k more GPUs" (up to its
   maximum) valued by the JCT reduction T(n) - T(n + k), T = work left / speed, each at the
   GPUs the extras would get (the workload model's speed on that placement: extras across
   nodes may be slower than none); :mod:`.knapsack` picks the best set exactly. Extras go to
   the job's own nodes first, then to loaned servers before owned ones.
3. **Reclaim** (when the inference side needs servers back): the loaned servers with the lowest
   *server preemption cost*, one at a time, costs recomputed after each pick. A job on the
   server costs nothing when it can scale in (elastic, its GPUs elsewhere still at least its
   minimum); otherwise it costs the GPU-seconds its preemption wastes (the state's restart pause
   and lost work). Ties: fewer busy GPUs, then the most recently loaned. The chosen servers'
   jobs scale in or are preempted at once; the state hands the servers back when empty.

Ablations (the paper's): ``loaning=False`` (the inference pool stays idle), ``elasticity=False``
(every job at its request, no extras), ``reclaim="recent"`` or ``"random"`` (naive reclaim:
most recently loaned, or seeded random servers). Without a performance model no speed-vs-size
curve is known, so nothing grows.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Collection, Iterable, Mapping
from typing import ClassVar

from ..errors import SpecError
from ..jobs import JobView
from ..state.free import FreeGpus
from ..view import IdleGpus
from ..workload_model import WorkloadModel
from . import knapsack
from .base import Plan, Policy, PolicyView
from .elastic import keep_consolidated, smallest_fitting
from .placement import best_fit
from .queued import shortest_first

RECLAIM_RULES = ("cost", "recent", "random")


class Aryl(Policy):
    name = "aryl"
    description = (
        "Aryl: SJF base demand, spare GPUs to elastic jobs by a knapsack on JCT reduction, "
        "idle inference servers loaned and reclaimed at the least preemption cost"
    )

    defaults: ClassVar[dict] = {"loaning": True, "elasticity": True, "reclaim": "cost"}

    def __init__(
        self,
        placement: str = "best-fit",
        scan: str = "backfill",
        loaning: bool | None = None,
        elasticity: bool | None = None,
        reclaim: str | None = None,
        seed: int = 0,
    ) -> None:
        """``loaning``, ``elasticity``, ``reclaim``: None takes the class's ``defaults``."""
        super().__init__(placement, scan)
        d = self.defaults
        loaning = d["loaning"] if loaning is None else loaning
        elasticity = d["elasticity"] if elasticity is None else elasticity
        reclaim = d["reclaim"] if reclaim is None else reclaim
        if reclaim not in RECLAIM_RULES:
            raise SpecError(
                "reclaim", f"must be one of {', '.join(RECLAIM_RULES)}, got {reclaim!r}"
            )
        for field, value in (("loaning", loaning), ("elasticity", elasticity)):
            if not isinstance(value, bool):
                raise SpecError(field, f"must be true or false, got {value!r}")
        self.loans_servers = loaning
        self.resizes_elastic = elasticity
        self.reclaim_rule = reclaim
        self.seed = seed
        self._rng = random.Random(seed)
        # job id -> (GPUs, nodes, GPU types, sub-batches) -> its speed there (extras' values)
        self._speeds: dict[str, dict[tuple, float]] = {}
        # job id -> (its GPUs, sub-batches, their nodes and GPU types, its speed there)
        self._where: dict[str, tuple] = {}

    def params(self) -> dict:
        return {
            **super().params(),
            "loaning": self.loans_servers,
            "elasticity": self.resizes_elastic,
            "reclaim": self.reclaim_rule,
            "seed": self.seed,
        }

    def base(self, job: JobView) -> int:
        """The size a job starts at (before extras): its base size (an elastic job's minimum,
        raised to where its memory fits), or its request without elasticity."""
        return job.base_gpus if self.resizes_elastic else job.num_gpus

    def kind(self, job: JobView) -> tuple:
        """The queue's buckets: what a pass needs to know of a job to tell whether it can start."""
        return (self.base(job), job.spec.gpu_types)

    # -- the running elastic jobs, as the state keeps them ------------------------------------
    def _elastic(self, view: PolicyView) -> Mapping[str, JobView]:
        """The running jobs extras may go to or come from (none without elasticity)."""
        return view.running_elastic if self.resizes_elastic else {}

    def _extra_gpus(self, view: PolicyView) -> int:
        """GPUs the running jobs hold above their base sizes: what scale-ins could free."""
        return view.elastic_extra_gpus if self.resizes_elastic else 0

    # caches of the workload model's answers (the one of where a job runs is checked against
    # its GPUs at each use), not of the cluster's state
    def job_finished(self, job: JobView, now: float) -> None:
        self._speeds.pop(job.job_id, None)
        self._where.pop(job.job_id, None)

    def job_cancelled(self, job: JobView, now: float) -> None:
        self._speeds.pop(job.job_id, None)  # valued as planned to start, then cancelled
        self._where.pop(job.job_id, None)

    # -- JCT model ----------------------------------------------------------------------------
    @staticmethod
    def _time_left(view: PolicyView, job: JobView, gpus: int) -> float | None:
        """Seconds the job needs to finish at ``gpus`` GPUs (None: speed unknown)."""
        speed = view.workload.speed_at_size(job.spec, gpus)
        return None if not speed else job.remaining_at(view.now) / speed

    # -- the pass -----------------------------------------------------------------------------
    def schedule(self, view: PolicyView) -> Plan:
        plan = Plan()
        scratch: FreeGpus | None = None  # the idle GPUs as this pass plans them
        planned: dict[str, tuple[int, ...]] = {}  # this pass's shrinks and growths
        queue = view.queue(shortest_first, self.kind)  # SJF, bucketed by kind
        extra_gpus = self._extra_gpus(view)
        if queue and view.free.total + extra_gpus >= min(k[0] for k in queue.buckets):
            free = scratch = view.free.copy()
            failed: set = set()
            for job, kind in queue.scan(failed):
                need = self.base(job)  # its kind's size
                gpus = (
                    self._place_base(view, free, need, job.spec.gpu_types)
                    if need <= free.total
                    else None
                )
                if gpus is None and extra_gpus and need <= free.total + extra_gpus:
                    free, gpus = self._make_room(view, free, need, job.spec.gpu_types, planned)
                    scratch = free
                if gpus is None:
                    if not self.backfill:
                        break
                    failed.add(kind)
                    continue
                free.take(gpus)
                plan.start.append((job, gpus))
        if (
            self.resizes_elastic
            and (scratch or view.free).total > 0
            and (view.running_elastic or plan.start)
        ):
            self._grow(view, plan, scratch or view.free.copy(), planned)
        for jid, gpus in planned.items():
            plan.resize.append((view.running[jid], gpus))
        return plan

    def _place_base(
        self, view: PolicyView, free: IdleGpus, need: int, types: tuple[str, ...] | None
    ) -> tuple[int, ...] | None:
        """Owned servers first, then loaned ones too."""
        loaned = view.loans.loaned
        if loaned:
            gpus = best_fit(free, need, types, allowed=lambda nid: nid not in loaned)
            if gpus is not None:
                return gpus
        return self.place(free, need, types)

    def _resizable(self, view: PolicyView, job: JobView, planned: dict) -> bool:
        return (
            job.job_id not in planned
            and not view.resizing(job)
            and not job.sharing  # (the state keeps it: partners on any of its GPUs)
        )

    def _make_room(
        self,
        view: PolicyView,
        free: FreeGpus,
        need: int,
        types: tuple[str, ...] | None,
        planned: dict,
    ) -> tuple[FreeGpus, tuple[int, ...] | None]:
        """Scale in extra workers, cheapest loss first, until ``need`` GPUs can be placed;
        returns the index to go on with and the GPUs (or the old index and None)."""
        trial = free.copy()
        shrunk: dict[str, list[int]] = {}
        floor: dict[str, int] = {}  # the fewest GPUs each may keep: its base, if memory fits
        heap = []
        # (the jobs above their base sizes, as the state keeps them: only they can shrink)
        for jid, job in (view.elastic_above_base if self.resizes_elastic else {}).items():
            size = len(view.gpus_of(job))
            if size > self.base(job) and self._resizable(view, job, planned):
                fewest = smallest_fitting(job, self.base(job), view)
                if fewest is None or fewest >= size:
                    continue
                floor[jid] = fewest
                loss = self._shrink_loss(view, job, size)
                if loss is not None:
                    heap.append((loss, job.seq, jid))
        heapq.heapify(heap)
        gpu_node = view.cluster.gpu_node
        while heap:
            _, _, jid = heapq.heappop(heap)
            job = view.running[jid]
            gpus = shrunk.setdefault(jid, list(view.gpus_of(job)))
            kept = keep_consolidated(tuple(gpus), len(gpus) - 1, gpu_node)
            trial.release([g for g in gpus if g not in kept])
            gpus[:] = kept
            if len(gpus) > floor[jid]:
                loss = self._shrink_loss(view, job, len(gpus))
                if loss is not None:
                    heapq.heappush(heap, (loss, job.seq, jid))
            if trial.total >= need:
                placed = self._place_base(view, trial, need, types)
                if placed is not None:
                    for jid2, gpus2 in shrunk.items():
                        planned[jid2] = tuple(gpus2)
                    return trial, placed
        return free, None

    def _shrink_loss(self, view: PolicyView, job: JobView, size: int) -> float | None:
        now, fewer = self._time_left(view, job, size), self._time_left(view, job, size - 1)
        return None if now is None or fewer is None else fewer - now

    def _grow(self, view: PolicyView, plan: Plan, free: FreeGpus, planned: dict) -> None:
        """Hand the spare GPUs to elastic jobs by the knapsack on JCT reduction."""
        spare = free.total
        candidates: list[tuple[JobView, tuple[int, ...], int]] = []  # job, GPUs, plan.start index
        for i, (job, gpus) in enumerate(plan.start):
            if job.spec.elastic and len(gpus) < job.spec.gpu_range[1]:
                candidates.append((job, tuple(gpus), i))
        for job in self._elastic(view).values():
            gpus = view.gpus_of(job)
            if len(gpus) < job.spec.gpu_range[1] and self._resizable(view, job, planned):
                candidates.append((job, tuple(gpus), -1))
        groups, kept = [], []
        loaned = view.loans.loaned
        slots = ExtraSlots(free, loaned)
        for job, held, index in candidates:
            options = self._options(view, job, held, slots)
            if options:
                groups.append(options)
                kept.append((job, held, index))
        if not groups:
            return
        chosen = knapsack.solve(groups, spare)
        gpu_node = view.cluster.gpu_node
        for (job, held, index), options, pick in zip(kept, groups, chosen):
            if pick < 0:
                continue
            own = {gpu_node[g] for g in held}
            extra = ExtraSlots(free, loaned).take(own, options[pick][0], job.spec.gpu_types)
            if not extra:
                continue
            free.take(extra)
            grown = held + extra
            if index >= 0:
                plan.start[index] = (job, grown)
            else:
                planned[job.job_id] = grown

    def _options(
        self, view: PolicyView, job: JobView, held: tuple[int, ...], slots: ExtraSlots
    ) -> list[knapsack.Option]:
        """(k extra GPUs, JCT reduction) for k = 1.. up to its maximum, each valued at the
        GPUs it would get now (extras spanning more nodes may be slower than none), dominated
        ones dropped."""
        accumulation = job.accumulation
        where = self._where.get(job.job_id)
        if where is None or where[0] != held or where[1] != accumulation:
            where = self._where[job.job_id] = self._situation(view, job, held, accumulation)
        _, _, on, types, speed, spread_is_slower = where
        if not speed:
            return []
        left = job.remaining_at(view.now)
        if spread_is_slower and left > 0 and not slots.on_any(on):
            # its extras would all be on other nodes: every count of them is slower than none
            # (1,366,051 of the 2,678,691 valuations of a Philly replay end here)
            return []
        workload = view.workload
        gpu_node, nodes = view.cluster.gpu_node, view.cluster.nodes
        known = self._speeds[job.job_id]
        base_time = left / speed
        extra = slots.take(on, job.spec.gpu_range[1] - len(held), job.spec.gpu_types)
        options: list[knapsack.Option] = []
        best = 0.0
        size, spans = len(held), len(on)
        for k, gpu in enumerate(extra, 1):
            nid = gpu_node[gpu]
            if nid not in on:
                on = on | {nid}
                spans += 1
                if nodes[nid].gpu_type not in types:  # (else the same set: its hash is kept)
                    types = types | {nodes[nid].gpu_type}
            key = (size + k, spans, types, accumulation)
            grown = known.get(key)
            if grown is None:
                grown = known[key] = workload(job, (*held, *extra[:k]))
            if grown:
                gain = base_time - left / grown
                if gain > best:
                    best = gain
                    options.append((k, best))
        return options

    def _situation(
        self, view: PolicyView, job: JobView, held: tuple[int, ...], accumulation: int
    ) -> tuple:
        """What the job's GPUs give now, kept while they and its sub-batches stay: (its GPUs,
        sub-batches, nodes, their GPU types, its speed, whether extras spread over more nodes
        would all be slower). A speed depends on the GPUs' count, nodes and types (and the
        sub-batch count): known speeds are kept per job, as every pass values the same jobs
        again."""
        workload = view.workload
        gpu_node, nodes = view.cluster.gpu_node, view.cluster.nodes
        known = self._speeds.setdefault(job.job_id, {})
        on = frozenset(gpu_node[g] for g in held)
        types = frozenset(nodes[n].gpu_type for n in on)
        if workload.speed_at_size(job.spec, len(held)) is None:
            speed = None  # no speed-vs-size curve: nothing grows
        else:
            key = (len(held), len(on), types, accumulation)
            speed = known.get(key)
            if speed is None:
                speed = known[key] = workload(job, held)
        slower = speed and self._spread_is_slower(workload, job, len(held), types, speed)
        return held, accumulation, on, types, speed, slower

    @staticmethod
    def _spread_is_slower(
        workload: WorkloadModel, job: JobView, size: int, types: frozenset, speed: float
    ) -> bool:
        """Whether the job, now at ``speed`` on ``size`` GPUs of ``types``, would run no faster
        with any count of extra GPUs spread over more nodes (as far as the model knows)."""
        for gpus in range(size + 1, job.spec.gpu_range[1] + 1):
            spread = workload.spread_speed(job, gpus, types)
            if spread is None or spread > speed:
                return False
        return True

    # -- reclaim -----------------------------------------------------------------------------
    def reclaim(self, view: PolicyView, count: int) -> tuple[list[int], Plan]:
        loans = view.loans
        leaving = set(loans.reclaiming)
        if self.reclaim_rule == "recent":
            chosen = sorted(loans.loaned, key=lambda n: (-loans.loaned[n], -n))[:count]
        elif self.reclaim_rule == "random":
            chosen = self._rng.sample(sorted(loans.loaned), count)
        else:
            chosen = []
            # each server's (cost, busy GPUs, -loaned at, -id): a pick changes the cost only of
            # the servers that share a job with it
            keys = {
                n: (self.server_cost(view, n, leaving), self._busy_gpus(view, n), -at, -n)
                for n, at in loans.loaned.items()
            }
            gpu_node = view.cluster.gpu_node
            for _ in range(count):
                best = min(keys, key=keys.__getitem__)
                chosen.append(best)
                del keys[best]
                gone = leaving | set(chosen)
                for n in {gpu_node[g] for job in _jobs_on(view, [best]) for g in job.gpus}:
                    if n in keys:
                        keys[n] = (self.server_cost(view, n, gone), *keys[n][1:])
        plan = Plan()
        leaving |= set(chosen)
        for job in _jobs_on(view, chosen):
            keep = self._kept_if_scaled_in(view, job, leaving)
            if keep is not None:
                plan.resize.append((job, keep))
            else:
                plan.preempt.append(job)
        return chosen, plan

    def server_cost(self, view: PolicyView, nid: int, leaving: set[int]) -> float:
        """What reclaiming server ``nid`` costs when the servers in ``leaving`` go too: the
        preemption cost of each job there that cannot scale in, unless an earlier pick already
        preempts it."""
        cost = 0.0
        with_it = leaving | {nid}
        for job in _jobs_on(view, [nid]):
            if self._kept_if_scaled_in(view, job, leaving) is None:  # preempted by earlier picks
                continue
            if self._kept_if_scaled_in(view, job, with_it) is None:
                cost += view.preemption_cost_gpu_s(job)
        return cost

    def _kept_if_scaled_in(
        self, view: PolicyView, job: JobView, leaving: set[int]
    ) -> tuple[int, ...] | None:
        """The GPUs the job keeps when it scales in off ``leaving`` (all of them if it has none
        there), or None when it must be preempted."""
        gpu_node = view.cluster.gpu_node
        keep = tuple(g for g in job.gpus if gpu_node[g] not in leaving)
        if len(keep) == len(job.gpus):
            return keep
        if (
            self.resizes_elastic
            and job.spec.elastic
            and keep
            and len(keep) >= job.spec.gpu_range[0]
            and smallest_fitting(job, len(keep), view) == len(keep)
            and not view.resizing(job)
            and not job.sharing  # (the state keeps it: partners on any of its GPUs)
        ):
            return keep
        return None

    @staticmethod
    def _busy_gpus(view: PolicyView, nid: int) -> int:
        return sum(1 for g in view.cluster.nodes[nid].gpu_ids if view.occupancy.jobs[g])


def _jobs_on(view: PolicyView, nodes: Iterable[int]) -> list[JobView]:
    """The jobs running on ``nodes``, but a move's old workers (they leave at its switch; the
    state hands a server back after it, or stops the job when the notice runs out)."""
    jobs = view.occupancy.jobs
    return list(
        dict.fromkeys(
            j
            for nid in nodes
            for g in view.cluster.nodes[nid].gpu_ids
            for j in jobs[g]
            if g not in j.leaving
        )
    )


class ExtraSlots:
    """Where extra workers go, as GPUs are free now: the job's own nodes first (extras across
    nodes may be slower than none), then loaned servers before owned ones, each time the nodes
    with the fewest free GPUs first. A node's free GPUs are listed from ``free`` when an extra
    first reaches it, so it holds only while ``free`` does not change: a pass values every
    elastic job against one, and makes a new one after each placement."""

    def __init__(self, free: FreeGpus, loaned: Collection[int]) -> None:
        order = [n for c in range(1, len(free.buckets)) for n in free.buckets[c]]
        order.sort(key=lambda n: (n not in loaned, len(free.free[n]), n))
        self.order = order
        self.position = {n: i for i, n in enumerate(order)}
        self.free, self.nodes = free.free, free.cluster.nodes
        self._listed: dict[int, list[int]] = {}
        # the free GPUs in that order, as far as listed: what a job of any type with no free
        # GPU on its own nodes gets (most jobs, on a busy cluster)
        self._in_order: list[int] = []
        self._nodes_in_order = 0

    def take(self, own: Collection[int], k: int, types: tuple[str, ...] | None) -> tuple[int, ...]:
        """Up to ``k`` GPUs for a job on the nodes ``own`` (of ``types``, None: any)."""
        position, order = self.position, self.order
        first = [n for n in own if n in position]
        if types is None and not first:
            in_order = self._in_order
            while len(in_order) < k and self._nodes_in_order < len(order):
                in_order += self._gpus(order[self._nodes_in_order])
                self._nodes_in_order += 1
            return tuple(in_order[:k])
        first.sort(key=position.__getitem__)
        taken: list[int] = []
        for nid in itertools.chain(first, (n for n in order if n not in own)):
            if types is not None and self.nodes[nid].gpu_type not in types:
                continue
            taken += self._gpus(nid)[: k - len(taken)]
            if len(taken) == k:
                break
        return tuple(taken)

    def on_any(self, nodes: Collection[int]) -> bool:
        """Whether any of ``nodes`` has a free GPU."""
        return not self.position.keys().isdisjoint(nodes)

    def _gpus(self, nid: int) -> list[int]:
        gpus = self._listed.get(nid)
        if gpus is None:
            gpus = self._listed[nid] = sorted(self.free[nid])
        return gpus


# The paper's ablations under their own names, for `dlsched compare`: Aryl with other
# defaults (every parameter can still be given).
class ArylNoLoan(Aryl):
    name = "aryl-no-loan"
    description = "Aryl without capacity loaning (elastic scaling on the training pool only)"
    defaults = {**Aryl.defaults, "loaning": False}


class ArylNoElastic(Aryl):
    name = "aryl-no-elastic"
    description = "Aryl without elastic scaling (loaned servers run jobs at their requested size)"
    defaults = {**Aryl.defaults, "elasticity": False}


class ArylNaiveReclaim(Aryl):
    name = "aryl-naive-reclaim"
    description = "Aryl reclaiming the most recently loaned servers instead of the cheapest"
    defaults = {**Aryl.defaults, "reclaim": "recent"}


class ArylBase(Aryl):
    name = "aryl-base"
    description = (
        "the scheduler Aryl is compared against: SJF with backfill, no loaning, no elasticity"
    )
    defaults = {**Aryl.defaults, "loaning": False, "elasticity": False}
