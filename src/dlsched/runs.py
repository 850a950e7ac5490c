"""One simulation run, composed the same way for ``dlsched simulate``/``compare`` and for
Python callers (``dlsched.simulate``): the policy (a name, ``module:Class`` or an object), the
quota stage before it, the inference pool's demand, the simulator's costs; then the summary
and per-job rows.

    import dlsched
    workload = dlsched.load_workload("philly", "64x8:V100", limit=2000)
    run = dlsched.simulate(workload, "tiresias")
    run.summary["mean_jct_s"], run.jobs[0]["jct_s"]
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .cluster import Cluster
from .errors import SpecError, option_name
from .inference import DEFAULT_PEAK_SHARE, DemandCycle
from .node_events import NodeEvent, read_node_events
from .policies.base import Policy
from .prepare import Workload
from .sim.engine import SimConfig, SimResult, Simulator


class Run:
    """A finished simulation: ``summary`` (the fields of summary.json) and ``jobs`` (one dict
    per job, the columns of jobs.csv; made on first use: a million of them take gigabytes)."""

    def __init__(self, result: SimResult, summary: dict) -> None:
        self.result = result
        self.summary = summary

    @functools.cached_property
    def jobs(self) -> list[dict]:
        from .metrics import job_rows

        return job_rows(self.result.jobs)

    def dataframe(self) -> Any:
        """The per-job rows as a pandas DataFrame (pandas is not a dependency of dlsched)."""
        try:
            import pandas
        except ImportError:
            raise ImportError("Run.dataframe() needs pandas: pip install pandas") from None
        return pandas.DataFrame(self.jobs)

    def write(self, out_dir: str | Path) -> None:
        """summary.json, jobs.csv and timeseries.csv (and tenants_timeseries.csv) in
        ``out_dir``, as ``dlsched simulate --out`` writes them."""
        from .metrics import write_outputs

        # the rows as dicts if a caller made them already; else jobs.csv is written from the jobs
        write_outputs(self.result, out_dir, self.summary, self.__dict__.get("jobs"))


def simulate(
    workload: Workload,
    policy: str | Policy = "fifo",
    *,
    params: dict | None = None,
    quotas: str | None = None,
    hard_quotas: bool = False,
    inference_demand: str | None = None,
    peak_share: float | None = None,
    node_events: str | Path | Sequence[NodeEvent] = (),
    progress: Callable[[int], None] | None = None,
    **costs: Any,
) -> Run:
    """Simulate ``policy`` on a prepared workload (:func:`dlsched.load_workload`).

    ``policy`` is a built-in name, ``package.module:ClassName`` or a policy object (a fresh
    one per run: policies keep state); ``params`` go to a named policy's constructor.
    ``quotas`` runs the quota stage before it (``equal``, ``philly-vc`` or a YAML file;
    ``hard_quotas``: no borrowing). ``inference_demand`` (default ``genai``) and ``peak_share``
    drive the inference pool (``none``: it never reclaims). ``node_events``: nodes going down
    and up, cordoned, drained and uncordoned, as (time_s, kind, node) or a CSV file of them
    (:mod:`dlsched.node_events`). An option that would do nothing
    here (``hard_quotas`` without ``quotas``; an inference option on a cluster without an
    inference pool) is an error naming it. Other keywords are
    :class:`~dlsched.sim.SimConfig` fields (``restart_overhead_s``, ``schedule_interval_s``...)."""
    from .metrics import summarize
    from .policies.catalog import make_policy

    trace, cluster, jobs = workload.trace, workload.cluster, workload.jobs
    _check_options(cluster, quotas, hard_quotas, inference_demand, peak_share, costs)
    if isinstance(policy, str):
        name, policy = policy, make_policy(policy, **(params or {}))
    elif params:
        raise TypeError("params go with a policy name; configure a policy object yourself")
    else:
        name = policy.name or type(policy).__name__
    if trace.replay is None:  # (a server's history: whatif checks the policies it did not run)
        check_policy_inputs(policy, name, PolicyInputs.of(workload))
    else:
        from .replay import with_profiling

        jobs = with_profiling(jobs, trace.replay, policy)
    admission = None
    if quotas:
        from .admission import QuotaAdmission
        from .tenant_quotas import load_tenants

        tenants = sorted({j.tenant for j in jobs})
        config = load_tenants(quotas, tenants, cluster.pool_gpus("training"))
        # (a quota source that names none of them would be the default's alone: a mistake,
        # but for a server's history, replayed under the quotas the server had)
        if trace.replay is None and config.tenants and not config.tenants.keys() & set(tenants):
            shown = ", ".join(tenants[:5]) + (", ..." if len(tenants) > 5 else "")
            raise SpecError(
                "quotas",
                f"{config.source} names none of this workload's tenants ({shown}): each would "
                "have its default quota",
            )
        admission = QuotaAdmission(config.without_borrowing() if hard_quotas else config)
    if isinstance(node_events, str | Path):
        node_events = read_node_events(node_events)
    sim_config = SimConfig(
        node_events=node_events,
        inference_demand=_demand(
            cluster,
            inference_demand or "genai",
            DEFAULT_PEAK_SHARE if peak_share is None else peak_share,
            costs,
        ),
        **costs,
    )
    started = time.perf_counter()
    result = Simulator(
        cluster,
        jobs,
        policy,
        sim_config,
        workload=workload.model(),
        progress=progress,
        admission=admission,
    ).run()
    wall = time.perf_counter() - started
    summary = summarize(result)
    if trace.replay is not None:  # a server's history: the replay against what it measured
        from .replay import calibration

        submitted = {j.job_id: j.submit_time_s for j in workload.jobs}  # as exported
        summary["calibration"] = calibration(trace.replay, result.jobs, submitted)
    summary.update(
        {
            "policy": name,
            "params": policy.params()
            if admission is None
            else {**policy.params(), "quotas": admission.config.source},
            "trace": trace.name,
            "cluster": cluster.describe(),
            "dropped": trace.dropped,
            "wall_s": round(wall, 3),
            "performance_model": workload.perf,
            "elastic_fraction": workload.elastic_fraction,
            # the events counted, not listed (a file may hold a million)
            "config": {**dataclasses.asdict(sim_config), "node_events": len(node_events)},
        }
    )
    return Run(result, summary)


@dataclasses.dataclass(frozen=True)
class PolicyInputs:
    """What a policy's mechanisms act on in a run; None where it is not known yet (a sweep's
    spec is checked before its workloads are made)."""

    perf: bool  # job speeds, memory and slowdowns from the performance model
    inference_pool: bool | None  # the cluster has inference servers to lend
    deadlines: bool | None = None  # some job has a deadline
    elastic: bool | None = None  # some job is elastic
    tenants: int | None = None  # how many tenants have jobs

    @classmethod
    def of(cls, workload: Workload) -> PolicyInputs:
        jobs = workload.jobs
        return cls(
            workload.perf,
            workload.cluster.pool_gpus("inference") > 0,
            any(j.deadline_s is not None for j in jobs),
            any(j.elastic for j in jobs),
            len({j.tenant for j in jobs}),
        )


def check_policy_inputs(policy: Policy, name: str, inputs: PolicyInputs) -> None:
    """A policy refuses a run that leaves one of its mechanisms nothing to act on: it would run
    as something else under its name (a server's history replayed under the policy the server
    ran is not asked: its jobs are as they ran). GENIE and EDF without deadlines run as arrival
    order (GENIE shrinking jobs to what is idle), an elastic policy without elastic jobs as its
    order alone, a sharing policy without the performance model as SJF (an elastic one resizes
    jobs whose speed does not change), fair share between one tenant's jobs as arrival order,
    Aryl without an inference pool as ``aryl-no-loan``. What ``inputs`` does not know yet is
    not asked."""
    if getattr(policy, "needs_deadlines", False) and inputs.deadlines is False:
        raise SpecError(
            "deadlines",
            f"policy {name!r} schedules by deadlines and no job of this workload has one: "
            "give the trace a deadline column, or draw them (--deadlines; deadlines=True)",
        )
    if getattr(policy, "resizes_elastic", False) and inputs.elastic is False:
        raise SpecError(
            "elastic_fraction",
            f"policy {name!r} resizes elastic jobs and no job of this workload is elastic: it "
            "would resize nothing; draw some (--elastic-fraction F; elastic_fraction=F)",
        )
    if getattr(policy, "shares_gpus", False) and not inputs.perf:
        raise SpecError(
            "perf",
            f"policy {name!r} shares GPUs and this run has no performance model (--no-perf): "
            "no job's memory or co-location slowdown is known, so it would share nothing",
        )
    if getattr(policy, "resizes_elastic", False) and not inputs.perf:
        raise SpecError(
            "perf",
            f"policy {name!r} resizes elastic jobs and this run has no performance model "
            "(--no-perf): a job would run at its trace speed on any number of GPUs",
        )
    if getattr(policy, "between_tenants", False) and inputs.tenants == 1:
        raise SpecError(
            "tenant",
            f"policy {name!r} shares the GPUs between tenants and this workload has one: it "
            "would share nothing; give the trace a tenant column (a CSV's: --map tenant=COLUMN)",
        )
    if getattr(policy, "loans_servers", False) and inputs.inference_pool is False:
        raise SpecError(
            "cluster",
            f"policy {name!r} borrows idle inference servers and the cluster has none: it would "
            "borrow nothing; add an inference pool (e.g. 64x8:V100,16x8:V100@inference) or "
            "name its ablation without loans (aryl-no-loan, aryl-base)",
        )


def _check_options(
    cluster: Cluster,
    quotas: object,
    hard_quotas: bool,
    inference_demand: str | None,
    peak_share: float | None,
    costs: dict,
) -> None:
    """Options that would change nothing are errors: the user meant something else."""
    if hard_quotas and not quotas:
        raise SpecError("hard_quotas", "does nothing without quotas: give --quotas too")
    if not cluster.pool_gpus("inference"):
        given = [
            name
            for name, value in (
                ("inference_demand", inference_demand),
                ("peak_share", peak_share),
                ("reclaim_notice_s", costs.get("reclaim_notice_s")),
            )
            if value is not None
        ]
        if given:
            option = option_name(given[0])
            raise SpecError(
                given[0],
                f"{option} does nothing: the cluster has no inference pool (add one to "
                "--cluster, e.g. 64x8:V100,16x8:V100@inference)",
            )


def _demand(cluster: Cluster, source: str, peak_share: float, costs: dict) -> DemandCycle | None:
    """The inference pool's demand cycle, or None (no inference pool, or ``none``)."""
    servers = sum(1 for n in cluster.nodes if n.pool == "inference")
    if not servers or source == "none":
        return None
    from .inference import DEFAULT_RECLAIM_NOTICE_S, demand_cycle, load_curve

    notice = costs.get("reclaim_notice_s", DEFAULT_RECLAIM_NOTICE_S)
    return demand_cycle(load_curve(source), servers, notice, peak_share)
