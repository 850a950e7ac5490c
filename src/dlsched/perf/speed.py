"""The simulator's speed function from the performance model.

A job's trace duration is its run time at its requested size on the fewest nodes that hold it,
on V100s: there its speed is exactly 1. Elsewhere its speed is the ratio of iteration times,
reference over actual, with the global batch kept (per-GPU batch = global / GPUs) and the pace
of the slowest GPU type it holds. Jobs without a model keep speed 1.
"""

from __future__ import annotations

from ..cluster import Cluster
from ..jobs import JobState
from .model import REFERENCE_GPU, PerfModel, default_local_batch


class PerfSpeed:
    def __init__(self, perf: PerfModel, cluster: Cluster) -> None:
        self.perf = perf
        self.cluster = cluster
        self.largest_node = max(n.num_gpus for n in cluster.nodes)
        self._cache: dict[tuple, float] = {}

    def reference_nodes(self, gpus: int) -> int:
        return -(-gpus // self.largest_node)

    def __call__(self, job: JobState, gpus: tuple[int, ...]) -> float:
        spec = job.spec
        if spec.model is None:
            return 1.0
        nodes_of = self.cluster.gpu_node
        node_ids = {nodes_of[g] for g in gpus}
        nodes = self.cluster.nodes
        gpu_types = tuple(sorted({nodes[n].gpu_type for n in node_ids}))
        key = (spec.model, spec.num_gpus, spec.batch_size, len(gpus), len(node_ids), gpu_types)
        speed = self._cache.get(key)
        if speed is None:
            speed = self._speed(spec.model, spec.num_gpus, spec.batch_size, len(gpus), len(node_ids), gpu_types)
            self._cache[key] = speed
        return speed

    def _speed(self, model, requested, global_batch, gpus, node_count, gpu_types) -> float:
        perf = self.perf
        if global_batch is None:
            global_batch = default_local_batch(model) * requested
        ref = perf.iteration_s(model, requested, global_batch / requested,
                               self.reference_nodes(requested), gpu_type=REFERENCE_GPU)
        actual = max(perf.iteration_s(model, gpus, global_batch / gpus, node_count, gpu_type=t)
                     for t in gpu_types)
        return ref / actual
