"""GENIE (Chen et al., IEEE TPDS 2020): QoS-aware scheduling by Shortest Waiting Allowance First,
with each job's run time on any placement predicted by a model fitted to its profiling run; and
EDF, the deadline baseline.

GENIE is event-driven (a pass at every arrival and completion) and non-preemptive. A job's
waiting allowance is its deadline - now - its predicted run time left at its best placement
(the fastest size it may use, on the fewest nodes). Waiting jobs are taken in order of
allowance; those whose allowance is already negative, and those without a deadline, come after
the others, in arrival order (best effort). An on-time job gets, of the placements the idle GPUs
allow now, the one with the fewest GPUs predicted to meet its deadline, or waits. A best-effort
job gets the fastest placement the idle GPUs allow (with ``best_effort_slowdown``, only one
predicted to run at most that many times as long as at the job's best size; else it waits). A
job may run on fewer GPUs than it asked for (GENIE chooses the number of workers, the global
batch kept), never on more; sizes are its request and the powers of two below it whose per-GPU
memory fits.

Predictions: ``predictor="profiled"`` fits :mod:`dlsched.perf.predictor` per job to its
profiling samples: in the simulator the workload model's iteration times read with ``noise``;
in the runtime the job's real profiling run (1 worker, 2 on one node, 2 on two nodes, at two
batches). ``"oracle"`` (simulator only) uses the workload model itself, to separate prediction
error from the policy. A job's length in iterations is known (users give iterations or epochs);
only its speed is predicted. Jobs that cannot be measured are predicted from their duration
estimate, on their requested size only.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left
from collections.abc import Callable
from itertools import chain

from ..cluster import Cluster
from ..errors import SpecError
from ..jobs import JobView
from ..perf.predictor import DEFAULT_PROFILE_NOISE, fit, measured_links, profile_samples
from ..state.free import FreeGpus
from ..workload_model import WorkloadModel
from .base import Plan, Policy, PolicyView
from .queued import QueuedPolicy

_NO_PLAN = Plan()
Measure = Callable[[int, int, float], "float | None"]  # (GPUs, nodes, per-GPU batch) -> s
PREDICTORS = ("profiled", "oracle")


def arrival_order(job: JobView) -> int:
    return job.seq


class _Prediction:
    """One job's predicted run time left on n GPUs over m nodes."""

    def __init__(
        self,
        job: JobView,
        workload: WorkloadModel,
        cluster: Cluster,
        predictor: str,
        noise: float,
        seed: int,
    ) -> None:
        spec = job.spec
        self.batch = float(spec.batch_size or 0)
        reference_nodes = cluster.min_nodes_for(spec.num_gpus)
        measure: Measure | None = None
        if spec.batch_size:

            def measure_on(n: int, m: int, b: float) -> float | None:
                return workload.iteration_s(spec, n, m, b)

            measure = measure_on
        # its length in iterations: the real count in the runtime; in the simulator what its
        # duration means at the workload model's speed
        iterations: float | None
        if workload.measures_real_runs:
            iterations = spec.iterations
        else:
            truth = (
                measure(spec.num_gpus, reference_nodes, self.batch / spec.num_gpus)
                if measure
                else None
            )
            iterations = spec.duration_s / truth if truth else None
        self.fit = None
        self.measure: Measure | None = None
        # the links (False: within a node, True: across nodes) the prediction holds over
        self.links = {False, True}
        if iterations and measure:
            self.iterations = iterations
            if predictor == "oracle" and not workload.measures_real_runs:
                self.measure = measure
            else:  # (the runtime has no oracle: it fits its measurements)
                rng = random.Random(f"{seed}:{spec.job_id}")
                samples = profile_samples(
                    measure,
                    self.batch / spec.num_gpus,
                    0.0 if workload.measures_real_runs else noise,
                    rng,
                )
                self.links = measured_links(samples) if samples else set()
                # fitted to the links measured: so its own size must be over one of them
                asked_ok = spec.num_gpus == 1 or (reference_nodes > 1) in self.links
                self.fit = fit(samples) if samples and asked_ok else None
        sizes = {spec.num_gpus}  # unpredictable: only as asked
        if self.fit or self.measure:  # the largest allowed and the powers of two below
            low, high = spec.start_range(moldable=True)
            sizes = {high} | {2**k for k in range(high.bit_length()) if low <= 2**k < high}
            sizes = {n for n in sizes if self._predicts(n, cluster.min_nodes_for(n))}
        memory = cluster.smallest_gpu_mib
        self.sizes = [
            n for n in sorted(sizes) if (workload.memory_mib(spec, n) or 0.0) <= memory
        ] or [spec.num_gpus]
        self.reference_nodes = {n: cluster.min_nodes_for(n) for n in self.sizes}

    def _predicts(self, gpus: int, nodes: int) -> bool:
        return gpus == 1 or (nodes > 1) in self.links

    def run_s(self, job: JobView, gpus: int, nodes: int) -> float:
        """Predicted run time left on ``gpus`` GPUs over ``nodes`` nodes (infinite over a link
        the fit was not measured on: such a placement is never chosen)."""
        duration = job.spec.duration_s  # (the runtime re-estimates it as the job runs)
        left = max(0.0, 1.0 - job.done_s / duration)
        if self.fit is not None:
            if not self._predicts(gpus, nodes):
                return math.inf
            return left * self.iterations * self.fit.iteration_s(self.batch / gpus, gpus, nodes)
        if self.measure is not None and (
            iteration_s := self.measure(gpus, nodes, self.batch / gpus)
        ):
            return left * self.iterations * iteration_s
        return left * duration

    def best_s(self, job: JobView) -> float:
        return min(self.run_s(job, n, self.reference_nodes[n]) for n in self.sizes)


class Genie(Policy):
    name = "genie"
    description = (
        "GENIE: shortest waiting allowance first, fewest GPUs predicted to meet the deadline"
    )
    moldable = True  # may start a job on fewer GPUs than it asked for
    needs_deadlines = True

    def __init__(
        self,
        predictor: str = "profiled",
        noise: float | None = None,
        seed: int = 0,
        placement: str = "best-fit",
        best_effort_slowdown: float | None = None,
    ) -> None:
        """``noise``: the simulated profiling's relative error (None: the predictor's default,
        :data:`dlsched.perf.predictor.DEFAULT_PROFILE_NOISE`). ``best_effort_slowdown``: how
        much slower than at its best a late job or one without a deadline may start (>= 1;
        None, the default, or ``inf``: on whatever is idle; a bound of 2 lowered QoS and raised
        the mean JCT on Philly, docs/experiments/genie.md, "Late jobs")."""
        super().__init__(placement, "greedy")
        if predictor not in PREDICTORS:
            raise SpecError(
                "predictor", f"unknown predictor '{predictor}': choose from {', '.join(PREDICTORS)}"
            )
        if noise is None:
            noise = DEFAULT_PROFILE_NOISE
        if not (isinstance(noise, (int, float)) and 0 <= noise < 1):
            raise SpecError("noise", f"must be a number in [0, 1), got {noise!r}")
        if best_effort_slowdown is not None and not (
            isinstance(best_effort_slowdown, (int, float)) and best_effort_slowdown >= 1
        ):
            raise SpecError(
                "best_effort_slowdown", f"must be a number >= 1, got {best_effort_slowdown!r}"
            )
        self.predictor, self.noise, self.seed = predictor, float(noise), int(seed)
        self.best_effort_slowdown = (
            None
            if best_effort_slowdown is None or best_effort_slowdown == math.inf
            else float(best_effort_slowdown)
        )
        self.predictions: dict[str, _Prediction] = {}  # made once, at a job's first wait
        # what predictions read; the same every pass (known from the first)
        self.workload: WorkloadModel | None = None
        self.cluster: Cluster | None = None

    def params(self) -> dict:
        return {
            **super().params(),
            "predictor": self.predictor,
            "noise": self.noise,
            "seed": self.seed,
            "best_effort_slowdown": self.best_effort_slowdown,
        }

    def job_finished(self, job: JobView, now: float) -> None:
        self.predictions.pop(job.job_id, None)

    def job_cancelled(self, job: JobView, now: float) -> None:
        self.predictions.pop(job.job_id, None)

    def predict(self, job: JobView) -> _Prediction:
        """The job's predictions (made once, when it first waits)."""
        assert self.workload is not None and self.cluster is not None
        return _Prediction(job, self.workload, self.cluster, self.predictor, self.noise, self.seed)

    # -- the queue ---------------------------------------------------------------------------
    def allowance_at_zero(self, job: JobView) -> float:
        """The job's waiting allowance at time 0, its key in the state's queue while it waits:
        deadline - predicted run time left at its best size (its allowance is that minus now;
        -inf: no deadline, best effort)."""
        p = self.predictions.get(job.job_id)
        if p is None:
            p = self.predictions[job.job_id] = self.predict(job)
        deadline = job.spec.deadline_s
        return deadline - p.best_s(job) if deadline is not None else -math.inf

    # -- a pass ------------------------------------------------------------------------------
    def schedule(self, view: PolicyView) -> Plan:
        if self.workload is None:
            self.workload, self.cluster = view.workload, view.cluster
        by_allowance = view.queue(self.allowance_at_zero)
        if view.free.total == 0 or not by_allowance:
            return _NO_PLAN
        now = view.now
        # on time (allowance >= 0) by allowance; then the late and those without a deadline
        # (allowance < 0), in arrival order
        cut = bisect_left(by_allowance.entries, now, key=lambda e: e[0])
        on_time = ((e[2], True) for e in by_allowance.entries[cut:])
        key_of = by_allowance.key_of
        late = ((job, False) for job in view.queue(arrival_order) if key_of(job) < now)
        free = view.free.copy()
        plan = Plan()
        # each size's placement (and its node count) as the free GPUs stand: most jobs the
        # pass looks at start nowhere and leave them as they were (64% of the placements a
        # Philly replay asks for were asked before, of the same GPUs)
        placed: dict[tuple, tuple[tuple[int, ...], int] | None] = {}
        for job, is_on_time in chain(on_time, late):
            choice = self._choose(job, is_on_time, free, now, view, placed)
            if choice is not None:
                free.take(choice)
                placed.clear()
                plan.start.append((job, choice))
                if free.total == 0:
                    break
        return plan

    def _choose(
        self,
        job: JobView,
        on_time: bool,
        free: FreeGpus,
        now: float,
        view: PolicyView,
        placed: dict[tuple, tuple[tuple[int, ...], int] | None],
    ) -> tuple[int, ...] | None:
        """An on-time job: the fewest GPUs predicted to meet its deadline, or None (it waits:
        its allowance is not spent, and a placement started now that misses the deadline would
        lock the miss in, as GENIE never preempts or resizes). A late job or one without a
        deadline: the fastest placement now, or None if even that is predicted to take more
        than ``best_effort_slowdown`` times its best run time. ``placed``: the pass's
        placements by size and GPU types, with their node counts, as ``free`` stands."""
        p = self.predictions[job.job_id]
        deadline = job.spec.deadline_s if on_time else None  # on time: it has one
        fastest, fastest_end = None, math.inf
        slowest = math.inf  # for a best-effort job: the latest end it may start for
        if not on_time and self.best_effort_slowdown is not None:
            slowest = now + self.best_effort_slowdown * p.best_s(job)
        gpu_node = view.cluster.gpu_node
        types = job.spec.gpu_types
        for n in p.sizes:
            if n > free.total:
                break
            key = (n, types)
            if key in placed:
                found = placed[key]
            else:
                gpus = self.place(free, n, types)
                found = placed[key] = (
                    None if gpus is None else (gpus, len({gpu_node[g] for g in gpus}))
                )
            if found is None:
                continue
            gpus, nodes = found
            end = now + p.run_s(job, n, nodes)
            if deadline is not None:
                if end <= deadline:
                    return gpus
            elif end < fastest_end and end <= slowest:
                fastest, fastest_end = gpus, end
        return fastest


class GenieOracle(Genie):
    name = "genie-oracle"
    description = (
        "GENIE with exact predictions (the workload model): the policy without prediction error"
    )

    def __init__(
        self,
        seed: int = 0,
        placement: str = "best-fit",
        best_effort_slowdown: float | None = None,
    ) -> None:
        super().__init__("oracle", 0.0, seed, placement, best_effort_slowdown)


def deadline_first(job: JobView) -> tuple:
    """Earliest deadline first; jobs without one after, in arrival order."""
    deadline = job.spec.deadline_s
    return (deadline is None, deadline if deadline is not None else 0.0, job.spec.submit_time_s)


class Edf(QueuedPolicy):
    name = "edf"
    description = (
        "earliest deadline first; non-preemptive, at the requested size (backfill unless --scan "
        "strict)"
    )
    needs_deadlines = True

    def __init__(self, placement: str = "best-fit", scan: str = "backfill") -> None:
        super().__init__(deadline_first, placement, scan)
