"""Which trace jobs are elastic, and their bounds: a documented, seeded rule.

A fraction of the jobs (``elastic_fraction``), chosen by a draw from the seed and the job id
(:func:`dlsched.draws.uniform`: the choice does not depend on which other jobs are loaded), may
run on min..max GPUs:
min = max(1, requested // 2), max = min(2 x requested, MAX_ELASTIC_GPUS, the cluster's GPUs).
MAX_ELASTIC_GPUS is 64, the largest GPU count Pollux measured (the scaling model is fitted up
to there). Both factors (1/2 and 2) are the example the issue gives; they are parameters.
"""

from __future__ import annotations

from .draws import uniform
from .errors import SpecError
from .jobs import JobSpec

MAX_ELASTIC_GPUS = 64


def make_elastic(
    jobs: list[JobSpec],
    fraction: float,
    cluster_gpus: int,
    seed: int = 0,
    shrink: float = 0.5,
    grow: float = 2.0,
) -> list[JobSpec]:
    if not 0 <= fraction <= 1:
        raise SpecError("elastic_fraction", f"must be between 0 and 1, got {fraction!r}")
    if not (0 < shrink <= 1 and grow >= 1):
        raise SpecError("elastic_bounds", "shrink must be in (0, 1] and grow >= 1")
    if fraction == 0:
        return list(jobs)
    out = []
    for spec in jobs:
        if spec.elastic or uniform("elastic", seed, spec.job_id) >= fraction:
            out.append(spec)
            continue
        n = spec.num_gpus
        high = max(n, min(int(n * grow), MAX_ELASTIC_GPUS, cluster_gpus))
        out.append(spec.evolve(min_gpus=max(1, int(n * shrink)), max_gpus=high))
    return out
