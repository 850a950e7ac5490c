"""A model per job for traces that carry none (Philly, Alibaba, generic CSV, synthetic).

Seeded rule, after Pollux's workload construction (Qiao et al., OSDI'21, Table 1): a job's size
class by GPU-hours (its GPUs x trace duration) picks the applications of that class, and a draw
from the seed and the job id (:func:`dlsched.draws.uniform`) picks one of them (so a job's model
does not depend on which other jobs are loaded, or in which order): small (< 1 GPU-hour)
cifar10 or ncf, medium (1-10) deepspeech2 or bert, large (10-100) yolov3, extra-large (>= 100)
imagenet. The job gets that
model's default per-GPU batch and the iteration count that makes its run alone at its requested
size on V100s last exactly its trace duration. A job that names its model but no batch gets the
same default batch (and that iteration count unless it gives one): without a batch its speed on
other sizes is unknown, and GENIE could not mold it.
"""

from __future__ import annotations

from ..cluster import Cluster
from ..draws import uniform
from ..jobs import JobSpec
from .model import REFERENCE_GPU, PerfModel, default_local_batch

SIZE_CLASSES = (
    (1.0, ("cifar10", "ncf")),
    (10.0, ("deepspeech2", "bert")),
    (100.0, ("yolov3",)),
    (float("inf"), ("imagenet",)),
)


def model_for(gpu_hours: float, job_id: str, seed: int) -> str:
    for limit, models in SIZE_CLASSES:
        if gpu_hours < limit:
            return models[int(uniform("model", seed, job_id) * len(models))]
    raise AssertionError("unreachable: the last class has no limit")


def assign_models(
    jobs: list[JobSpec], perf: PerfModel, cluster: Cluster, seed: int = 0
) -> list[JobSpec]:
    """Give every job without a model one, and every job without a batch its model's default
    (jobs with both are returned unchanged)."""
    out = []
    for spec in jobs:
        if spec.model is not None and spec.batch_size:
            out.append(spec)
            continue
        model = spec.model or model_for(spec.num_gpus * spec.duration_s / 3600, spec.job_id, seed)
        local = default_local_batch(model)
        step = perf.iteration_s(
            model,
            spec.num_gpus,
            local,
            cluster.min_nodes_for(spec.num_gpus),
            gpu_type=REFERENCE_GPU,
        )
        kept = spec.model is not None and spec.iterations  # its own count, with its own model
        iterations = spec.iterations if kept else max(1, round(spec.duration_s / step))
        # (valid by construction: a model the spec named or one of the table's, a batch and
        # a count of at least 1)
        out.append(
            spec.evolve_unchecked(
                model=model,
                batch_size=max(1, round(local * spec.num_gpus)),
                iterations=iterations,
            )
        )
    return out
