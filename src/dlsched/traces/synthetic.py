"""A seeded synthetic workload: Poisson arrivals, log-normal durations, and GPU counts drawn
from the Philly mix.

Defaults are taken from the bundled Philly trace (82,247 jobs, computed from
``data/traces/philly/philly_jobs.csv.gz``): its GPU-count shares, and a log-normal fitted to
its durations (median 1,144 s; standard deviation of log-duration 2.156). The arrival rate is set
from the nominal load: rate = load x cluster GPUs / mean GPU-seconds per job of the
distributions. A finite draw of Philly's heavy tail offers a little less (:func:`offered_load`,
measured at ``load=0.9``: 0.812 for 2,000 jobs on 512 GPUs, seed 4; 0.865 for 1,000,000 on
16,384, seed 0); ``realized_load`` instead scales the drawn jobs' arrival times so that their
offered load is exactly that. (That those 1,000,000 jobs kept 2048 x 8 GPUs only 24.7% busy,
issue 26's measurement, is mostly the drain, not the offered load: they arrive over 12 days and
the longest of them runs 30 days, and busy time is averaged over the whole run.)
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence

from ..errors import SpecError
from ..jobs import MAX_TIME_S, JobSpec, finite_number
from .base import Trace

# Bounds on what one draw may build (chosen: 10x the million jobs issue 26's benchmark draws,
# about 1 KiB of memory a job; a tenant's name each): past them, an error instead of a process
# that fills memory
MAX_JOBS = 10_000_000
MAX_TENANTS = 100_000
# GPU-count shares of the Philly trace (count of jobs per size / 82,247).
PHILLY_GPU_MIX = {1: 76627, 2: 1818, 4: 1870, 8: 1643, 12: 7, 16: 199, 24: 7, 32: 67, 64: 6, 128: 3}
PHILLY_MEDIAN_DURATION_S = 1144.0
PHILLY_LOG_SIGMA = 2.156
# Chosen: the widest spread of durations (Philly's is 2.156); beyond about 37 the log-normal's
# mean overflows a float
MAX_LOG_SIGMA = 10.0


def synthetic(
    num_jobs: int = 1000,
    cluster_gpus: int = 64,
    load: float = 0.8,
    seed: int = 0,
    median_duration_s: float = PHILLY_MEDIAN_DURATION_S,
    log_sigma: float = PHILLY_LOG_SIGMA,
    max_duration_s: float = 30 * 86400,
    tenants: int = 4,
    gpu_mix: dict[int, float] | str | None = None,
    realized_load: float | None = None,
) -> Trace:
    _integer("num_jobs", num_jobs, MAX_JOBS)
    _integer("cluster_gpus", cluster_gpus, None)
    _integer("tenants", tenants, MAX_TENANTS)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SpecError("seed", f"must be an integer, got {seed!r}")
    for name, value, low, inclusive in (
        ("load", load, 0, False),
        ("realized_load", realized_load, 0, False),
        ("median_duration_s", median_duration_s, 0, False),
        ("max_duration_s", max_duration_s, 1, True),
        ("log_sigma", log_sigma, 0, True),
    ):
        if value is not None and not _finite_above(value, low, inclusive):
            bound = f"{'>=' if inclusive else '>'} {low}"
            raise SpecError(name, f"must be a finite number {bound}, got {value!r}")
    for name, value, most in (
        ("median_duration_s", median_duration_s, MAX_TIME_S),
        ("max_duration_s", max_duration_s, MAX_TIME_S),
        ("log_sigma", log_sigma, MAX_LOG_SIGMA),
    ):
        if value > most:
            raise SpecError(name, f"must be at most {most:g}, got {value!r}")
    given_mix = parse_gpu_mix(gpu_mix) if gpu_mix is not None else PHILLY_GPU_MIX
    mix = {g: w for g, w in given_mix.items() if g <= cluster_gpus}
    if not mix:
        raise SpecError("gpu_mix", f"no job size fits a {cluster_gpus}-GPU cluster")
    rng = random.Random(seed)
    sizes, weights = list(mix), list(mix.values())
    mu = math.log(median_duration_s)
    # the rate uses the log-normal's mean, ignoring the (rarely hit) max_duration_s cap
    mean_gpus = sum(g * w for g, w in mix.items()) / sum(weights)
    mean_duration = median_duration_s * math.exp(log_sigma**2 / 2)
    rate = load * cluster_gpus / (mean_gpus * mean_duration)
    t = 0.0
    draws = []  # (arrival, duration, GPUs, tenant), drawn in this order for each job
    for _ in range(num_jobs):
        t += rng.expovariate(rate)
        duration = min(max_duration_s, max(1.0, rng.lognormvariate(mu, log_sigma)))
        draws.append(
            (t, round(duration, 3), rng.choices(sizes, weights)[0], rng.randrange(tenants))
        )
    name = f"synthetic(n={num_jobs},load={load},seed={seed})"
    stretch = 1.0
    if realized_load is not None:
        stretch = _offered(draws, cluster_gpus) / realized_load
        name = f"synthetic(n={num_jobs},realized_load={realized_load},seed={seed})"
    if draws and draws[-1][0] * stretch > MAX_TIME_S:
        which = "realized_load" if realized_load is not None else "load"
        raise SpecError(
            which,
            f"the last of {num_jobs:,} jobs would arrive after {MAX_TIME_S:g} s (the largest "
            "time a job may have): give a larger load, or shorter or fewer jobs",
        )
    names = [f"tenant-{k}" for k in range(tenants)]
    jobs = [
        JobSpec(f"syn-{k}", t * stretch, gpus, duration, names[tenant])
        for k, (t, duration, gpus, tenant) in enumerate(draws)
    ]
    trace = Trace(name, jobs)
    trace.rows = num_jobs
    return trace


def _integer(name: str, value: object, most: int | None) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < 1
        or (most is not None and value > most)
    ):
        bound = f"1..{most:,}" if most is not None else ">= 1"
        raise SpecError(name, f"must be an integer {bound}, got {value!r}")


def _finite_above(value: object, low: float, inclusive: bool = False) -> bool:
    """Whether ``value`` is a finite number above ``low`` (or equal to it, ``inclusive``)."""
    if not finite_number(value):
        return False
    return value >= low if inclusive else value > low


def parse_gpu_mix(mix: object) -> dict[int, float]:
    """Job sizes and their weights: a mapping, or ``"GPUS:WEIGHT,..."`` (``--trace-param
    "gpu_mix=1:70,2:20,4:10"``)."""
    if isinstance(mix, str):
        try:
            pairs = [part.split(":") for part in mix.split(",")]
            mix = {int(g): float(w) for g, w in pairs}
        except ValueError:
            raise SpecError(
                "gpu_mix", f"must be GPUS:WEIGHT pairs, e.g. 1:70,2:20,4:10, got {mix!r}"
            ) from None
    if not isinstance(mix, dict) or not mix:
        raise SpecError("gpu_mix", f"must map job sizes to weights, got {mix!r}")
    for g, w in mix.items():
        if isinstance(g, bool) or not isinstance(g, int) or g < 1 or not _finite_above(w, 0):
            raise SpecError("gpu_mix", f"needs sizes >= 1 and finite weights > 0, got {g!r}: {w!r}")
    if not math.isfinite(sum(mix.values())):
        raise SpecError("gpu_mix", "its weights must have a finite sum (they are relative)")
    return mix


def offered_load(jobs: list[JobSpec], cluster_gpus: int) -> float:
    """GPU-seconds the jobs ask for over the GPU-seconds the cluster has from time 0 to the last
    arrival: the load they offer (above 1, the queue can only grow)."""
    return _offered(((j.submit_time_s, j.duration_s, j.num_gpus) for j in jobs), cluster_gpus)


def _offered(jobs: Iterable[Sequence], cluster_gpus: int) -> float:
    """:func:`offered_load` of (arrival, duration, GPUs, ...) rows."""
    span = work = 0.0
    for arrival, duration, gpus, *_ in jobs:
        span, work = max(span, arrival), work + gpus * duration
    return work / (span * cluster_gpus) if span > 0 else math.inf
