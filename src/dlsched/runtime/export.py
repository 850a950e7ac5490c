"""The server's history as a trace the simulator replays (``dlsched export``, ``GET /v1/export``).

Each job that finished, runs, waits or was cancelled after it ran becomes one row: its spec
(submit, GPUs, elastic range, batch, iterations, model, priority, deadline), the duration the
server's policy believed before it ran (the user's estimate, or iterations x its profiling run's
time or the default), and what its runs measured: the iteration time alone on its requested GPUs
(:func:`.measure.solo_iteration_s`), its pauses before the first iteration at a start and at a
restart, its slowdown while it shared a GPU, its profiling run's memory, compute line and (GENIE)
times on other placements, and how long profiling held it before it could be scheduled. The
outcome the server got (start, end, JCT, preemptions) rides along, so that a replay under the
same policy can be held against it (:mod:`dlsched.replay`). A waiting or running job not yet
measured is timed by its profiling run or, without one, by its duration estimate
(``iteration_source``); a cancelled job is exported with the iterations it ran, so a replay
gives it the GPU time it had. Times are seconds after the first exported submission; ``t0`` is
that submission in Unix seconds.
"""

from __future__ import annotations

import csv
import io
import statistics
from dataclasses import replace

from ..errors import SpecError
from ..node_events import MAX_NODE_EVENTS
from .jobspec import to_job_spec
from .measure import JobMeter, shared_slowdown, solo_iteration_s
from .speed import RuntimeSpeed
from .store import CANCELLED, DONE, QUEUED, RUNNING, Store

# The columns of the export format, in order (dlsched.traces.history reads them back).
COLUMNS = (
    "job_id",
    "tenant",
    "submit_s",
    "gpus",
    "min_gpus",
    "max_gpus",
    "batch_size",
    "iterations",
    "iteration_s",
    "iteration_source",
    "estimate_s",
    "model",
    "priority",
    "deadline_s",
    "startup_s",
    "restart_s",
    "slowdown",
    "profile_s",
    "fixed_mib",
    "per_sample_mib",
    "c0_s",
    "c1_s",
    "local_batch",
    "placements",
    "status",
    "start_s",
    "end_s",
    "jct_s",
    "preemptions",
)
PROFILE_FIELDS = ("fixed_mib", "per_sample_mib", "c0_s", "c1_s", "local_batch")
EXPORTED = (DONE, RUNNING, QUEUED, CANCELLED)
MAX_EXPORT_JOBS = 100_000  # one export's rows (a bound on the answer's size)


def _profiling_s(store: Store, job_id: str, submitted: float) -> float | None:
    """From submission to the end of its profiling run (None: it was not profiled)."""
    done = [e["t"] for e in store.events(job_id) if e["message"] == "profiled"]
    return done[0] - submitted if done else None


def export_history(
    store: Store,
    cluster_spec: str,
    policy: str,
    params: dict,
    since: float = 0.0,
    until: float = float("inf"),
    tenant_id: str | None = None,
    node_names: list[str] | None = None,
) -> dict:
    """Jobs submitted in [since, until) that finished, run, wait or were cancelled after they
    ran, as trace rows; with ``node_names`` (the cluster's nodes, in its spec's order), the
    nodes lost and back, out of service and back before ``until``, as the simulator's node
    events (one before the first submission at it)."""
    rows = [
        r
        for r in store.jobs(tenant_id=tenant_id, statuses=EXPORTED)
        if since <= r["submitted"] < until
    ]
    if len(rows) > MAX_EXPORT_JOBS:
        raise SpecError(
            "since",
            f"{len(rows)} jobs match; export at most {MAX_EXPORT_JOBS} at once "
            "(narrow since/until)",
        )
    speed = RuntimeSpeed()
    ran = []
    skipped: dict[str, int] = {}
    for row in rows:
        spec = to_job_spec(
            row["spec"], row["id"], row["tenant_id"], row["submitted"], row["profile"]
        )
        if row["status"] == CANCELLED:
            if not row["iteration"]:
                skipped["cancelled before it ran"] = skipped.get("cancelled before it ran", 0) + 1
                continue
            spec = replace(spec, iterations=row["iteration"])  # the work it was given
        if row["profile"]:
            speed.profiles[row["id"]] = row["profile"]
        meter = JobMeter.load(row["measured"])
        solo = solo_iteration_s(meter, spec, speed)
        ran.append((row, spec, meter, solo, solo and shared_slowdown(meter, spec, speed, solo[0])))
    # a job that only ever ran shared: alone, it would have run the typical slowdown faster
    typical_slowdown = statistics.median([x for *_, x in ran if x] or [speed.typical_slowdown()])
    typical = {
        "startup_s": statistics.median(
            [s for _, _, m, *_ in ran for s in m.start_pauses()] or [0.0]
        ),
        "restart_s": statistics.median(
            [s for _, _, m, *_ in ran for s in m.restart_pauses()] or [0.0]
        ),
        "slowdown": typical_slowdown,
    }
    measured = []
    for row, spec, meter, solo, slowdown in ran:
        solo = solo or solo_iteration_s(meter, spec, speed, typical_slowdown)
        if solo is None and row["iteration_s"]:
            solo = (row["iteration_s"], "reported")  # too short for a whole measured stretch
        if solo is None and row["status"] == DONE and not (row["preemptions"] or row["failures"]):
            # done before any progress was seen: its one run, less its start-up
            pause = meter.start_pauses()[0] if meter.starts else typical["startup_s"]
            run_s = row["finished"] - row["started"] - pause
            solo = (max(run_s, 0.001) / spec.iterations, "whole-run")
        if solo is None and row["status"] in (QUEUED, RUNNING) and spec.iterations:
            solo = (spec.duration_s / spec.iterations, "estimate")  # what the server believed
        if solo is None:
            skipped["no iteration measured yet"] = skipped.get("no iteration measured yet", 0) + 1
            continue
        measured.append((row, spec, meter, solo, slowdown))
    t0 = min((r["submitted"] for r, *_ in measured), default=0.0)

    def rel(t: float | None) -> float | None:
        return None if t is None else round(t - t0, 3)

    jobs: list[dict] = []
    for row, spec, meter, (iteration_s, source), slowdown in measured:
        profile = row["profile"] or {}
        jobs.append(
            {
                "job_id": row["id"],
                "tenant": row["tenant_id"],
                "submit_s": rel(row["submitted"]),
                "gpus": spec.num_gpus,
                "min_gpus": spec.min_gpus,
                "max_gpus": spec.max_gpus,
                "batch_size": spec.batch_size,
                "iterations": spec.iterations,
                "iteration_s": round(iteration_s, 6),
                "iteration_source": source,
                "estimate_s": round(spec.duration_s, 3),
                "model": row["spec"]["entrypoint"],
                "priority": spec.priority,
                "deadline_s": rel(spec.deadline_s),
                "startup_s": round(statistics.mean(meter.start_pauses()), 3)
                if meter.starts
                else typical["startup_s"],
                "restart_s": round(statistics.mean(meter.restart_pauses()), 3)
                if meter.restarts
                else typical["restart_s"],
                "slowdown": slowdown,
                "profile_s": _profiling_s(store, row["id"], row["submitted"])
                if row["profile"]
                else None,
                **{k: profile.get(k) for k in PROFILE_FIELDS},
                "placements": format_placements(profile.get("placements")),
                "status": row["status"],
                "start_s": rel(row["started"]),
                "end_s": rel(row["finished"]),
                "jct_s": None
                if row["finished"] is None
                else round(row["finished"] - row["submitted"], 3),
                "preemptions": row["preemptions"],
            }
        )
    index = {name: i for i, name in enumerate(node_names or ())}
    node_events = [
        (max(0.0, round(t - t0, 3)), kind, index[node])
        for t, kind, node in (store.node_events(until) if node_names else ())
        if node in index  # (a node no longer in the cluster)
    ]
    if len(node_events) > MAX_NODE_EVENTS:
        raise SpecError(
            "until", f"{len(node_events)} node events before it; at most {MAX_NODE_EVENTS}"
        )
    return {
        "cluster": cluster_spec,
        "policy": policy,
        "params": params,
        "t0": t0,
        "node_events": node_events,
        "typical": typical,
        "columns": list(COLUMNS),
        "jobs": jobs,
        "skipped": skipped,
    }


def format_placements(placements: list[dict] | None) -> str | None:
    """GENIE's profiled placements as one cell: ``gpus/nodes/batch/iteration_s`` entries
    separated by ``;`` (:func:`dlsched.traces.history.parse_placements` reads it back)."""
    if not placements:
        return None
    return ";".join(
        f"{p['gpus']}/{p['nodes']}/{p['batch']:g}/{p['iteration_s']:.6g}" for p in placements
    )


def history_csv(history: dict) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
    writer.writeheader()
    for job in history["jobs"]:
        writer.writerow({k: "" if job.get(k) is None else job[k] for k in COLUMNS})
    return out.getvalue()
