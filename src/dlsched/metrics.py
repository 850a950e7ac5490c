"""Per-job records, summaries (overall and per tenant) and the time series of a simulation."""

from __future__ import annotations

import csv
import itertools
import json
import math
import operator
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .jobs import JobState

if TYPE_CHECKING:
    from .sim.engine import SimResult
    from .tenant_quotas import TenantConfig

JOB_COLUMNS = (
    "job_id",
    "tenant",
    "num_gpus",
    "model",
    "submit_s",
    "first_start_s",
    "finish_s",
    "jct_s",
    "queue_s",
    "run_s",
    "preemptions",
    "failures",
    "gpu_time_s",
    "duration_s",
    "shared_s",
    "sharing_slowdown",
    "mean_gpus",
    "resizes",
    "resize_lost_gpu_s",
    "deadline_s",
    "qos_class",
    "met_deadline",
)


def job_rows(jobs: list[JobState]) -> list[dict]:
    """One dict per job, the columns of jobs.csv."""
    return list(iter_job_rows(jobs))


def iter_job_rows(jobs: list[JobState]) -> Iterator[dict]:
    """The rows of :func:`job_rows`, one at a time."""
    for values in iter_job_values(jobs):
        yield dict(zip(JOB_COLUMNS, values))


def iter_job_values(jobs: list[JobState]) -> Iterator[tuple]:
    """Each job's values in the order of :data:`JOB_COLUMNS` (jobs.csv is written from these:
    no dict per job, and one at a time)."""
    for j in jobs:
        s = j.spec
        jct = _jct(j)
        run_s = j.run_time_s
        yield (
            s.job_id,
            s.tenant,
            s.num_gpus,
            s.model or "",
            s.submit_time_s,
            j.first_start,
            j.finish,
            jct,
            # queuing delay: time not running between submission and finish (all waits,
            # including after preemptions)
            None if jct is None else jct - run_s,
            run_s,
            j.preemptions,
            j.failures,
            j.attained_gpu_s,
            s.duration_s,
            # time spent sharing a GPU, and the mean slowdown over that time
            j.shared_s,
            _sharing_slowdown(j),
            j.attained_gpu_s / run_s if run_s else None,
            j.resizes,
            j.resize_lost_gpu_s,
            s.deadline_s,
            s.qos_class,
            _met_deadline(j),
        )


def _jct(j: JobState) -> float | None:
    return None if j.finish is None else j.finish - j.spec.submit_time_s


def _sharing_slowdown(j: JobState) -> float | None:
    return j.shared_slowdown_s / j.shared_s if j.shared_s else None


def _met_deadline(j: JobState) -> bool | None:
    deadline = j.spec.deadline_s
    return None if deadline is None else j.finish is not None and j.finish <= deadline


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of an already sorted list."""
    if not sorted_values:
        return math.nan
    k = (len(sorted_values) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def _stats(jobs: list[JobState]) -> dict:
    """The summary's statistics of ``jobs`` (the summary is computed from the jobs' states, not
    from rows: a million rows of dicts would double the memory of a run). One pass over the
    jobs; each sum adds in the jobs' order from 0, as ``sum`` does on Python 3.11 (3.12's
    compensates rounding: the last bits would differ)."""
    jcts: list[float] = []
    never_started = preemptions = failures = resizes = jobs_shared = 0
    queue_s: float
    resize_lost: float
    requested: float
    attained: float
    shared: float
    slowdown_s: float
    queue_s = resize_lost = requested = attained = shared = slowdown_s = 0
    for j in jobs:
        if j.finish is not None:
            jct = j.finish - j.spec.submit_time_s
            jcts.append(jct)
            queue_s += jct - j.run_time_s
        if j.first_start is None:
            never_started += 1
        preemptions += j.preemptions
        failures += j.failures
        resizes += j.resizes
        resize_lost += j.resize_lost_gpu_s
        requested += j.spec.num_gpus * j.run_time_s
        attained += j.attained_gpu_s
        if j.shared_s:
            jobs_shared += 1
            slowdown_s += j.shared_slowdown_s / j.shared_s * j.shared_s
        shared += j.shared_s
    jcts.sort()
    n = len(jcts)
    return {
        "jobs": len(jobs),
        "jobs_completed": n,
        # never ran (a hard quota below its size, the end of the trace): not in the JCTs
        "never_started": never_started,
        "mean_jct_s": sum(jcts) / n if n else math.nan,
        "median_jct_s": percentile(jcts, 50),
        "p95_jct_s": percentile(jcts, 95),
        "p99_jct_s": percentile(jcts, 99),
        "mean_queue_s": queue_s / n if n else math.nan,
        "preemptions": preemptions,
        "failures": failures,
        "resizes": resizes,
        "resize_lost_gpu_s": resize_lost,
        # GPUs held on average, time-weighted, over what the jobs asked for
        "mean_size_vs_requested": attained / requested if requested else None,
        "jobs_shared": jobs_shared,
        "mean_sharing_slowdown": slowdown_s / shared if shared else None,
        # the jobs' GPU-time: each job's GPUs x time held, summed (a GPU two jobs share counts
        # twice); the cluster's allocated GPU-time is in the summary
        "job_gpu_time_s": attained,
    }


def qos_summary(jobs: list[JobState]) -> dict | None:
    """QoS-guarantee percentage (finished by the deadline, of the jobs with one) overall, per
    class and per tenant; lateness of the late jobs (finish - deadline); None when no job has a
    deadline. A job that never finished counts as missed."""
    judged = [j for j in jobs if j.spec.deadline_s is not None]
    if not judged:
        return None
    met = [bool(_met_deadline(j)) for j in judged]  # (once: each is read four times below)

    def share(flags: list[bool]) -> float:
        return 100.0 * sum(flags) / len(flags)

    def grouped(key: str, unnamed: str) -> dict:
        groups: dict[str, list[bool]] = {}
        for j, ok in zip(judged, met):
            groups.setdefault(getattr(j.spec, key) or unnamed, []).append(ok)
        return {k: {"jobs": len(v), "qos_pct": share(v)} for k, v in sorted(groups.items())}

    late = sorted(
        j.finish - j.spec.deadline_s
        for j, ok in zip(judged, met)
        if j.finish is not None and j.spec.deadline_s is not None and not ok
    )
    return {
        "jobs": len(judged),
        "qos_pct": share(met),
        # (a deadline without a class is one the trace gave, as dlsched.qos names it)
        "by_class": grouped("qos_class", "given"),
        "by_tenant": grouped("tenant", ""),
        "late_jobs": len(late),
        "lateness_s": {f"p{q}": percentile(late, q) for q in (50, 95, 99)} if late else None,
    }


def summarize(result: SimResult) -> dict:
    """The summary of a :class:`~dlsched.sim.engine.SimResult`."""
    jobs = result.jobs
    summary = _stats(jobs)
    summary["makespan_s"] = result.end_s - result.start_s
    summary["gpu_utilization"] = (
        result.gpu_busy_s / result.gpu_capacity_s if result.gpu_capacity_s else 0.0
    )
    summary["shared_gpu_time_share"] = (
        result.gpu_shared_s / result.gpu_busy_s if result.gpu_busy_s else 0.0
    )
    summary["allocated_gpu_time_s"] = result.gpu_busy_s  # GPU-seconds with at least one job
    summary["events"] = result.events  # arrivals, completions, switches, node events, wake-ups
    tenants: dict[str, list[JobState]] = {}
    for j in jobs:
        tenants.setdefault(j.spec.tenant, []).append(j)
    summary["tenants"] = {t: _stats(js) for t, js in sorted(tenants.items())}
    qos = qos_summary(jobs)
    summary["qos_pct"] = qos["qos_pct"] if qos else None
    if qos is not None:
        summary["qos"] = qos
    config = result.admission.config if result.admission is not None else None
    fairness = fairness_summary(tenants, result.cluster.pool_gpus("training"), config)
    summary["jain_index"] = fairness["jain_index"] if fairness else None
    summary["fair_share_index"] = (
        fair_share_index(result, entitlements(config)) if fairness else None
    )
    summary["max_tenant_rho"] = fairness["max_tenant_rho"] if fairness else None
    if fairness is not None:
        summary["fairness"] = fairness
    quotas = quota_summary(result)
    if quotas is not None:
        summary["quotas"] = quotas
    pools = pools_summary(result)
    summary["cluster_usage"] = pools["cluster_usage"] if pools else None
    summary["reclaim_preemptions"] = pools["reclaim_preemptions"] if pools else None
    if pools is not None:
        summary["pools"] = pools
    return summary


def fairness_summary(
    tenants: dict[str, list[JobState]], training_gpus: int, config: TenantConfig | None = None
) -> dict | None:
    """Between tenants (None with fewer than two):

    - Jain's index of normalized shares: each tenant's GPU-seconds over its entitlement (its
      nominal quota with quotas, else 1), (sum x)^2 / (n sum x^2): 1 when all are equal;
    - rho per tenant (Themis' finish-time fairness): its jobs' summed JCT over their summed
      time on the tenant's own 1/N of the cluster (N tenants; a job on it takes its duration x
      max(1, its GPUs / (GPUs / N))); and the largest.
    """
    if len(tenants) < 2:
        return None
    share = training_gpus / len(tenants)
    weight = entitlements(config)
    rho, x = {}, []
    for t, js in sorted(tenants.items()):
        # one pass over its jobs: each sum adds in their order from 0, as ``sum`` would
        jcts = isolated = attained = 0.0
        for j in js:
            attained += j.attained_gpu_s
            if j.finish is not None:
                spec = j.spec
                jcts += j.finish - spec.submit_time_s
                size = spec.num_gpus / share  # its size on the tenant's own 1/N
                isolated += spec.duration_s * (size if size > 1.0 else 1.0)
        rho[t] = jcts / isolated if isolated else None
        entitlement = weight(t)
        if entitlement > 0:
            x.append(attained / entitlement)
    jain = (sum(x) ** 2 / (len(x) * sum(v * v for v in x))) if x and any(x) else None
    rhos = [v for v in rho.values() if v is not None]
    return {"jain_index": jain, "rho_by_tenant": rho, "max_tenant_rho": max(rhos) if rhos else None}


def quota_summary(result: SimResult) -> dict | None:
    """With quotas: per tenant its quota, borrowed and lent GPU-hours, jobs evicted to
    reclaim quota or for a higher priority, and jobs never admitted."""
    stage = result.admission
    if stage is None:
        return None
    config = stage.config
    # lenders too, which may have submitted nothing
    tenants = sorted({j.spec.tenant for j in result.jobs} | set(stage.lent_gpu_s))
    never: dict[str, int] = {}
    for j in result.jobs:
        if j.first_start is None:
            never[j.spec.tenant] = never.get(j.spec.tenant, 0) + 1
    return {
        "source": config.source,
        "tenants": {
            t: {
                "nominal_gpus": config.quota(t).nominal,
                "cohort": config.quota(t).cohort,
                "borrowing_limit": config.quota(t).borrowing_limit,
                "lending_limit": config.quota(t).lending_limit,
                "borrowed_gpu_h": stage.borrowed_gpu_s.get(t, 0.0) / 3600,
                "lent_gpu_h": stage.lent_gpu_s.get(t, 0.0) / 3600,
                "evicted": stage.evictions.get(t, 0),
                "never_started": never.get(t, 0),
            }
            for t in tenants
        },
        "evictions": sum(stage.evictions.values()),
    }


def pools_summary(result: SimResult) -> dict | None:
    """Capacity loaning (Aryl): loans and reclaims, the preemptions reclaims caused, the
    inference shortfall (server-seconds it needed and lacked: must be 0) and the cluster usage
    of both pools together as Aryl defines it (GPUs training holds plus GPUs inference needs,
    over all GPUs), from the first to the last arrival (the window every policy shares; a
    policy's long tail would otherwise dilute it); None without an inference demand curve."""
    demand = result.config.inference_demand
    if demand is None:
        return None
    span = result.end_s - result.start_s
    window = result.arrivals_end_s - result.start_s
    loaning = result.loaning
    stats = loaning.stats
    return {
        "demand": demand.source,
        "inference_servers": demand.servers,
        "peak_share": demand.peak_share,
        "reclaim_notice_s": result.config.reclaim_notice_s,
        "cluster_usage": (
            (result.gpu_busy_arrivals_s + loaning.inference_gpu_arrivals_s)
            / (result.cluster.num_gpus * window)
            if window > 0
            else None
        ),
        "inference_usage": (
            loaning.inference_gpu_s / (result.cluster.pool_gpus("inference") * span)
            if span > 0
            else 0.0
        ),
        "mean_loaned_servers": loaning.loaned_server_s / span if span > 0 else 0.0,
        "loans": stats.loans,
        "reclaims": stats.reclaims,
        "returned": stats.returned,
        "returned_late": stats.returned_late,
        "reclaim_scale_ins": stats.reclaim_scale_ins,
        "reclaim_preemptions": stats.reclaim_preemptions + stats.forced_preemptions,
        "forced_preemptions": stats.forced_preemptions,
        "mean_return_s": stats.return_wait_s / stats.returned if stats.returned else None,
        "inference_shortfall_server_s": loaning.short_server_s,
        "inference_max_shortfall": max(0, loaning.max_short),
    }


def _within_one_bin(
    seg_start: float, seg_end: float, b: int, start: float, width: float, bins: int
) -> float | None:
    """The overlap of [seg_start, seg_end) with bin ``b``, where it begins, when it is the only
    piece :func:`_bin_pieces` would give (its same arithmetic: outputs stay byte for byte);
    else None. Most steps of a series lie in one bin: this is their path without a generator."""
    bin_end = start + (b + 1) * width if b < bins - 1 else seg_end
    piece = (seg_end if seg_end <= bin_end else bin_end) - seg_start
    return piece if piece > 0 and seg_start + piece >= seg_end else None


def _bin_pieces(
    seg_start: float, seg_end: float, start: float, width: float, bins: int
) -> Iterator[tuple[int, float]]:
    """(bin, overlap) for each of the equal bins [start + b x width, ...) that [seg_start,
    seg_end) overlaps; the last bin takes whatever runs past the end."""
    b = min(bins - 1, int((seg_start - start) / width))
    while seg_start < seg_end:
        bin_end = start + (b + 1) * width if b < bins - 1 else seg_end
        piece = min(seg_end, bin_end) - seg_start
        if piece <= 0:
            return
        yield b, piece
        seg_start += piece
        b += 1


def _spread(
    area: list[float], held: int, begin: float, until: float, start: float, width: float, bins: int
) -> None:
    """Add ``held`` over [begin, until) to ``area``, the equal bins from ``start``."""
    b = min(bins - 1, int((begin - start) / width))
    piece = _within_one_bin(begin, until, b, start, width, bins)
    if piece is not None:
        area[b] += held * piece
        return
    for b, piece in _bin_pieces(begin, until, start, width, bins):
        area[b] += held * piece


def binned_timeseries(result: SimResult, max_bins: int = 1000) -> list[dict]:
    """Time-weighted means of queue length and utilization in equal bins (at most max_bins),
    plus each bin's peak queue: the step series can hold hundreds of thousands of points."""
    t, q, used, usable = result.ts_time, result.ts_queue, result.ts_used, result.ts_usable
    loaned, needed = result.loaning.ts_loaned, result.loaning.ts_inference
    if not t:
        return []
    start, end = result.start_s, max(result.end_s, t[-1])
    span = end - start
    if span <= 0:
        return [
            {
                "time_s": start,
                "queue_mean": q[0],
                "queue_max": q[0],
                "utilization": used[0] / usable[0] if usable[0] else 0.0,
                "loaned_servers": loaned[0],
                "inference_servers": needed[0],
            }
        ]
    bins = max(1, min(max_bins, len(t)))
    width = span / bins
    last = bins - 1
    q_area = [0.0] * bins
    q_max = [0] * bins
    u_area = [0.0] * bins
    l_area = [0.0] * bins
    n_area = [0.0] * bins
    # each step until the next one (the last until the end), its values zipped, not indexed,
    # and no min or max called: 157,000 steps in a replay of Philly, half the time as before
    ends = itertools.chain(itertools.islice(t, 1, None), (end,))
    for begin, until, qk, uk, usk, lk, nk in zip(t, ends, q, used, usable, loaned, needed):
        first = int((begin - start) / width)  # a step counts where it begins
        if first > last:
            first = last
        if qk > q_max[first]:
            q_max[first] = qk
        if begin >= until:
            continue
        util = uk / usk if usk else 0.0
        piece = _within_one_bin(begin, until, first, start, width, bins)
        if piece is not None:
            q_area[first] += qk * piece
            u_area[first] += util * piece
            l_area[first] += lk * piece
            n_area[first] += nk * piece
            continue
        for b, piece in _bin_pieces(begin, until, start, width, bins):
            q_area[b] += qk * piece
            u_area[b] += util * piece
            l_area[b] += lk * piece
            n_area[b] += nk * piece
            if qk > q_max[b]:
                q_max[b] = qk
    return [
        {
            "time_s": start + (b + 0.5) * width,
            "queue_mean": q_area[b] / width,
            "queue_max": q_max[b],
            "utilization": u_area[b] / width,
            "loaned_servers": l_area[b] / width,
            "inference_servers": n_area[b] / width,
        }
        for b in range(bins)
    ]


def entitlements(config: TenantConfig | None = None) -> Callable[[str], float]:
    """A tenant's entitlement: its nominal quota under ``config`` (quotas), else 1."""
    if config is None:
        return lambda tenant: 1.0
    return lambda tenant: config.quota(tenant).nominal


# Chosen: the instants the fair-share index averages over (a replay of Philly has 330,000
# changes of demand and holdings; an instant costs a max-min allocation among its tenants)
FAIR_SHARE_INSTANTS = 1000


def fair_share_index(
    result: SimResult, weight: Callable[[str], float], instants: int = FAIR_SHARE_INSTANTS
) -> float | None:
    """How evenly the tenants that compete get their fair shares, over time: at each of
    ``instants`` instants evenly spaced from the first submit to the end, the tenants with work
    (jobs submitted and not finished) and an entitlement (``weight``) above 0 compete; each one's
    fair share is its max-min fair allocation of the GPUs usable then, weighted by
    entitlement and capped at its demand (the GPUs its jobs ask for); Jain's index of each
    tenant's GPUs held over its fair share, averaged over the instants where at least two
    tenants compete and one holds a GPU. 1: each got its share at every instant; 1/n: one of
    n held everything. Unlike ``jain_index`` (GPU time over the whole trace, which equals the
    demand once every job has run) it tells policies apart. None when no instant counts."""
    log, jobs = result.tenant_log, result.jobs
    start, end = result.start_s, result.end_s
    if not len(log) or end <= start:
        return None
    # the jobs are in submit order; their finishes sorted (references, not copies: the replay's
    # peak memory is close by)
    finished = sorted((j for j in jobs if j.finish is not None), key=operator.attrgetter("finish"))
    # the GPUs usable then (down nodes out, loaned servers in), from the result's step series
    usable_times, usable = result.ts_time, result.ts_usable
    stepped, capacity = 0, 0
    demand: dict[str, int] = {}
    # GPUs held by the log's tenant numbers, read from its columns (it has a row per change)
    held = [0] * len(log.names)
    number = {name: i for i, name in enumerate(log.names)}
    times, tenants, gpus_held = log.times, log.tenants, log.held
    submitted = ended = logged = 0
    n_jobs, n_finished = len(jobs), len(finished)
    total = counted = 0.0
    width = (end - start) / instants
    for k in range(instants):
        now = start + (k + 0.5) * width
        while submitted < n_jobs and jobs[submitted].spec.submit_time_s <= now:
            spec = jobs[submitted].spec
            demand[spec.tenant] = demand.get(spec.tenant, 0) + spec.num_gpus
            submitted += 1
        while ended < n_finished and (finished[ended].finish or 0.0) <= now:
            spec = finished[ended].spec
            demand[spec.tenant] -= spec.num_gpus
            ended += 1
        # the log's rows and the usable steps up to now: found by bisection, read as slices
        upto = bisect_right(times, now, logged)
        for tenant_number, gpus in zip(tenants[logged:upto], gpus_held[logged:upto]):
            held[tenant_number] = gpus
        logged = upto
        upto = bisect_right(usable_times, now, stepped)
        if upto > stepped:
            capacity, stepped = usable[upto - 1], upto
        competing = {t: d for t, d in demand.items() if d > 0 and weight(t) > 0}
        if len(competing) < 2 or not capacity:
            continue
        shares = [
            (held[number[t]] if t in number else 0) / fair
            for t, fair in _max_min(competing, weight, capacity)
        ]
        squares = sum(x * x for x in shares)
        if squares:
            total += sum(shares) ** 2 / (len(shares) * squares)
            counted += 1
    return total / counted if counted else None


def _max_min(demand: dict[str, int], weight: Callable[[str], float], capacity: float) -> list:
    """(tenant, its allocation) when ``capacity`` is shared max-min fairly by weight, no tenant
    above its demand: the tenants asking least per unit of weight are filled first."""
    order = sorted(demand, key=lambda t: demand[t] / weight(t))
    left, weights = float(capacity), sum(weight(t) for t in order)
    allocation = []
    for tenant in order:
        w = weight(tenant)
        share = min(demand[tenant], left * w / weights)
        allocation.append((tenant, share))
        left -= share
        weights -= w
    return allocation


def binned_tenant_usage(result: SimResult, bins: int = 200) -> list[dict]:
    """Per tenant, the time-weighted mean of the GPUs its jobs held in equal bins."""
    log = result.tenant_log
    tenants = sorted(log.names)
    if len(tenants) < 2:
        return []
    start, end = result.start_s, max(result.end_s, log.times[-1])
    if end <= start:
        return []
    width = (end - start) / bins
    # by the log's tenant numbers, read from its columns (a row per change: 164,000 in a replay
    # of Philly): each one's areas, and how many GPUs it holds since when
    count = len(log.names)
    areas = [[0.0] * bins for _ in range(count)]
    since, holding = [start] * count, [0] * count
    for t, number, held in zip(log.times, log.tenants, log.held):
        if holding[number] and since[number] < t:
            _spread(areas[number], holding[number], since[number], t, start, width, bins)
        since[number], holding[number] = t, held
    for number in range(count):
        if holding[number] and since[number] < end:
            _spread(areas[number], holding[number], since[number], end, start, width, bins)
    area = dict(zip(log.names, areas))
    return [
        {"time_s": start + (b + 0.5) * width, "tenant": tenant, "gpus": area[tenant][b] / width}
        for b in range(bins)
        for tenant in tenants
    ]


def write_outputs(
    result: SimResult, out_dir: str | Path, summary: dict, rows: Iterable[dict] | None = None
) -> None:
    """Write summary.json, jobs.csv (``rows``: :func:`job_rows` when made already; None: from
    the jobs, one at a time) and timeseries.csv."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if rows is None:
        _write_csv(out / "jobs.csv", JOB_COLUMNS, iter_job_values(result.jobs), dicts=False)
    else:
        _write_csv(out / "jobs.csv", JOB_COLUMNS, rows)
    series = binned_timeseries(result)
    _write_csv(
        out / "timeseries.csv",
        ("time_s", "queue_mean", "queue_max", "utilization", "loaned_servers", "inference_servers"),
        series,
    )
    usage = binned_tenant_usage(result)
    if usage:
        _write_csv(out / "tenants_timeseries.csv", ("time_s", "tenant", "gpus"), usage)
    tmp = out / "summary.json.tmp"
    tmp.write_text(json_text(summary) + "\n")
    tmp.replace(out / "summary.json")


def json_text(value: Any) -> str:
    """``value`` as JSON that any parser reads: a number that is not finite (the mean JCT of
    no completed jobs) is null, as JSON has no NaN; other objects are written as text."""
    return json.dumps(_finite(value), indent=2, default=str, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _write_csv(path: Path, columns: Sequence[str], rows: Iterable, dicts: bool = True) -> None:
    """Each row a dict with every column, taken by one itemgetter (csv.DictWriter looks each up
    through a generator of ``get`` calls: Philly's three outputs took 0.96 s that way, 0.89 s
    this), or (``dicts`` false) a tuple of the columns' values."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        w.writerows(map(operator.itemgetter(*columns), rows) if dicts else rows)
    tmp.replace(path)
