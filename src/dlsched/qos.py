"""QoS targets (completion deadlines) for traces that have none (what is measured of them:
:func:`dlsched.metrics.qos_summary`).

A trace's own deadlines are used as given (class ``given``). Otherwise each job gets

    deadline = submit + factor x its solo run time at its request (the trace's duration)

with its class drawn with equal odds from ``DEADLINE_CLASSES`` and its factor uniform in that
class's range, both from a generator seeded by the seed and the job id (the same job gets the
same deadline whatever else is in the workload). The classes and ranges are chosen defaults, not
fitted to any paper's result; override them with ``classes``.
"""

from __future__ import annotations

import random

from .errors import SpecError
from .jobs import JobSpec

DEADLINE_CLASSES: dict[str, tuple[float, float]] = {
    "tight": (1.2, 1.5),  # hardly any waiting, and little slowdown, allowed
    "normal": (1.5, 3.0),
    "loose": (3.0, 6.0),
}


def assign_deadlines(
    jobs: list[JobSpec], seed: int = 0, classes: dict[str, tuple[float, float]] | None = None
) -> list[JobSpec]:
    """Jobs with a deadline each (those that had one keep it)."""
    classes = classes or DEADLINE_CLASSES
    for name, (low, high) in classes.items():
        if not 1.0 <= low <= high:
            raise SpecError(
                "deadline-classes",
                f"{name}: the factor range must satisfy 1 <= low <= high, got {low}..{high}",
            )
    names = sorted(classes)
    out = []
    for job in jobs:
        if job.deadline_s is not None:
            out.append(job if job.qos_class else job.evolve(qos_class="given"))
            continue
        rng = random.Random(f"{seed}:{job.job_id}")
        name = rng.choice(names)
        factor = rng.uniform(*classes[name])
        out.append(
            job.evolve(deadline_s=job.submit_time_s + factor * job.duration_s, qos_class=name)
        )
    return out
