"""The command-line front end: ``dlsched simulate | compare | report | traces | policies``."""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
from argparse import Namespace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tabulate import tabulate

from . import __version__
from .cluster import MAX_GPUS
from .errors import PlanError, SpecError, option_name
from .inference import DEFAULT_PEAK_SHARE, DEFAULT_RECLAIM_NOTICE_S
from .policies.catalog import make_policy, policy_descriptions, takes_parameter
from .state.costs import DEFAULT_CHECKPOINT_MIB_S, POLLUX_RESTART_PENALTY_S

if TYPE_CHECKING:
    from .prepare import Workload
    from .sim.engine import SimResult

# Loaded where used, so that ``import dlsched.cli`` stays light: matplotlib (reports), httpx (the
# client), FastAPI, Ray and torch (the server).


def _parse_value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _key_values(items: list[str] | None, what: str) -> dict:
    out = {}
    for item in items or []:
        for part in item.split(";"):
            if not part.strip():
                continue
            if "=" not in part:
                raise SpecError(what, f"'{part}' is not KEY=VALUE")
            key, value = part.split("=", 1)
            out[key.strip()] = _parse_value(value.strip())
    return out


# Progress bars redraw their line with control characters: in a log or a pipe they are noise
NO_PROGRESS_HELP = "no progress bar (there is none when standard error is not a terminal)"


def _shows_progress(args: Namespace) -> bool:
    return not args.no_progress and sys.stderr.isatty()


def _add_workload_args(p: argparse.ArgumentParser, replay: bool = False) -> None:
    if replay:
        p.add_argument(
            "--trace", help="a history 'dlsched export' wrote (default: fetch it from the server)"
        )
    else:
        p.add_argument(
            "--trace",
            required=True,
            help="a bundled trace (see 'dlsched traces'), 'synthetic', or a CSV file path",
        )
    p.add_argument(
        "--format",
        choices=["philly", "muri", "pollux", "openb", "history", "dlsched", "generic"],
        help="the file's format (default: detected from its header)",
    )
    p.add_argument(
        "--map",
        dest="mapping",
        help="generic CSV column mapping, e.g. 'submit=ts:datetime,duration=secs,gpus=n'",
    )
    p.add_argument(
        "--trace-param",
        action="append",
        metavar="KEY=VALUE",
        help="synthetic generator parameters (num_jobs, load, tenants, median_duration_s...)",
    )
    p.add_argument(
        "--skip-invalid",
        action="store_true",
        help="skip malformed rows (counted in the summary) instead of stopping",
    )
    p.add_argument("--limit", type=int, help="use only the first N jobs by submit time")
    p.add_argument(
        "--cluster",
        help="COUNTxGPUS[:TYPE[/MEM_MIB][*SPEED]][@POOL],... or a YAML file (default 64x8:V100; a "
        "server's history: the cluster 'dlsched export' printed)",
    )
    p.add_argument(
        "--placement",
        choices=["best-fit", "consolidated", "spread"],
        help="where jobs go (default: the policy's own, best-fit for all but the -consolidated "
        "ones)",
    )
    p.add_argument(
        "--scan",
        choices=["strict", "backfill", "greedy"],
        help="past a job that cannot start: stop (strict), let later jobs take free GPUs "
        "(backfill), or also let them preempt jobs they outrank (greedy). Default: the "
        "policy's own (strict for fifo, sjf and the sharing policies; greedy for srtf, "
        "tiresias and elastic-tiresias, as the Tiresias simulator)",
    )
    p.add_argument(
        "--backfill",
        dest="scan",
        action="store_const",
        const="backfill",
        help="the same as --scan backfill",
    )
    p.add_argument(
        "--param",
        action="append",
        metavar="KEY=VALUE",
        help="policy parameter, e.g. thresholds_gpu_s=3600,36000 (repeatable)",
    )
    p.add_argument(
        "--restart-overhead-s",
        type=float,
        default=POLLUX_RESTART_PENALTY_S,
        help="pause before a preempted job progresses again (default %(default)s, Pollux's)",
    )
    p.add_argument(
        "--startup-overhead-s",
        type=float,
        default=0.0,
        help="pause at a job's first start (default %(default)s)",
    )
    p.add_argument(
        "--checkpoint-interval-s",
        type=float,
        help="periodic checkpoints, every N seconds of a job's run: a job stopped by a failure "
        "(its node down) loses the work since the last one (default: none, and a failed job "
        "loses nothing); a policy's preemption checkpoints first and loses nothing",
    )
    p.add_argument(
        "--schedule-interval-s",
        type=float,
        help="also decide every N seconds (default: only at events); a run stops with an "
        "error past a bound on its ticks (max_ticks in docs/simulator.md)",
    )
    p.add_argument(
        "--stall-limit",
        type=int,
        help="passes in a row without an arrival or a completion before a run stops with an "
        "error, as a policy cycling (default 100,000; raise it for a policy whose jobs only "
        "progress slowly)",
    )
    p.add_argument(
        "--node-events",
        metavar="FILE",
        help="nodes going down and up, and taken out of service: a CSV of time_s,kind,node "
        "(kind down, up, cordon, drain or uncordon; nodes numbered from 0 in the cluster spec's "
        "order); a node's jobs fail when it goes down (see --checkpoint-interval-s), are "
        "preempted when it is drained",
    )
    p.add_argument(
        "--seed",
        type=int,
        help="seed of what is drawn: a synthetic workload, the model of a job without one, the "
        "elastic jobs (--elastic-fraction) and deadlines (--deadlines) (default 0; an error "
        "where nothing is drawn)",
    )
    p.add_argument(
        "--elastic-fraction",
        type=float,
        default=0.0,
        help="share of jobs made elastic by the seeded rule (min = half, max = twice the "
        "request; docs/policies.md); default 0 (the elastic policies and aryl need some)",
    )
    p.add_argument(
        "--resize-mechanism",
        choices=["background", "stop-resume"],
        default="background",
        help="how elastic resizes are charged (default %(default)s)",
    )
    p.add_argument(
        "--stop-resume-s",
        type=float,
        default=POLLUX_RESTART_PENALTY_S,
        help="restart part of a resize's stop-resume pause (default %(default)s, Pollux's)",
    )
    p.add_argument(
        "--checkpoint-mib-s",
        type=float,
        default=DEFAULT_CHECKPOINT_MIB_S,
        help="checkpoint write/read bandwidth; a resize's pause adds saving and loading "
        "the model's weights and optimizer state (default %(default)s MiB/s, chosen)",
    )
    p.add_argument(
        "--no-perf",
        action="store_true",
        help="run every job at its trace speed instead of the performance model's (no "
        "memory or speed at another size is known: the sharing and elastic policies refuse it)",
    )
    p.add_argument(
        "--cache-dir",
        help="where prepared workloads are kept (parsed, validated, models assigned) for the "
        "next run with the same inputs (default $DLSCHED_CACHE_DIR, else "
        "$XDG_CACHE_HOME/dlsched, else ~/.cache/dlsched)",
    )
    p.add_argument(
        "--no-cache", action="store_true", help="prepare the workload afresh and keep nothing"
    )
    p.add_argument(
        "--deadlines",
        action="store_true",
        help="give jobs without a deadline one: submit + factor x solo run time, the factor "
        "from a tight, normal or loose class (seeded; docs/experiments/genie.md)",
    )
    p.add_argument(
        "--inference-demand",
        metavar="SOURCE",
        help="the inference pool's demand, for a cluster with one (@inference): genai "
        "(default), philly-nodes, a CSV of seconds,load, or none (docs/experiments/aryl.md)",
    )
    p.add_argument(
        "--peak-share",
        type=float,
        help="share of the inference servers the demand's peak needs (default "
        f"{DEFAULT_PEAK_SHARE}; with an inference pool)",
    )
    p.add_argument(
        "--reclaim-notice-s",
        type=float,
        help="how long a reclaimed server's training jobs have to leave it (default "
        f"{DEFAULT_RECLAIM_NOTICE_S:g} s; with an inference pool)",
    )
    p.add_argument(
        "--quotas",
        metavar="SOURCE",
        help="tenant quotas over the policy: equal, philly-vc or a YAML file (docs/tenancy.md); "
        "admission within quota, borrowing within a cohort and its reclaim",
    )
    p.add_argument(
        "--hard-quotas", action="store_true", help="with --quotas: no borrowing (as Philly ran)"
    )
    p.add_argument(
        "--out",
        required=not replay,
        default="whatif" if replay else None,
        help="output folder" + (" (default %(default)s)" if replay else ""),
    )
    p.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)


def _load_workload(args: Namespace) -> Workload:
    from .node_events import read_node_events
    from .prepare import prepare
    from .traces import BUNDLED
    from .workload_cache import default_cache_dir

    # options that would do nothing say so (a sweep's settings, common to its runs, apply
    # where they can instead)
    if args.trace_param and args.trace != "synthetic":
        raise SpecError(
            "trace_param", f"--trace-param sets the synthetic trace's; {args.trace!r} takes none"
        )
    if args.mapping is not None and (args.trace == "synthetic" or args.trace in BUNDLED):
        raise SpecError(
            "mapping", f"--map names a CSV file's columns: {args.trace!r} has its own reader"
        )
    workload = prepare(
        args.trace,
        args.cluster,
        fmt=args.format,
        mapping=args.mapping,
        trace_params=_key_values(args.trace_param, "trace-param"),
        skip_invalid=args.skip_invalid,
        perf=not args.no_perf,
        seed=0 if args.seed is None else args.seed,
        elastic_fraction=args.elastic_fraction,
        limit=args.limit,
        deadlines=args.deadlines,
        cache_dir=None if args.no_cache else (args.cache_dir or default_cache_dir()),
    )
    if args.seed is not None and not workload.seeded:
        raise SpecError(
            "seed",
            "--seed does nothing here: it seeds a synthetic trace, the models of jobs without "
            "one (the performance model's: not with --no-perf, nor in a server's history), "
            "--elastic-fraction and --deadlines",
        )
    if args.node_events:  # read and checked once, before any run (a compare's share them)
        args.node_events = read_node_events(args.node_events, len(workload.cluster.nodes))
    return workload


def _given_options(policy_name: str, args: Namespace) -> dict:
    """``--placement`` and ``--scan`` as given, refused for a policy that has no such
    parameter."""
    given = {k: v for k, v in (("placement", args.placement), ("scan", args.scan)) if v is not None}
    for option in given:
        if not takes_parameter(policy_name, option):
            raise SpecError(
                option, f"policy '{policy_name}' has no {option}: --{option} does nothing"
            )
    return given


def _run_one(
    policy_name: str,
    args: Namespace,
    workload: Workload,
    out: Path,
    params: dict | None = None,
    position: int | None = None,
) -> tuple[dict, SimResult]:
    """Simulate one policy on the workload and write its outputs: (summary, result).
    ``position``: its progress bar's line, when runs go on at once."""
    from .runs import simulate

    given = _given_options(policy_name, args)
    notice = {} if args.reclaim_notice_s is None else {"reclaim_notice_s": args.reclaim_notice_s}
    bar = None
    if _shows_progress(args):
        from tqdm import tqdm

        total = len(workload.jobs)
        bar = tqdm(
            total=total,
            desc=policy_name,
            unit="job",
            leave=False,
            file=sys.stderr,
            position=position,
        )
    try:
        run = simulate(
            workload,
            policy_name,
            params={**given, **(params or {}), **_key_values(args.param, "param")},
            quotas=args.quotas,
            hard_quotas=args.hard_quotas,
            inference_demand=args.inference_demand,
            peak_share=args.peak_share,
            progress=bar.update if bar else None,
            **notice,
            restart_overhead_s=args.restart_overhead_s,
            startup_overhead_s=args.startup_overhead_s,
            checkpoint_interval_s=args.checkpoint_interval_s,
            schedule_interval_s=args.schedule_interval_s,
            **({} if args.stall_limit is None else {"stall_limit": args.stall_limit}),
            resize_mechanism=args.resize_mechanism,
            stop_resume_s=args.stop_resume_s,
            checkpoint_mib_s=args.checkpoint_mib_s,
            node_events=args.node_events or (),
        )
    finally:
        if bar:
            bar.close()
    run.write(out)
    return run.summary, run.result


def _table(summaries: list[dict]) -> str:
    from .report.columns import format_cell, shown_columns

    cols = [c for c in shown_columns(summaries) if c[0] not in ("jobs",)]
    header = ["policy"] + [label for _, label, _ in cols] + ["wall"]
    rows = [
        [s["policy"]]
        + [format_cell(s.get(k), fmt) for k, _, fmt in cols]
        + [f"{s['wall_s']:.1f} s"]
        for s in summaries
    ]
    return tabulate(
        rows, header, disable_numparse=True, colalign=["left"] + ["right"] * (len(header) - 1)
    )


def _notes(summary: dict, args: Namespace) -> list[str]:
    """What a reader of the table would not guess: jobs left out of its JCTs, and failures that
    lost no work."""
    notes = [] if (note := _never_started_note(summary)) is None else [note]
    if summary.get("failures") and args.checkpoint_interval_s is None:
        notes.append(
            f"note: {summary['failures']:,} runs failed (nodes down) and lost no work: without "
            "--checkpoint-interval-s a failed job resumes where it stopped"
        )
    return notes


def _never_started_note(summary: dict) -> str | None:
    """Jobs that never ran are not in the JCTs: say how many, and whose (with the tenant's
    nominal quota, under quotas)."""
    if not summary.get("never_started"):
        return None
    quotas = (summary.get("quotas") or {}).get("tenants", {})
    counts = [(t, s["never_started"]) for t, s in summary.get("tenants", {}).items()]
    tenants = sorted((e for e in counts if e[1]), key=lambda e: -e[1])
    whose = ", ".join(
        f"{t} {n:,}" + (f" (quota {quotas[t]['nominal_gpus']} GPUs)" if t in quotas else "")
        for t, n in tenants[:5]
    )
    more = ", ..." if len(tenants) > 5 else ""
    return (
        f"note: {summary['never_started']:,} jobs never ran and are not in the JCTs; "
        f"by tenant: {whose}{more}"
    )


def _output_folder(path: str) -> Path:
    """The output folder, checked before any work (a run of minutes used to end in a traceback
    at its first write); made when the outputs are written, so a run that fails leaves none."""
    out = Path(path)
    missing, existing = [], out.absolute()
    while not existing.exists():
        missing.append(existing)
        existing = existing.parent
    if not existing.is_dir():
        raise SpecError("out", f"cannot make the folder {path}: {existing} is a file")
    # tried, then undone: only a try tells (root passes os.access anywhere; /proc, /sys and a
    # read-only mount refuse)
    made: list[Path] = []
    try:
        for folder in reversed(missing):
            folder.mkdir()
            made.append(folder)
        tempfile.TemporaryFile(dir=out).close()
    except OSError as e:
        raise SpecError(
            "out", f"cannot make the folder {path} or write in it: {e.strerror}"
        ) from None
    finally:
        for folder in reversed(made):
            folder.rmdir()
    return out


def cmd_simulate(args: Namespace) -> int:
    out = _output_folder(args.out)
    summary, _ = _run_one(args.policy, args, _load_workload(args), out)
    print(_table([summary]))
    for note in _notes(summary, args):
        print(note)
    print(f"wrote {args.out}/summary.json, jobs.csv, timeseries.csv")
    return 0


# What the processes ``_run_policies`` forks inherit (not pickled: a prepared workload of
# full Philly is tens of MB, and a fork shares it for nothing)
_forked: tuple | None = None


def _run_forked(task: tuple[int, str]) -> dict:
    assert _forked is not None  # set before the fork
    args, workload, out = _forked
    position, name = task
    return _run_one(name, args, workload, out / name, position=position)[0]


def _run_policies(names: list[str], args: Namespace, workload: Workload, out: Path) -> list[dict]:
    """Each policy's run on the workload, its outputs in its own folder, the summaries in
    ``names``' order: ``--jobs`` at a time, each in a process forked from this one (the runs
    are independent, so their outputs are the same either way), or one after another here."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    jobs = min(args.jobs or len(os.sched_getaffinity(0)), len(names))
    if jobs <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [_run_one(name, args, workload, out / name)[0] for name in names]
    global _forked
    _forked = (args, workload, out)
    if _shows_progress(args):
        from tqdm import tqdm

        tqdm.get_lock()  # made before the fork: the children's bars share it
    # (a process that dies, killed for its memory say, fails the map: no wait for ever)
    pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork"))
    try:
        return list(pool.map(_run_forked, enumerate(names)))
    finally:  # after a failure, the runs not started are not started
        pool.shutdown(cancel_futures=True)
        _forked = None


def cmd_compare(args: Namespace) -> int:
    from .metrics import json_text
    from .report.html import render_report
    from .runs import PolicyInputs, check_policy_inputs

    if args.jobs is not None and args.jobs < 1:
        raise SpecError("jobs", "must be at least 1")
    out = _output_folder(args.out)
    workload = _load_workload(args)
    trace, cluster, jobs = workload.trace, workload.cluster, workload.jobs
    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    if not names:
        raise SpecError("policies", "name at least one policy, e.g. fifo,tiresias")
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:  # (both runs would write one folder at once)
        raise SpecError("policies", f"'{twice}' is named twice")
    inputs = PolicyInputs.of(workload)
    for name in names:  # fail fast on a typo, an option it lacks or inputs it needs,
        # before any simulation
        _given_options(name, args)
        check_policy_inputs(make_policy(name), name, inputs)
    summaries = _run_policies(names, args, workload, out)
    (out / "comparison.json").write_text(
        json_text([{k: v for k, v in s.items() if k != "tenants"} for s in summaries]) + "\n"
    )
    report = render_report(
        [out / n for n in names], out / "report.html", title=f"{trace.name} on {cluster.describe()}"
    )
    print(
        f"{trace.name}: {len(jobs):,} jobs on {cluster.describe()}"
        + (
            f" ({sum(trace.dropped.values()):,} rows dropped: {trace.dropped})"
            if trace.dropped
            else ""
        )
    )
    print(_table(summaries))
    for summary in summaries:
        for note in _notes(summary, args):
            print(f"{summary['policy']}: {note}")
    print(f"report: {report}")
    return 0


def cmd_whatif(args: Namespace) -> int:
    """Replay the server's history under other policies; the server's own policy's replay is
    held against what the server measured (calibration)."""
    from .metrics import json_text
    from .replay import measured_summary
    from .report.columns import human_duration as human_s
    from .runs import PolicyInputs, check_policy_inputs

    out = _output_folder(args.out)
    names = [p.strip() for p in (args.policies or "").split(",") if p.strip()]
    for name in names:  # before the history is fetched: a misspelt name is the first error
        make_policy(name)
    # the history comes from the server or from --trace: the other's options would do nothing
    unused = ("server_policy",) if args.trace is None else ("server", "token", "since", "until")
    given = next((name for name in unused if getattr(args, name) is not None), None)
    if given is not None:
        where = "the server's history names it" if args.trace is None else "--trace is the history"
        raise SpecError(given, f"{option_name(given)} does nothing here: {where}")
    server_policy, server_params = args.server_policy, {}
    if args.trace is None:
        from .runtime.client import fetch_history
        from .runtime.export import history_csv

        history = fetch_history(args)
        if not history["jobs"]:
            raise SpecError("trace", "the server has no finished or running job to replay")
        out.mkdir(parents=True, exist_ok=True)
        args.trace = str(out / "history.csv")
        Path(args.trace).write_text(history_csv(history))
        args.cluster = args.cluster or history["cluster"]
        server_policy, server_params = history["policy"], history["params"]
        if history.get("node_events") and not args.node_events:
            from .node_events import node_events_csv

            args.node_events = str(out / "node_events.csv")
            Path(args.node_events).write_text(node_events_csv(history["node_events"]))
            print(
                f"replaying the server's {len(history['node_events'])} node events (nodes lost "
                f"and back, out of service and back): {args.node_events}"
            )
        if history.get("quota_config") and not args.quotas:
            import yaml

            args.quotas = str(out / "quotas.yaml")
            Path(args.quotas).write_text(yaml.safe_dump(history["quota_config"]))
            print(
                f"replaying under the server's quotas as they are now ({history['quotas']}): "
                f"{args.quotas}"
            )
    elif not args.node_events:
        beside = Path(args.trace).with_suffix(".node_events.csv")  # as `dlsched export` names it
        if beside.is_file():
            print(
                f"note: {beside} lies beside the history: its nodes lost and taken out of "
                f"service are replayed only with --node-events {beside}"
            )
    args.format = args.format or "history"
    workload = _load_workload(args)
    replay = workload.trace.replay
    if replay is None:
        raise SpecError("trace", "not a server's history: write one with 'dlsched export'")
    inputs = PolicyInputs.of(workload)
    for name in names:  # (the server's own policy replays its jobs as they ran, whatever)
        if name != server_policy:
            check_policy_inputs(make_policy(name), name, inputs)
    if server_policy and server_policy not in names:
        make_policy(server_policy)
        names.insert(0, server_policy)
    if not names:
        raise SpecError("policies", "give --policies (or --server-policy)")
    submitted = {j.job_id: j.submit_time_s for j in workload.jobs}
    measured = measured_summary(replay)
    rows, report = [], {"measured": measured, "policies": {}}
    if measured["jobs"]:
        label = "server, measured" + (f" ({server_policy})" if server_policy else "")
        rows.append(
            [
                label,
                measured["jobs"],
                human_s(measured["mean_jct_s"]),
                human_s(measured["median_jct_s"]),
                human_s(measured["makespan_s"]),
                measured["preemptions"],
                "",
                "",
            ]
        )
    for name in names:
        summary, result = _run_one(
            name,
            args,
            workload,
            out / name,
            params=server_params if name == server_policy else None,
        )
        ended = {j.job_id: j.finish for j in result.jobs if j.finish is not None}
        jcts = [end - submitted[jid] for jid, end in ended.items()]
        fit = summary["calibration"] if name == server_policy else None
        report["policies"][name] = {
            "mean_jct_s": statistics.fmean(jcts) if jcts else None,
            "calibration": fit,
        }
        rows.append(
            [
                f"{name}, simulated",
                len(ended),
                human_s(statistics.fmean(jcts)) if jcts else "-",
                human_s(statistics.median(jcts)) if jcts else "-",
                human_s(max(ended.values())) if ended else "-",
                sum(j.preemptions for j in result.jobs),
                f"{fit['mean_jct_error']:+.1%}" if fit and fit["jobs"] else "",
                f"{fit['job_error_median']:.1%} / {fit['job_error_p90']:.1%}"
                if fit and fit["jobs"]
                else "",
            ]
        )
    print(f"{workload.trace.name}: {len(workload.jobs)} jobs on {workload.cluster.describe()}")
    print(
        tabulate(
            rows,
            [
                "",
                "jobs done",
                "mean JCT",
                "median JCT",
                "makespan",
                "preemptions",
                "mean JCT error",
                "job error median / p90",
            ],
            disable_numparse=True,
        )
    )
    (out / "whatif.json").write_text(json_text(report) + "\n")
    print(f"wrote {out}/whatif.json and a folder per policy")
    return 0


def cmd_report(args: Namespace) -> int:
    from .report.html import render_report

    root = Path(args.dir)
    if not root.is_dir():
        raise SpecError("dir", f"no such folder: {root}")
    dirs = (
        [root]
        if (root / "summary.json").is_file()
        else sorted(d for d in root.iterdir() if (d / "summary.json").is_file())
    )
    if len(dirs) > 1 and (root / "comparison.json").is_file():
        # a comparison's runs in the order it ran them (its report's colours and rows)
        order = {s.get("policy"): i for i, s in enumerate(_json_list(root / "comparison.json"))}
        dirs.sort(key=lambda d: (order.get(d.name, len(order)), d.name))
    if not dirs:
        raise SpecError("dir", f"{root} holds no simulation output (summary.json)")
    out = render_report(dirs, Path(args.out) if args.out else root / "report.html")
    print(f"report: {out}")
    return 0


def _json_list(path: Path) -> list[dict]:
    """A JSON file's list of objects; empty when it holds anything else."""
    import json

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [x for x in data if isinstance(x, dict)] if isinstance(data, list) else []


MAX_RUNS_PER_CORE = 4


def cmd_sweep(args: Namespace) -> int:
    from .sweep import load_spec, run_sweep

    # chosen: a run is a process of a few hundred MB; more at once than this many per core
    # only swap (100,000 were taken, on 2 cores)
    most = MAX_RUNS_PER_CORE * (os.cpu_count() or 1)
    if args.cpus is not None and not 1 <= args.cpus <= most:
        raise SpecError(
            "cpus", f"must be in 1..{most} ({MAX_RUNS_PER_CORE} a core), got {args.cpus}"
        )
    spec = load_spec(args.spec)  # every field checked before any run starts
    result = run_sweep(
        spec,
        _output_folder(args.out),
        force=args.force,
        sequential=args.sequential,
        ray_address=args.ray_address,
        ray_token_file=args.ray_token_file,
        cpus=args.cpus,
        progress=_shows_progress(args),
    )
    o = result.outcome
    print(result.tables())
    print(
        f"\n{len(o.done)} runs done now, {len(o.cached)} found done before, "
        f"{len(o.failed)} failed, of {len(spec.runs)}; wrote {args.out}/sweep.csv, report.html"
    )
    for run, error in o.failed:
        point = ", ".join(f"{k}={v}" for k, v in run.point)
        print(f"FAILED {point or 'run'} seed {run.seed}: {error.splitlines()[-1]}")
    return 0 if result.ok else 1


def cmd_traces(args: Namespace) -> int:
    from .traces import BUNDLED, load_trace

    rows = []
    for name, b in BUNDLED.items():
        trace = load_trace(name, skip_invalid=True)
        dropped = f" ({trace.dropped_total:,} rows dropped)" if trace.dropped_total else ""
        rows.append([name, f"{len(trace.jobs):,}", b.description + dropped])
    rows.append(["synthetic", "-", "seeded Poisson arrivals with Philly's size and duration mix"])
    print(
        tabulate(
            rows,
            ["name", "jobs", "description"],
            disable_numparse=True,
            colalign=("left", "right", "left"),
        )
    )
    return 0


def cmd_perf_predict(args: Namespace) -> int:
    from .perf.measurements import pollux_apps
    from .perf.predictor import pollux_holdout

    rows = []  # (made first: an unknown model is an error before anything is printed)
    for app in [args.model] if args.model else pollux_apps():
        h = pollux_holdout(app)
        rows.append([app, h.profiled, h.tested] + [f"{v:.1%}" for v in (h.median, h.p90, h.worst)])
    print(
        "GENIE's predictor fitted to Pollux's measured placements of at most 2 GPUs (what a "
        "profiling run measures), tested on every measured placement with more"
    )
    print(
        tabulate(
            rows,
            ["model", "profiled points", "held-out points", "median err", "p90 err", "worst err"],
            disable_numparse=True,
            colalign=["left"] + ["right"] * 5,
        )
    )
    return 0


def cmd_perf_validate(args: Namespace) -> int:
    from .perf.measurements import pollux_apps, pollux_points
    from .perf.scaling import scaling_model
    from .perf.validation import gavel_scaling_check, pollux_errors

    apps = [args.model] if args.model else pollux_apps()
    if args.points:
        for app in apps:
            fit = scaling_model(app)
            for p in pollux_points(app):
                model = fit.iteration_s(p.local_batch, p.gpus, p.nodes)
                print(
                    f"{app} nodes={p.nodes} gpus={p.gpus} batch={p.local_batch:g}: measured "
                    f"{p.step_s:.4f} s, model {model:.4f} s, error "
                    f"{abs(model - p.step_s) / p.step_s:.1%}"
                )
    print(
        "Iteration time fitted to Pollux's measurements (held-out: fitted on two thirds of the "
        "points, errors on the other third)"
    )
    table = []
    for app in apps:
        e = pollux_errors(app)
        table.append(
            [app, e.points]
            + [f"{v:.1%}" for v in (e.median, e.worst, e.held_out_median, e.held_out_worst)]
        )
    print(
        tabulate(
            table,
            ["model", "points", "median err", "worst err", "held-out median", "held-out worst"],
            disable_numparse=True,
            colalign=["left"] + ["right"] * 5,
        )
    )
    rows = [r for r in gavel_scaling_check() if not args.model or r[0] == args.model]
    if not rows:  # (a model Gavel measured no job type of)
        print(f"\nExternal check, not fitted: Gavel measured no job type {args.model} maps to")
    else:
        errors = [abs(m - g) / g for *_, g, m in rows]
        print(
            f"\nExternal check, not fitted: Gavel's consolidated V100 speed-ups of the mapped "
            f"job types ({len(rows)} points), median error {statistics.median(errors):.1%}"
        )
        print(
            tabulate(
                [
                    [model, job_type, gpus, f"x{measured:.2f}", f"x{modelled:.2f}"]
                    for model, job_type, gpus, measured, modelled in rows
                ],
                ["model", "Gavel job type", "GPUs", "measured", "model"],
                disable_numparse=True,
            )
        )
    print(
        "\nGPU-type speeds and co-location slowdowns are Gavel's and Blox's measurements, used as "
        "they are (see 'dlsched perf show')."
    )
    return 0


def cmd_perf_show(args: Namespace) -> int:
    from .perf.measurements import GAVEL_GPU_TYPES
    from .perf.model import PerfModel, default_local_batch
    from .perf.scaling import COEFFICIENTS, scaling_model

    if args.batch is not None and not 0 < args.batch < math.inf:
        raise SpecError("batch", f"must be a finite number > 0, got {args.batch!r}")
    for name, value, most in (
        ("max_gpus", args.max_gpus, MAX_GPUS),
        ("gpus_per_node", args.gpus_per_node, MAX_GPUS),
    ):
        if not 1 <= value <= most:
            raise SpecError(name, f"must be an integer in 1..{most:,}, got {value!r}")
    perf = PerfModel()
    prof = perf.profile(args.model)
    fit = scaling_model(prof.scaling_app)
    batch = args.batch or default_local_batch(args.model)
    print(
        f"{prof.name}: scaling of Pollux's '{prof.scaling_app}' ({fit.points} measured points), "
        f"GPU types and co-location of Gavel's '{prof.gavel_type}'"
        + (f", co-location of Blox's {prof.blox[0]} batch {prof.blox[1]}" if prof.blox else "")
    )
    print("  fit: " + ", ".join(f"{c}={getattr(fit, c):.5g}" for c in COEFFICIENTS))
    print(f"\nper-GPU batch {batch:g}; one node up to {args.gpus_per_node} GPUs, then full nodes")
    base = perf.iteration_s(args.model, 1, batch)
    rows = []
    gpus = 1
    while gpus <= args.max_gpus:
        nodes = -(-gpus // args.gpus_per_node)
        t = perf.iteration_s(args.model, gpus, batch, nodes)
        rows.append([gpus, nodes, f"{t:.4f}", f"{gpus * batch / t:.1f}", f"{gpus * base / t:.2f}"])
        gpus *= 2
    print(
        tabulate(
            rows,
            ["gpus", "nodes", "iter s", "samples/s", "speed-up"],
            disable_numparse=True,
            colalign=["right"] * 5,
        )
    )
    print(
        "\nspeed vs a V100: "
        + ", ".join(f"{t} {perf.type_speed(args.model, t):.2f}" for t in GAVEL_GPU_TYPES)
        + " (other types: 1.00, unmeasured)"
    )
    if prof.fixed_mib is None:
        print("memory: no measured footprint for this model")
    else:
        print(
            f"memory: {prof.fixed_mib:.0f} MiB fixed + {prof.per_sample_mib:.1f} MiB per sample "
            f"(measured {prof.footprint_mib:.0f} MiB at batch {prof.footprint_batch})"
        )
        print(
            "  "
            + ", ".join(
                f"b{b}: {prof.memory_mib(b):.0f}" for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)
            )
        )
    return 0


def cmd_policies(args: Namespace) -> int:
    print(tabulate(list(policy_descriptions().items()), ["policy", "what it does"]))
    print("\nAny policy class also runs as --policy package.module:ClassName (docs/policies.md).")
    return 0


class _Parser(argparse.ArgumentParser):
    """Options by their whole names only (with argparse's abbreviations, `dlsched server --gpus
    8` was taken as --gpus-per-node 8); every subcommand's parser is one too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dlsched",
        description="Schedule deep-learning jobs on "
        "shared GPU clusters: simulate policies on real traces, or run "
        "real training jobs on Ray with the same policies.",
    )
    parser.add_argument("--version", action="version", version=f"dlsched {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("simulate", help="replay one trace on one cluster with one policy")
    _add_workload_args(p)
    p.add_argument(
        "--policy",
        default="fifo",
        help="a policy's name (see 'dlsched policies') or a plug-in's package.module:ClassName",
    )
    p.set_defaults(func=cmd_simulate)
    p = sub.add_parser(
        "compare", help="several policies on the same workload: table and HTML report"
    )
    _add_workload_args(p)
    p.add_argument(
        "--policies",
        default="fifo,sjf,srtf,tiresias,sjf-ffs,sjf-bsbf",
        help="comma-separated policy names or package.module:ClassName (default %(default)s)",
    )
    p.add_argument(
        "-j",
        "--jobs",
        type=int,
        help="policies simulated at once, each in a process forked from this one (default: "
        "the CPUs this process may use; 1: one after another in this process)",
    )
    p.set_defaults(func=cmd_compare)
    p = sub.add_parser(
        "whatif",
        help="replay the server's own history (or an export) under other policies, "
        "and hold the server's policy's replay against what it measured",
    )
    _add_workload_args(p, replay=True)
    p.add_argument(
        "--policies", help="comma-separated policies to replay under (the server's own is added)"
    )
    p.add_argument(
        "--server-policy",
        help="the policy the server ran (with --trace; from the server otherwise)",
    )
    p.add_argument("--server", help="server URL (default $DLSCHED_SERVER or http://127.0.0.1:8470)")
    p.add_argument("--token", help="your token (default $DLSCHED_TOKEN)")
    p.add_argument(
        "--since", help="jobs submitted from (ISO 8601, Unix seconds, or back from now: 7d)"
    )
    p.add_argument("--until", help="submitted before (default now)")
    p.set_defaults(func=cmd_whatif)
    p = sub.add_parser(
        "report", help="render the HTML report of a simulate or compare output folder"
    )
    p.add_argument("dir", help="a folder written by simulate or compare")
    p.add_argument("--out", help="HTML file (default DIR/report.html)")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser(
        "sweep",
        help="a grid of simulations (policies x loads x ... x seeds) on Ray, cached and "
        "resumable, with confidence intervals",
        description="Run every combination of a sweep spec's axes, per seed, as Ray tasks (an "
        "embedded Ray on every core, or --ray-address); runs done before are skipped. Writes "
        "OUT/sweep.csv, OUT/report.html and each run's outputs under OUT/runs/. Exit code 1 "
        "when some run failed (listed at the end and in OUT/failures.json). The spec's format: "
        "docs/sweeps.md.",
    )
    p.add_argument("spec", help="the sweep spec (YAML)")
    p.add_argument("--out", required=True, help="the sweep's folder (its runs and reports)")
    p.add_argument("--force", action="store_true", help="rerun the runs done before")
    p.add_argument(
        "--sequential",
        action="store_true",
        help="one run after another in this process, without Ray",
    )
    p.add_argument("--cpus", type=int, help="embedded Ray: runs at once (default: every core)")
    p.add_argument("--ray-address", help="an existing Ray cluster (dlsched installed on its nodes)")
    p.add_argument(
        "--ray-token-file",
        help="the cluster's auth token file (as the server's); embedded: default OUT/ray.token",
    )
    p.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)
    p.set_defaults(func=cmd_sweep)
    sub.add_parser("traces", help="list the bundled traces with their job counts").set_defaults(
        func=cmd_traces
    )
    sub.add_parser("policies", help="list the policies").set_defaults(func=cmd_policies)
    perf = sub.add_parser(
        "perf", help="the performance model: its curves and its fit to measurements"
    )
    perf_sub = perf.add_subparsers(dest="perf_command", required=True)
    p = perf_sub.add_parser("validate", help="the model's error on every measured point, per model")
    p.add_argument("--model", help="one model only (default: all)")
    p.add_argument("--points", action="store_true", help="print every point, not only the summary")
    p.set_defaults(func=cmd_perf_validate)
    p = perf_sub.add_parser(
        "predict", help="GENIE's predictor: fitted to small placements, its error on larger ones"
    )
    p.add_argument("--model", help="one model only (default: all)")
    p.set_defaults(func=cmd_perf_predict)
    p = perf_sub.add_parser("show", help="a model's iteration time and throughput by GPU count")
    p.add_argument("model")
    p.add_argument("--batch", type=float, help="per-GPU batch (default: the model's)")
    p.add_argument(
        "--max-gpus", type=int, default=64, help="the largest GPU count shown (default 64)"
    )
    p.add_argument(
        "--gpus-per-node",
        type=int,
        default=4,
        help="GPUs per node of the measured cluster (Pollux's testbed had 4)",
    )
    p.set_defaults(func=cmd_perf_show)
    from .runtime.client import add_client_parsers
    from .runtime.server import add_server_parser

    add_server_parser(sub).set_defaults(func=lambda args: _serve(args))
    add_client_parsers(sub)
    return parser


def _serve(args: Namespace) -> int:
    from .runtime.server import serve

    return serve(args, _key_values(args.param, "param"))


from .runtime.client import ApiError  # noqa: E402  (after the parser helpers it uses)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SpecError as e:
        print(f"dlsched: error: {e}", file=sys.stderr)
        return 2
    except PlanError as e:
        print(f"dlsched: policy error: {e}", file=sys.stderr)
        return 3
    except ApiError as e:
        print(f"dlsched: {e}", file=sys.stderr)
        return 4
    except BrokenPipeError:  # (console_main's)
        raise
    except OSError as e:  # the machine's, not the input's: a full disk, a file gone meanwhile
        print(f"dlsched: error: {e}", file=sys.stderr)
        return 1


def console_main() -> None:
    """The ``dlsched`` command. After a sweep on an embedded Ray cluster it exits at once, its
    outputs written, and leaves the cluster to the reaper that was started with it, which kills
    its processes: Ray's own stop at exit waits on them one by one (1.3-1.8 s here, a third of
    an empty sweep's start and stop)."""
    try:
        code = main()
    except BrokenPipeError:  # the reader went away (``dlsched ... | head``): no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nor one at exit's flush
        sys.exit(128 + 13)  # as a command SIGPIPE ended
    execute = sys.modules.get("dlsched.sweep.execute")
    if execute is not None and execute.started_embedded_ray():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    console_main()
