"""The simulator's speed function from the performance model.

A job's trace duration is its run time at its requested size on the fewest nodes that hold it,
on V100s: there its speed is exactly 1. Elsewhere its speed is the ratio of iteration times,
reference over actual, with the global batch kept (per-GPU batch = global / GPUs) and the pace
of the slowest GPU type it holds, with gradient accumulation when it runs at a sub-batch.
Jobs without a model keep speed 1. It also answers, for GPU sharing, a job's memory per GPU and
its slowdown next to a partner.
"""

from __future__ import annotations

from collections.abc import Collection

from ..cluster import Cluster
from ..jobs import JobSpec, JobView
from .model import REFERENCE_GPU, PerfModel, default_local_batch
from .zoo import profile


class PerfSpeed:
    measures_real_runs = False

    def __init__(self, perf: PerfModel, cluster: Cluster) -> None:
        """The cluster's own GPU speeds fill the types ``perf`` has no override for; a type
        with neither a measurement nor a given speed is refused here, not mid-run."""
        if cluster.gpu_speeds:
            perf = PerfModel({**cluster.gpu_speeds, **perf.type_speeds})
        perf.check_types(n.gpu_type for n in cluster.nodes)
        self.perf = perf
        self.cluster = cluster
        self._cache: dict[tuple, float] = {}
        self._memory: dict[tuple, float | None] = {}  # memory_mib's answers

    def reference_nodes(self, gpus: int) -> int:
        return self.cluster.min_nodes_for(gpus)

    def __call__(self, job: JobView, gpus: tuple[int, ...]) -> float:
        spec = job.spec
        if spec.model is None:
            return 1.0
        nodes_of, nodes = self.cluster.gpu_node, self.cluster.nodes
        first = nodes_of[gpus[0]]
        for g in gpus:
            if nodes_of[g] != first:  # spread over nodes
                node_ids = {nodes_of[g] for g in gpus}
                node_count = len(node_ids)
                gpu_types = tuple(sorted({nodes[n].gpu_type for n in node_ids}))
                break
        else:  # on one node (most placements): no sets to make
            node_count, gpu_types = 1, (nodes[first].gpu_type,)
        key = (
            spec.model,
            spec.num_gpus,
            spec.batch_size,
            len(gpus),
            node_count,
            gpu_types,
            job.accumulation,
        )
        speed = self._cache.get(key)
        if speed is None:
            speed = self._speed(spec, len(gpus), node_count, gpu_types, job.accumulation)
            self._cache[key] = speed
        return speed

    def spread_speed(self, job: JobView, gpus: int, gpu_types: Collection[str]) -> float | None:
        """The speed of any placement over more than one node: the synchronization the model
        fits is one curve for all of them (``ScalingFit.sync_s``), and the slowest type sets
        the pace (more types, no faster)."""
        spec = job.spec
        if spec.model is None:
            return None
        # (``__call__``'s key for a placement over two nodes, in its cache: the same speed;
        # ``__call__`` builds its key inline, as it is asked at every start)
        key = (
            spec.model,
            spec.num_gpus,
            spec.batch_size,
            gpus,
            2,
            tuple(sorted(gpu_types)),
            job.accumulation,
        )
        speed = self._cache.get(key)
        if speed is None:
            speed = self._cache[key] = self._speed(spec, gpus, 2, key[5], job.accumulation)
        return speed

    @staticmethod
    def global_batch(spec: JobSpec) -> float:
        if spec.batch_size is not None:
            return spec.batch_size
        return default_local_batch(spec.model) * spec.num_gpus

    def _speed(
        self,
        spec: JobSpec,
        gpus: int,
        node_count: int,
        gpu_types: Collection[str],
        accumulation: int,
    ) -> float:
        perf, model, requested = self.perf, spec.model, spec.num_gpus
        if model is None:  # (its callers speak for a job without one: 1.0 or None)
            raise ValueError(f"job {spec.job_id} has no model to measure its speed by")
        batch = self.global_batch(spec)
        ref = perf.iteration_s(
            model,
            requested,
            batch / requested,
            self.reference_nodes(requested),
            gpu_type=REFERENCE_GPU,
        )
        actual = max(
            perf.iteration_s(
                model,
                gpus,
                batch / gpus / accumulation,
                node_count,
                accumulation=accumulation,
                gpu_type=t,
            )
            for t in gpu_types
        )
        return ref / actual

    def speed_at_size(self, spec: JobSpec, gpus: int) -> float | None:
        """Speed on ``gpus`` V100s on the fewest nodes, global batch kept (1.0 at the request);
        None without a model."""
        if spec.model is None:
            return None
        key = ("size", spec.model, spec.num_gpus, spec.batch_size, gpus)
        speed = self._cache.get(key)
        if speed is None:
            speed = self._cache[key] = self._speed(
                spec, gpus, self.reference_nodes(gpus), (REFERENCE_GPU,), 1
            )
        return speed

    def iteration_s(self, spec: JobSpec, gpus: int, nodes: int, local_batch: float) -> float | None:
        if spec.model is None:
            return None
        # kept: GENIE's profiling asks the same few placements of every job of a model and batch
        key = ("iteration", spec.model, gpus, nodes, local_batch)
        seconds = self._cache.get(key)
        if seconds is None:
            seconds = self._cache[key] = self.perf.iteration_s(
                spec.model, gpus, local_batch, nodes, gpu_type=REFERENCE_GPU
            )
        return seconds

    def accumulation_cost(self, spec: JobSpec, accumulation: int) -> float:
        """How much longer an optimizer step takes at its requested size with gradient
        accumulation over ``accumulation`` sub-batches (1.0 for none)."""
        if spec.model is None or accumulation == 1:
            return 1.0
        batch = self.global_batch(spec) / spec.num_gpus
        nodes = self.reference_nodes(spec.num_gpus)
        one = self.perf.iteration_s(spec.model, spec.num_gpus, batch, nodes)
        return (
            self.perf.iteration_s(
                spec.model, spec.num_gpus, batch / accumulation, nodes, accumulation=accumulation
            )
            / one
        )

    def memory_mib(self, spec: JobSpec, gpus: int, accumulation: int = 1) -> float | None:
        """Memory per GPU at the sub-batch (global batch / GPUs / accumulation); None when
        the job has no model or its model no measured footprint."""
        if spec.model is None:
            return None
        # (asked at every start, by the plan check: the model's arithmetic is several calls)
        key = (spec.model, spec.batch_size, spec.num_gpus, gpus, accumulation)
        try:
            return self._memory[key]
        except KeyError:  # (its first time)
            batch = self.global_batch(spec) / gpus / accumulation
            mib = self._memory[key] = self.perf.memory_mib(spec.model, batch)
            return mib

    def checkpoint_mib(self, spec: JobSpec) -> float | None:
        """Its checkpoint's size, or None when the model's parameter count is unknown."""
        return None if spec.model is None else profile(spec.model).checkpoint_mib

    def slowdown(self, job: JobView, partner: JobView) -> float | None:
        """The job's slowdown next to ``partner`` on one GPU, or None if not measured."""
        if job.spec.model is None or partner.spec.model is None:
            return None
        pair = self.perf.colocation(job.spec.model, partner.spec.model)
        return None if pair is None else pair[0]
