"""A sweep's spec: the settings every run shares, the axes whose combinations are the runs, the
seeds, and what to report. Read from YAML (``dlsched sweep SPEC.yaml``) or given as a dict
(:func:`dlsched.sweep.run_sweep`); every field is checked before any run starts, and an error
names the field::

    name: load sweep              # the report's title (default: the file's name)
    runs:                         # settings of every run
      trace: philly
      cluster: 64x8:V100
      limit: 4000
      elastic_fraction: 0.5       # half the jobs elastic (elastic-tiresias needs some)
    axes:                         # every combination of these values is one run, per seed
      policy:                     # a name, or a variant with parameters and run settings
        - fifo
        - {name: srtf, params: {scan: strict}, label: srtf-strict}
        - {name: elastic-tiresias, settings: {resize_mechanism: stop-resume}, label: el-sr}
      load: [0.5, 1.0, 2.0]
    seeds: [0, 1, 2]              # default [0]: the workload's seed (models, deadlines, ...)
    report:
      metrics: [mean_jct_s, makespan_s]   # summary fields (default: mean JCT, mean queueing,
                                          # makespan, GPU utilization)
      baseline: fifo              # each policy against it (default: the first policy)
      x: load                     # the axis the report plots along (default: the first other)

The settings are those of ``dlsched simulate`` (:data:`SETTINGS`), by their Python names.
"""

from __future__ import annotations

import inspect
import itertools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SpecError
from ..sim.engine import MAX_STALL_LIMIT, MIN_INTERVAL_S
from ..state.costs import MIN_CHECKPOINT_MIB_S

# the limits of a spec: a sweep is a grid of simulations, each minutes long at most
MAX_RUNS = 10_000
MAX_SEEDS = 1_000
MAX_AXIS_VALUES = 1_000


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > 4096:
        raise ValueError("must be a non-empty string")
    return value


def _number(low: float, high: float, strict_low: bool = False) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            hint = ""
            if isinstance(value, str) and _reads_as_number(value):
                hint = " (YAML reads a number without a dot, as 1e3, as text: write 1.0e+3)"
            raise ValueError(f"must be a number, got {value!r}{hint}")
        if value < low or value > high or (strict_low and value == low):
            raise ValueError(f"must be in {'(' if strict_low else '['}{low}, {high}]")
        return value

    return check


def _reads_as_number(text: str) -> bool:
    """Whether ``text`` is a number YAML 1.1 reads as text: an exponent without a dot."""
    return re.fullmatch(r"[-+]?[0-9]+[eE][-+]?[0-9]+", text.strip()) is not None


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("must be a positive integer")
    return value


def _stall_limit(value: Any) -> int:
    if _count(value) > MAX_STALL_LIMIT:
        raise ValueError(f"must be at most {MAX_STALL_LIMIT:,}")
    return value


def _mapping(value: Any) -> dict:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ValueError("must be a mapping of names to values")
    return dict(value)


def _choice(*options: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return value

    return check


# workload settings (dlsched.prepare.prepare's keywords): runs that share them share one
# prepared workload
def _trace(value: Any) -> str:
    from ..traces import BUNDLED

    name = _text(value)
    if name not in BUNDLED and name != "synthetic" and not Path(name).is_file():
        raise ValueError(f"'{name}' is neither a bundled trace, synthetic, nor a file")
    return name


def _parsed(value: Any, parse: Callable[[str], object]) -> str:
    """``value``, a text ``parse`` accepts (its error is the setting's)."""
    try:
        parse(_text(value))
    except SpecError as e:
        raise ValueError(e.reason) from None
    return value


def _column_mapping(value: Any) -> str:
    """A generic CSV's columns, as ``--map`` gives them (``submit=ts:datetime,gpus=n``)."""
    from ..traces.generic import parse_mapping

    return _parsed(value, parse_mapping)


def _cluster(value: Any) -> str:
    from ..cluster import parse_cluster_spec

    return _parsed(value, parse_cluster_spec)


def _file(value: Any) -> str:
    name = _text(value)
    if not Path(name).is_file():
        raise ValueError(f"no file {name}")
    return name


def _quotas(value: Any) -> str:
    name = _text(value)
    if name not in ("equal", "philly-vc") and not Path(name).is_file():
        raise ValueError(f"'{name}' is neither equal, philly-vc nor a file")
    return name


def _node_events(value: Any) -> str:
    from ..node_events import read_node_events

    try:
        read_node_events(_file(value))  # (its nodes are checked against each run's cluster)
    except SpecError as e:
        raise ValueError(str(e)) from None
    return value


def _check_event_nodes(events: str, cluster: str | None, highest: dict[str, int]) -> None:
    """Every node the event file names is one of the run's cluster (``highest``: each file's
    highest node, read once)."""
    from ..cluster import load_cluster
    from ..node_events import read_node_events
    from ..prepare import DEFAULT_CLUSTER

    if events not in highest:
        highest[events] = max((node for _, _, node in read_node_events(events)), default=-1)
    cluster = cluster or DEFAULT_CLUSTER
    nodes = len(load_cluster(cluster).nodes)
    if highest[events] >= nodes:
        try:
            read_node_events(events, nodes)  # (names the row)
        except SpecError as e:
            raise SpecError("node_events", f"on cluster {cluster}: {e}") from None


WORKLOAD: dict[str, Callable[[Any], Any]] = {
    "trace": _trace,
    "cluster": _cluster,
    "format": _text,
    "mapping": _column_mapping,
    "trace_params": _mapping,
    "skip_invalid": _flag,
    "perf": _flag,
    "load": _number(0.0, 1e6, strict_low=True),
    "elastic_fraction": _number(0.0, 1.0),
    "limit": _count,
    "deadlines": _flag,
}
# run settings (dlsched.runs.simulate's keywords, the simulator's costs among them)
RUN: dict[str, Callable[[Any], Any]] = {
    "quotas": _quotas,
    "hard_quotas": _flag,
    "inference_demand": _text,
    "peak_share": _number(0.0, 1.0, strict_low=True),
    "restart_overhead_s": _number(0.0, 1e7),
    "startup_overhead_s": _number(0.0, 1e7),
    "checkpoint_interval_s": _number(0.0, 1e9, strict_low=True),
    "schedule_interval_s": _number(MIN_INTERVAL_S, 1e9),
    "stall_limit": _stall_limit,
    "resize_mechanism": _choice("background", "stop-resume"),
    "stop_resume_s": _number(0.0, 1e7),
    "checkpoint_mib_s": _number(MIN_CHECKPOINT_MIB_S, 1e9),
    "reclaim_notice_s": _number(0.0, 1e9),
    "node_events": _node_events,
}
SETTINGS: dict[str, Callable[[Any], Any] | None] = {**WORKLOAD, **RUN, "policy": None}  # (_policy)
DEFAULT_METRICS = ("mean_jct_s", "mean_queue_s", "makespan_s", "gpu_utilization")


@dataclass(frozen=True)
class PolicyChoice:
    """A policy with its parameters, the run settings that go with it (a variant such as
    elastic Tiresias with stop-resume), and the label its runs are reported under."""

    name: str
    params: tuple[tuple[str, Any], ...] = ()
    label: str = ""
    settings: tuple[tuple[str, Any], ...] = ()

    def as_dict(self) -> dict:
        return {"name": self.name, "params": dict(self.params)}


def _policy(value: Any, where: str) -> PolicyChoice:
    from ..policies.catalog import make_policy

    settings: dict[str, Any] = {}
    if isinstance(value, str):
        name, params, label = value, {}, value
    elif isinstance(value, dict):
        unknown = set(value) - {"name", "params", "label", "settings"}
        if unknown:
            raise SpecError(
                where, f"unknown key '{min(unknown, key=str)}' (name, params, label, settings)"
            )
        try:
            name = _text(value.get("name"))
            params = _mapping(value.get("params", {}))
            label = _text(value.get("label", name))
            raw = _mapping(value.get("settings", {}))
        except ValueError as e:
            raise SpecError(where, str(e)) from None
        for key, v in raw.items():  # a run's settings only: the jobs stay those of the point
            if key not in RUN:
                raise SpecError(
                    f"{where}.settings.{key}", f"not a run setting ({', '.join(sorted(RUN))})"
                )
            settings[key] = _setting(key, v, f"{where}.settings.{key}")
    else:
        raise SpecError(where, "a policy is a name or {name, params, label, settings}")
    try:
        make_policy(name, **params)  # unknown names and parameters are refused now
    except SpecError as e:  # (a parameter's own check included: make_policy names it)
        raise SpecError(where, e.reason) from None
    return PolicyChoice(name, tuple(sorted(params.items())), label, tuple(sorted(settings.items())))


def _setting(key: str, value: Any, where: str) -> Any:
    if key not in SETTINGS:
        raise SpecError(where, f"unknown setting '{key}' (one of {', '.join(sorted(SETTINGS))})")
    check = SETTINGS[key]
    if check is None:  # the policy
        return _policy(value, where)
    try:
        return check(value)
    except ValueError as e:
        raise SpecError(where, str(e)) from None


@dataclass(frozen=True)
class RunSpec:
    """One simulation of a sweep: its settings (``policy`` a :class:`PolicyChoice`), its seed,
    and the axis values that single it out (for the tables)."""

    settings: tuple[tuple[str, Any], ...]
    seed: int
    point: tuple[tuple[str, Any], ...]  # axis -> value as reported (a policy by its label)

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.settings).get(key, default)

    def workload_settings(self) -> dict:
        """What dlsched.prepare.prepare takes (trace and cluster among them), with the seed."""
        out = {k: v for k, v in self.settings if k in WORKLOAD}
        out["seed"] = self.seed
        return out

    def run_settings(self) -> dict:
        return {k: v for k, v in self.settings if k in RUN}

    def describe(self) -> dict:
        """Everything that determines the run's outputs, as plain data."""
        out = {k: (v.as_dict() if isinstance(v, PolicyChoice) else v) for k, v in self.settings}
        return {**out, "seed": self.seed}


@dataclass
class SweepSpec:
    name: str
    runs: list[RunSpec]
    axes: dict[str, list[Any]]  # axis -> values as reported
    seeds: list[int]
    metrics: list[str]
    baseline: str | None  # a policy label
    x: str | None  # the axis the report plots along


def load_spec(path: str | Path) -> SweepSpec:
    from ..yamlfile import read_yaml

    data = read_yaml(path, "spec")
    return parse_spec(data, default_name=Path(path).stem)


def parse_spec(data: Any, default_name: str = "sweep") -> SweepSpec:
    """Check every field of a spec and expand it into its runs."""
    if not isinstance(data, Mapping):
        raise SpecError("spec", "a sweep spec is a mapping (name, runs, axes, seeds, report)")
    unknown = set(data) - {"name", "runs", "axes", "seeds", "report"}
    if unknown:
        raise SpecError(
            f"spec.{min(unknown, key=str)}", "unknown field (name, runs, axes, seeds, report)"
        )
    name = data.get("name", default_name)
    if not isinstance(name, str) or not name or len(name) > 200:
        raise SpecError("name", "must be a non-empty string of at most 200 characters")
    shared_raw = data.get("runs") or {}
    if not isinstance(shared_raw, Mapping):
        raise SpecError("runs", "must be a mapping of settings")
    shared = {k: _setting(k, v, f"runs.{k}") for k, v in shared_raw.items()}
    axes_raw = data.get("axes") or {}
    if not isinstance(axes_raw, Mapping):
        raise SpecError("axes", "must be a mapping of a setting to its list of values")
    axes: dict[str, list[Any]] = {}
    for key, values in axes_raw.items():
        where = f"axes.{key}"
        if key not in SETTINGS:
            raise SpecError(where, f"unknown setting (one of {', '.join(sorted(SETTINGS))})")
        if key in shared:
            raise SpecError(where, "is also set under runs: set it in one place")
        if not isinstance(values, list) or not values or len(values) > MAX_AXIS_VALUES:
            raise SpecError(where, f"must be a list of 1 to {MAX_AXIS_VALUES} values")
        axes[key] = [_setting(key, v, f"{where}[{i}]") for i, v in enumerate(values)]
        labels = [_label(v) for v in axes[key]]
        if len(set(labels)) != len(labels):
            raise SpecError(where, "has a value twice (give policies distinct labels)")
    if "policy" not in shared and "policy" not in axes:
        raise SpecError("runs.policy", "no policy: set runs.policy or the axis axes.policy")
    if "trace" not in shared and "trace" not in axes:
        raise SpecError("runs.trace", "no trace: set runs.trace or the axis axes.trace")
    seeds = data.get("seeds", [0])
    if (
        not isinstance(seeds, list)
        or not seeds
        or len(seeds) > MAX_SEEDS
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
        or len(set(seeds)) != len(seeds)
    ):
        raise SpecError("seeds", f"must be a list of 1 to {MAX_SEEDS} distinct integers >= 0")
    runs = []
    highest: dict[str, int] = {}  # event file -> the highest node it names
    policies: dict[int, Any] = {}  # each choice's policy, and whether each cluster has an
    clusters: dict[str, bool] = {}  # inference pool, made once (up to 10,000 combinations)
    facts: dict[tuple, Any] = {}  # what each trace's jobs are, read once (_trace_facts)
    keys = list(axes)
    for combo in itertools.product(*(axes[k] for k in keys)):
        point = tuple((k, _label(v)) for k, v in zip(keys, combo))
        given = {**shared, **dict(zip(keys, combo))}
        for key, value in given["policy"].settings:
            if key in given:
                raise SpecError(
                    f"policy {given['policy'].label}: settings.{key}",
                    "is also set under runs or axes: set it in one place",
                )
            given[key] = value
        if "node_events" in given:
            _check_event_nodes(given["node_events"], given.get("cluster"), highest)
        _check_inputs(given, policies, clusters, facts)
        _check_seeded(given, seeds, point)
        settings = tuple(sorted(given.items()))
        for seed in seeds:
            runs.append(RunSpec(settings, seed, point))
            if len(runs) > MAX_RUNS:
                raise SpecError("axes", f"more than {MAX_RUNS:,} runs (axes x seeds)")
    report = data.get("report") or {}
    if not isinstance(report, Mapping):
        raise SpecError("report", "must be a mapping (metrics, baseline, x)")
    unknown = set(report) - {"metrics", "baseline", "x"}
    if unknown:
        raise SpecError(f"report.{min(unknown, key=str)}", "unknown field (metrics, baseline, x)")
    metrics = report.get("metrics", list(DEFAULT_METRICS))
    from ..report.columns import METRICS

    known = [key for key, _, _ in METRICS]
    if not isinstance(metrics, list) or not metrics:
        raise SpecError("report.metrics", f"must be a list of summary fields ({', '.join(known)})")
    for i, m in enumerate(metrics):
        if m not in known:
            raise SpecError(f"report.metrics[{i}]", f"'{m}' is none of {', '.join(known)}")
    labels = [_label(v) for v in axes.get("policy", [shared.get("policy")])]
    baseline = report.get("baseline", labels[0])
    if baseline not in labels:
        raise SpecError(
            "report.baseline", f"'{baseline}' is none of the policies ({', '.join(labels)})"
        )
    others = [k for k in axes if k != "policy"]
    x = report.get("x", others[0] if others else None)
    if x is not None and x not in others:
        raise SpecError(
            "report.x", f"'{x}' is not an axis other than policy ({', '.join(others) or 'none'})"
        )
    return SweepSpec(
        name,
        runs,
        {k: [_label(v) for v in vs] for k, vs in axes.items()},
        list(seeds),
        list(metrics),
        baseline,
        x,
    )


def _check_inputs(given: dict, policies: dict, clusters: dict[str, bool], facts: dict) -> None:
    """A run whose policy would find its mechanism idle, as far as the spec and its trace tell
    before the workload is made (``runs.check_policy_inputs``; the rest is asked when the run
    starts): the performance model, the cluster's inference pool, and, when the policy needs
    them, whether any job has a deadline or is elastic and how many tenants have jobs."""
    from ..cluster import parse_cluster_spec
    from ..policies.catalog import make_policy
    from ..prepare import DEFAULT_CLUSTER
    from ..runs import PolicyInputs, check_policy_inputs
    from ..traces import BUNDLED

    choice: PolicyChoice = given["policy"]
    if id(choice) not in policies:  # (its params may hold lists: not a key)
        policies[id(choice)] = make_policy(choice.name, **dict(choice.params))
    trace = given["trace"]
    # a bundled or synthetic trace (read by its own loader, whatever the format setting) is no
    # server's history: its cluster is the default unless given, its jobs are elastic only
    # when elastic_fraction draws them, and have deadlines only when deadlines draws them
    drawn = trace in BUNDLED or trace == "synthetic"
    cluster = given.get("cluster", DEFAULT_CLUSTER if drawn else None)
    if cluster is not None and cluster not in clusters:
        clusters[cluster] = parse_cluster_spec(cluster).pool_gpus("inference") > 0
    elastic: bool | None = True
    if not given.get("elastic_fraction", 0.0) > 0:
        elastic = False if drawn else None
    # (tests/test_traces.py holds every bundled trace to both)
    deadlines = True if given.get("deadlines") else (False if drawn else None)
    policy, tenants = policies[id(choice)], None
    if trace == "synthetic":  # its tenants are a parameter (the generator's default unless given)
        from ..traces.synthetic import synthetic

        default = inspect.signature(synthetic).parameters["tenants"].default
        tenants = (given.get("trace_params") or {}).get("tenants", default)
    elif (
        (getattr(policy, "needs_deadlines", False) and deadlines is None)
        or (getattr(policy, "resizes_elastic", False) and elastic is None)
        or getattr(policy, "between_tenants", False)
    ):  # (each run failed at its start, the others going on)
        found = _trace_facts(given, facts)
        if found is not None:
            with_deadline, with_elastic, tenants = found
            deadlines = with_deadline if deadlines is None else deadlines
            elastic = with_elastic if elastic is None else elastic
    inputs = PolicyInputs(
        given.get("perf", True),
        None if cluster is None else clusters[cluster],
        deadlines=deadlines,
        elastic=elastic,
        tenants=tenants,
    )
    try:
        check_policy_inputs(policy, choice.name, inputs)
    except SpecError as e:
        raise SpecError(f"policy {choice.label}: {e.field}", e.reason) from None


def _trace_facts(given: dict, facts: dict) -> tuple[bool, bool, int] | None:
    """Whether any job of the run's trace (its first ``limit``) has a deadline or is elastic,
    and how many tenants have jobs: read once per trace and reading settings. None for a
    server's history (replayed as it ran: not asked) and for a trace the reader refuses (its
    runs fail at their start, named)."""
    from ..traces import load_trace

    key = tuple(given.get(k) for k in ("trace", "format", "mapping", "skip_invalid", "limit"))
    if key not in facts:
        try:
            loaded = load_trace(
                given["trace"],
                fmt=given.get("format"),
                skip_invalid=given.get("skip_invalid", False),
                mapping=given.get("mapping"),
            )
        except SpecError:
            facts[key] = None
        else:
            jobs = sorted(loaded.jobs, key=lambda j: j.submit_time_s)[: given.get("limit")]
            facts[key] = (
                None
                if loaded.replay is not None
                else (
                    any(j.deadline_s is not None for j in jobs),
                    any(j.elastic for j in jobs),
                    len({j.tenant for j in jobs}),
                )
            )
    return facts[key]


def _check_seeded(given: dict, seeds: list[int], point: tuple) -> None:
    """Several seeds of a run that draws nothing from its seed would be the same run, their
    interval of zero width. (With the performance model, whether a trace's jobs all name their
    models is known only once it is read.)"""
    from ..prepare import draws_from_seed

    if len(seeds) > 1 and not draws_from_seed(
        given["trace"],
        given.get("perf", True),
        given.get("elastic_fraction", 0.0),
        given.get("deadlines", False),
    ):
        run = ", ".join(f"{k}={v}" for k, v in point) or "every run"
        raise SpecError(
            "seeds",
            f"{len(seeds)} seeds, but {run} draws nothing from its seed (perf: false, and no "
            "synthetic trace, elastic_fraction or deadlines): its runs would be one run "
            "repeated; give one seed",
        )


def _label(value: Any) -> Any:
    """An axis value as the tables name it: a policy by its label, a mapping (trace_params) as
    ``--trace-param`` writes it."""
    if isinstance(value, PolicyChoice):
        return value.label
    if isinstance(value, dict):
        return ";".join(f"{k}={v}" for k, v in value.items())
    return value
