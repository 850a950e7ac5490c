"""One workload preparation for every entry point (the CLI, the benchmarks, the experiments):
load and validate a trace, build the cluster, give jobs a model, replay at another arrival rate,
make a share of them elastic, keep the first N, and check that every job fits the cluster."""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cluster import Cluster, load_cluster
from .collector import fewer_collections
from .elastic_jobs import make_elastic
from .errors import SpecError
from .jobs import JOB_SPEC_FIELDS, MAX_TIME_S, JobSpec, specs_from_columns
from .state.cluster_state import unplaceable
from .traces import load_trace
from .traces.base import Trace
from .workload_model import TRACE_MODEL, WorkloadModel


@dataclass(slots=True)
class Workload:
    trace: Trace  # its name and the rows it dropped (and why)
    cluster: Cluster
    jobs: list[JobSpec]  # by submit time
    perf: bool  # job speeds from the performance model
    elastic_fraction: float = 0.0  # share of jobs made elastic by the seeded rule
    seeded: bool = True  # whether making it drew anything from its seed (draws_from_seed)

    def __reduce__(self) -> tuple:
        # pickled with its jobs as columns (numbers in arrays): a cached workload of a million
        # jobs loads without a tuple of arguments per job held until the end (workload_cache)
        columns = [_column([getattr(j, name) for j in self.jobs]) for name in JOB_SPEC_FIELDS]
        return (
            _from_columns,
            (self.trace, self.cluster, columns, self.perf, self.elastic_fraction, self.seeded),
        )

    def model(self) -> WorkloadModel:
        """A fresh workload model for one simulation (the performance model keeps caches); a
        server's history replays with the runtime's model and its measurements."""
        if self.trace.replay is not None:
            from .replay import replay_model

            return replay_model(self.trace.replay)
        if not self.perf:
            return TRACE_MODEL
        from .perf.model import PerfModel
        from .perf.speed import PerfSpeed

        return PerfSpeed(PerfModel(), self.cluster)


def _column(values: list) -> array | list:
    """A column of job fields: an array when every value is a float, or every one an int."""
    for code, kind in (("d", float), ("q", int)):
        if values and all(type(v) is kind for v in values):
            try:
                return array(code, values)
            except OverflowError:
                break
    return values


def _from_columns(
    trace: Trace,
    cluster: Cluster,
    columns: list,
    perf: bool,
    elastic_fraction: float,
    seeded: bool,
) -> Workload:
    # validated when prepared; the cache reads back only an entry whose checksum and key (the
    # package's fingerprint) match, so these are the specs this package wrote
    jobs = specs_from_columns(columns)
    return Workload(trace, cluster, jobs, perf, elastic_fraction, seeded)


def _arriving_at(spec: JobSpec, submit_s: float) -> JobSpec:
    """The job arriving at ``submit_s`` instead, with its deadline (a trace's own) as long after
    its arrival as before: a replay at another arrival rate keeps each job's allowance."""
    if spec.deadline_s is None:
        return spec.evolve(submit_time_s=submit_s)
    deadline = submit_s + (spec.deadline_s - spec.submit_time_s)
    if deadline > MAX_TIME_S:
        raise SpecError(
            "load",
            f"it would put job {spec.job_id}'s deadline after {MAX_TIME_S:g} s: give a larger one",
        )
    return spec.evolve(submit_time_s=submit_s, deadline_s=deadline)


DEFAULT_CLUSTER = "64x8:V100"


def _with_profiles(jobs: list[JobSpec], loaded: Trace, skip_invalid: bool) -> list[JobSpec]:
    """The jobs whose model (if they name one) the performance model has a profile of: one that
    has none is refused at once, or with ``skip_invalid`` dropped and counted (else its first
    start would fail, long after the trace was read, as if the policy's plan were wrong)."""
    from .perf.zoo import profile

    kept = []
    for j in jobs:
        if j.model is not None:
            try:
                profile(j.model)
            except SpecError as e:
                why = f"job '{j.job_id}': {e.reason}"
                if not skip_invalid:
                    raise SpecError(
                        "model", f"{why}; --skip-invalid drops such jobs", source=loaded.name
                    ) from None
                loaded.drop("no performance profile", why)
                continue
        kept.append(j)
    return kept


def draws_from_seed(
    trace: str, draws_models: bool, elastic_fraction: float, deadlines: bool
) -> bool:
    """Whether a workload made with these inputs draws anything from its seed: a synthetic
    trace's jobs, models (``draws_models``: the performance model's for jobs without one; a
    server's history names its own), the elastic jobs and the deadlines."""
    return trace == "synthetic" or draws_models or elastic_fraction > 0 or deadlines


def prepare(
    trace: str,
    cluster: str | Cluster | None,
    *,
    fmt: str | None = None,
    mapping: str | None = None,
    trace_params: dict | None = None,
    skip_invalid: bool = False,
    perf: bool = True,
    seed: int = 0,
    load: float = 1.0,
    elastic_fraction: float = 0.0,
    limit: int | None = None,
    deadlines: bool = False,
    cache_dir: str | Path | None = None,
) -> Workload:
    """``cache_dir``: keep the prepared workload there, and read it from there when the same
    inputs were prepared before (:mod:`dlsched.workload_cache`; None: no cache). ``load``
    replays the trace with every arrival time after the first divided by it (2.0: twice the
    arrival rate; a trace's own deadlines move with their jobs, each as long after its arrival
    as before); ``deadlines`` gives jobs without one a generated deadline
    (:mod:`dlsched.qos`). Jobs larger than the cluster stop with an error naming the first,
    or with ``skip_invalid`` are dropped and counted in ``trace.dropped``. ``cluster`` None is
    :data:`DEFAULT_CLUSTER`, except for a server's history, which replays on the server's own."""
    options: dict[str, Any] = dict(
        fmt=fmt,
        mapping=mapping,
        trace_params=trace_params,
        skip_invalid=skip_invalid,
        perf=perf,
        seed=seed,
        load=load,
        elastic_fraction=elastic_fraction,
        limit=limit,
        deadlines=deadlines,
    )
    with fewer_collections():
        if cache_dir is None:
            return _prepare(trace, cluster, **options)
        from . import workload_cache

        try:  # before the work it would keep: a run used to end in a traceback at the store
            (Path(cache_dir) / "workloads").mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SpecError(
                "cache_dir",
                f"cannot keep prepared workloads in {cache_dir}: {e.strerror} "
                "(--cache-dir DIR for another, --no-cache for none)",
            ) from None
        cluster_key = cluster.spec() if isinstance(cluster, Cluster) else cluster
        path = workload_cache.entry_path(
            Path(cache_dir), {"trace": trace, "cluster": cluster_key, **options}
        )
        workload = workload_cache.load(path, Workload)
        if workload is None:
            workload = _prepare(trace, cluster, **options)
            workload_cache.store(path, workload)
        return workload


def _prepare(
    trace: str,
    cluster: str | Cluster | None,
    *,
    fmt: str | None,
    mapping: str | None,
    trace_params: dict | None,
    skip_invalid: bool,
    perf: bool,
    seed: int,
    load: float,
    elastic_fraction: float,
    limit: int | None,
    deadlines: bool,
) -> Workload:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        # (a slice would take -5 as "all but the last 5", 0 as none)
        raise SpecError("limit", f"must be an integer >= 1, got {limit!r}")
    params = dict(trace_params or {})
    if isinstance(cluster, str):
        cluster = load_cluster(cluster)
    if trace == "synthetic":  # its load is relative to the cluster it runs on
        params.setdefault("seed", seed)
        params.setdefault(
            "cluster_gpus", (cluster or load_cluster(DEFAULT_CLUSTER)).pool_gpus("training")
        )
    loaded = load_trace(trace, fmt=fmt, skip_invalid=skip_invalid, mapping=mapping, **params)
    if cluster is None:
        if loaded.replay is not None:
            raise SpecError(
                "cluster",
                "a server's history replays on the server's cluster: give --cluster "
                "as 'dlsched export' printed it",
            )
        cluster = load_cluster(DEFAULT_CLUSTER)
    jobs = sorted(loaded.jobs, key=lambda j: j.submit_time_s)
    draws_models = False  # (a server's history names its jobs' models)
    if perf and loaded.replay is None:
        draws_models = any(j.model is None for j in jobs)
        from .perf.assign import assign_models
        from .perf.model import PerfModel

        jobs = assign_models(
            _with_profiles(jobs, loaded, skip_invalid), PerfModel(), cluster, seed=seed
        )
    if load != 1.0:
        if not load > 0:
            raise SpecError("load", f"must be a number > 0, got {load!r}")
        start = jobs[0].submit_time_s if jobs else 0.0
        if jobs and start + (jobs[-1].submit_time_s - start) / load > MAX_TIME_S:
            raise SpecError(
                "load",
                f"{load!r} would put the last arrival after {MAX_TIME_S:g} s: give a larger one",
            )
        jobs = [_arriving_at(j, start + (j.submit_time_s - start) / load) for j in jobs]
    if elastic_fraction:
        jobs = make_elastic(jobs, elastic_fraction, cluster.pool_gpus("training"), seed=seed)
    if limit is not None:
        jobs = jobs[:limit]
    if deadlines:
        from .qos import assign_deadlines

        jobs = assign_deadlines(jobs, seed=seed)
    problems = [(j, unplaceable(j, cluster)) for j in jobs]
    too_big = [(j, why) for j, why in problems if why]
    if too_big:
        if not skip_invalid:
            raise SpecError(
                "num_gpus",
                f"{too_big[0][1]} ({len(too_big)} such jobs; --skip-invalid drops them)",
                source=loaded.name,
            )
        loaded.dropped["larger than the cluster"] = len(too_big)
        jobs = [j for j, why in problems if not why]
    if not jobs:  # (a summary of no jobs is a table of blanks, and exit status 0)
        dropped = (
            f" ({loaded.dropped_total:,} rows dropped: {loaded.dropped})" if loaded.dropped else ""
        )
        raise SpecError("trace", f"has no jobs to run{dropped}", source=loaded.name)
    loaded.jobs = []  # the workload's are ``jobs``: the trace's own are not kept (nor cached)
    seeded = draws_from_seed(trace, draws_models, elastic_fraction, deadlines)
    return Workload(loaded, cluster, jobs, perf, elastic_fraction, seeded)
