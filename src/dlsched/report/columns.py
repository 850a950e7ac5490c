"""The summary columns every table shows (the CLI's and the HTML report's), how each is
formatted, and the HTML reports' style. No plotting here: the CLI prints tables without loading
matplotlib."""

from __future__ import annotations

import math
from typing import Any

# The HTML reports' style (a comparison's and a sweep's): a value never breaks across lines
# ("12.76 d" broke into two), in a type small enough that every column of a comparison fits
PAGE_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}"
    "table{border-collapse:collapse;margin-bottom:1em;font-size:0.9em}"
    "td,th{border:1px solid #ccc;padding:4px 6px;text-align:right}td{white-space:nowrap}"
    "tr th:first-child{text-align:left;white-space:nowrap}"
    ".plots svg{max-width:100%;height:auto}"
)

COLUMNS = (
    ("jobs", "jobs", "{:,}"),
    ("jobs_completed", "completed", "{:,}"),
    ("never_started", "never ran", "{:,}"),
    ("mean_jct_s", "mean JCT", "dur"),
    ("median_jct_s", "median JCT", "dur"),
    ("p95_jct_s", "p95 JCT", "dur"),
    ("p99_jct_s", "p99 JCT", "dur"),
    ("mean_queue_s", "mean queuing", "dur"),
    ("makespan_s", "makespan", "dur"),
    ("gpu_utilization", "GPU util.", "{:.1%}"),
    ("shared_gpu_time_share", "shared", "{:.1%}"),
    ("preemptions", "preemptions", "{:,}"),
    ("qos_pct", "QoS met", "{:.1f}%"),
    ("cluster_usage", "usage (both pools)", "{:.1%}"),
    ("reclaim_preemptions", "reclaim preempt.", "{:,}"),
    ("fair_share_index", "fair shares (Jain)", "{:.3f}"),
    ("max_tenant_rho", "max rho", "{:.2f}"),
)

# What a sweep may report: the columns, and summary figures no table shows (the same for every
# policy once every job has run: docs/tenancy.md)
METRICS = (*COLUMNS, ("jain_index", "Jain (GPU time)", "{:.3f}"))


SHOWN_WHEN_NONZERO = {"never_started"}


def shown_columns(summaries: list[dict]) -> list[tuple[str, str, str]]:
    """The columns with a value in some summary (QoS only when jobs have deadlines, pools only
    with an inference demand curve; jobs that never ran only when some did not)."""
    return [
        c
        for c in COLUMNS
        if any(s.get(c[0]) for s in summaries)
        or (c[0] not in SHOWN_WHEN_NONZERO and any(s.get(c[0]) is not None for s in summaries))
    ]


def human_duration(seconds: float | None) -> str:
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    s = float(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.2f} {unit}"
    return f"{s:.1f} s"


def format_cell(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    return human_duration(value) if fmt == "dur" else fmt.format(value)
