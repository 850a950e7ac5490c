"""Render simulation outputs (one or more run folders) as one self-contained HTML page:
a summary table, the JCT CDF per policy, utilization and queue length over time, and per-tenant
bars. Plots are inline SVG from matplotlib, so the page has no other files."""

from __future__ import annotations

import csv
import html
import json
from pathlib import Path

from ..errors import SpecError
from .columns import PAGE_STYLE, format_cell, shown_columns
from .plots import plt, scaling_figure_svg, svg_of


def load_run(run_dir: Path) -> dict:
    """A run folder's outputs; one that is not whole (a file missing, cut or not a run's) is an
    error naming the folder (a folder given to ``dlsched report`` may be anything)."""
    try:
        return _read_run(run_dir)
    except (OSError, ValueError, LookupError, StopIteration, TypeError, AttributeError) as e:
        raise SpecError(
            "dir", f"{run_dir} is not a whole simulation output ({type(e).__name__}: {e})"
        ) from None


def _read_run(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    if not isinstance(summary, dict):
        raise ValueError("summary.json does not hold a summary")
    jcts, late = _jcts_and_lateness(run_dir / "jobs.csv")
    with (run_dir / "timeseries.csv").open() as f:
        series = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
    tenants: dict[str, list[tuple[float, float]]] = {}
    if (run_dir / "tenants_timeseries.csv").is_file():
        with (run_dir / "tenants_timeseries.csv").open() as f:
            for r in csv.DictReader(f):
                tenants.setdefault(r["tenant"], []).append((float(r["time_s"]), float(r["gpus"])))
    return {
        "name": summary.get("policy", run_dir.name),
        "summary": summary,
        "jcts": jcts,
        "late": late,
        "series": series,
        "tenant_series": tenants,
    }


def _jcts_and_lateness(jobs_csv: Path) -> tuple[list[float], list[float]]:
    """The finished jobs' JCTs, and how late those that missed their deadline finished, each
    sorted (rows read by column position: a run's jobs.csv has a row per job)."""
    jcts, late = [], []
    with jobs_csv.open(newline="") as f:
        rows = csv.reader(f)
        column = {name: i for i, name in enumerate(next(rows))}
        jct, finish = column["jct_s"], column["finish_s"]
        met, deadline = column.get("met_deadline"), column.get("deadline_s")
        for row in rows:
            if row[jct]:
                jcts.append(float(row[jct]))
            if met is not None and deadline is not None and row[met] == "False" and row[finish]:
                late.append(float(row[finish]) - float(row[deadline]))
    jcts.sort()
    late.sort()
    return jcts, late


def _cdf_plot(
    runs: list[dict],
    key: str = "jcts",
    xlabel: str = "job completion time (hours, log scale)",
    title: str = "JCT distribution",
) -> str:
    fig, ax = plt.subplots(figsize=(7, 4))
    for run in runs:
        xs = run[key]
        if not xs:
            continue
        step = max(1, len(xs) // 2000)  # thin the curve; keep the last point
        pts = xs[::step] + ([xs[-1]] if (len(xs) - 1) % step else [])
        ys = [min(1.0, (i * step + 1) / len(xs)) for i in range(len(pts))]
        ys[-1] = 1.0
        ax.plot([max(p, 1.0) / 3600 for p in pts], ys, label=run["name"])
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of jobs")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend()
    else:  # (the lateness plot is drawn only with late jobs)
        ax.text(0.5, 0.5, "no job finished", ha="center", transform=ax.transAxes)
    ax.set_title(title)
    return svg_of(fig)


def _qos_section(runs: list[dict]) -> str:
    """With deadlines: the QoS-guarantee % per policy and class, and the lateness CDF."""
    if not any(r["summary"].get("qos") for r in runs):
        return ""
    classes = sorted({c for r in runs for c in (r["summary"].get("qos") or {}).get("by_class", {})})
    head = "".join(f"<th>{html.escape(c)}</th>" for c in classes)
    body = ""
    for run in runs:
        q = run["summary"].get("qos") or {}
        cells = "".join(
            f"<td>{q['by_class'][c]['qos_pct']:.1f}%</td>"
            if c in q.get("by_class", {})
            else "<td>-</td>"
            for c in classes
        )
        body += (
            f"<tr><th>{html.escape(run['name'])}</th><td>{q.get('qos_pct', 0):.1f}%</td>{cells}"
            f"<td>{q.get('late_jobs', 0):,}</td></tr>"
        )
    late = (
        _cdf_plot(
            runs,
            "late",
            "lateness of the late jobs (hours, log scale)",
            "Lateness (finish - deadline)",
        )
        if any(r["late"] for r in runs)
        else ""
    )
    return (
        f"<h2>Deadlines</h2><table><tr><th>policy</th><th>QoS met</th>{head}<th>late "
        f"jobs</th></tr>{body}</table>" + late
    )


def _series_plot(runs: list[dict], key: str, label: str, title: str, percent: bool = False) -> str:
    fig, ax = plt.subplots(figsize=(7, 3))
    for run in runs:
        s = run["series"]
        if s:
            t0 = s[0]["time_s"]
            ax.plot(
                [(p["time_s"] - t0) / 86400 for p in s],
                [p[key] * (100 if percent else 1) for p in s],
                label=run["name"],
                linewidth=1,
            )
    ax.set_xlabel("days since the first submission")
    ax.set_ylabel(label)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title)
    return svg_of(fig)


def _tenant_plot(runs: list[dict]) -> str:
    tenants = sorted({t for r in runs for t in r["summary"].get("tenants", {})})
    if not tenants:
        return ""
    fig, ax = plt.subplots(figsize=(max(7, len(tenants) * 0.6), 3.5))
    width = 0.8 / max(1, len(runs))
    longest = 0.0
    for k, run in enumerate(runs):
        per = run["summary"].get("tenants", {})
        # (no mean: none of the tenant's jobs finished)
        vals = [(per.get(t, {}).get("mean_jct_s") or 0) / 3600 for t in tenants]
        longest = max(longest, *vals)
        ax.bar([i + k * width for i in range(len(tenants))], vals, width, label=run["name"])
    ax.set_xticks([i + width * (len(runs) - 1) / 2 for i in range(len(tenants))])
    ax.set_xticklabels(tenants, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("mean JCT (hours)")
    if longest > 0:  # (a log scale of nothing but zeros is an empty plot and a warning)
        ax.set_yscale("log")
    # beside the bars: inside, wherever it went, it hid some of them
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title("Mean JCT per tenant")
    return svg_of(fig)


def _pools_section(runs: list[dict]) -> str:
    """Capacity loaning: the counts per policy, and inference demand vs loaned servers."""
    loaning = [r for r in runs if r["summary"].get("pools")]
    if not loaning:
        return ""
    keys = (
        ("loans", "loans", "{:,}"),
        ("reclaims", "reclaims", "{:,}"),
        ("reclaim_scale_ins", "scale-ins", "{:,}"),
        ("reclaim_preemptions", "preemptions", "{:,}"),
        ("forced_preemptions", "at the deadline", "{:,}"),
        ("mean_loaned_servers", "servers loaned (mean)", "{:.1f}"),
        ("cluster_usage", "usage (both pools)", "{:.1%}"),
        ("inference_shortfall_server_s", "inference shortfall (server-s)", "{:g}"),
    )
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label, _ in keys)
    body = "".join(
        f"<tr><th>{html.escape(r['name'])}</th>"
        + "".join(
            f"<td>{format_cell(r['summary']['pools'].get(k), fmt)}</td>" for k, _, fmt in keys
        )
        + "</tr>"
        for r in loaning
    )
    fig, ax = plt.subplots(figsize=(7, 3))
    first = loaning[0]["series"]
    if first:
        t0 = first[0]["time_s"]
        ax.plot(
            [(p["time_s"] - t0) / 86400 for p in first],
            [p.get("inference_servers", 0) for p in first],
            color="black",
            linewidth=1,
            label="inference needs",
        )
    for run in loaning:
        s = run["series"]
        if s:
            ax.plot(
                [(p["time_s"] - s[0]["time_s"]) / 86400 for p in s],
                [p.get("loaned_servers", 0) for p in s],
                linewidth=1,
                label=f"loaned ({run['name']})",
            )
    ax.set_xlabel("days since the first submission")
    ax.set_ylabel("inference servers")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Inference demand vs servers loaned to training")
    pools = loaning[0]["summary"]["pools"]
    return (
        f"<h2>Capacity loaning</h2><p>{pools['inference_servers']} inference servers, demand "
        f"<b>{html.escape(str(pools['demand']))}</b> (peak {pools['peak_share']:.0%} of the pool), "
        f"reclaim notice {pools['reclaim_notice_s']:g} s.</p>"
        f"<table><tr><th>policy</th>{head}</tr>{body}</table>" + svg_of(fig)
    )


def _tenant_usage_section(runs: list[dict]) -> str:
    """GPUs held per tenant over time, one panel per policy (with its quota when it has one)."""
    shown = [r for r in runs if r["tenant_series"]][:6]
    if not shown:
        return ""
    fig, axes = plt.subplots(
        len(shown), 1, figsize=(8, 2.4 * len(shown)), sharex=True, squeeze=False
    )
    dotted = False  # a nominal quota drawn
    for ax, run in zip(axes[:, 0], shown):
        quotas = (run["summary"].get("quotas") or {}).get("tenants", {})
        for tenant, points in sorted(run["tenant_series"].items()):
            t0 = points[0][0]
            (line,) = ax.plot(
                [(t - t0) / 86400 for t, _ in points],
                [g for _, g in points],
                linewidth=0.8,
                label=tenant,
            )
            if tenant in quotas and quotas[tenant]["nominal_gpus"]:
                dotted = True
                ax.axhline(
                    quotas[tenant]["nominal_gpus"],
                    color=line.get_color(),
                    linewidth=0.6,
                    linestyle=":",
                )
        ax.set_title(run["name"], fontsize=9)
        ax.set_ylabel("GPUs held")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=6, ncol=5)
    axes[-1, 0].set_xlabel(
        "days since the first submission" + (" (dotted: nominal quota)" if dotted else "")
    )
    fig.tight_layout()
    return "<h2>GPUs per tenant over time</h2>" + svg_of(fig)


def _perf_section(runs: list[dict]) -> str:
    if not any(r["summary"].get("performance_model") for r in runs):
        return ""
    return (
        "<h2>Performance model</h2><p>Job speeds came from the performance model; "
        "its fit to the measurements (<code>dlsched perf validate</code>):</p>"
        + scaling_figure_svg()
    )


def render_report(run_dirs: list[Path], out_file: Path, title: str = "dlsched report") -> Path:
    runs = [load_run(Path(d)) for d in run_dirs]
    if not runs:
        raise ValueError("no runs to report")
    columns = shown_columns([r["summary"] for r in runs])
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label, _ in columns)
    body = ""
    for run in runs:
        s = run["summary"]
        cells = "".join(f"<td>{format_cell(s.get(k), fmt)}</td>" for k, _, fmt in columns)
        body += f"<tr><th>{html.escape(run['name'])}</th>{cells}</tr>"
    first = runs[0]["summary"]
    dropped = first.get("dropped") or {}
    context = (
        f"Trace <b>{html.escape(str(first.get('trace', '?')))}</b> on "
        f"<b>{html.escape(str(first.get('cluster', '?')))}</b>; {first.get('jobs', 0):,} jobs"
        + (
            f"; rows left out: "
            f"{html.escape(', '.join(f'{n:,} {why}' for why, n in dropped.items()))}"
            if dropped
            else ""
        )
        + (
            "; job speeds from the performance model"
            if first.get("performance_model")
            else "; every job at its trace speed"
        )
    )
    params = "".join(
        f"<li><b>{html.escape(r['name'])}</b>: "
        f"{html.escape(json.dumps(r['summary'].get('params', {})))}</li>"
        for r in runs
    )
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{PAGE_STYLE}</style></head><body>
<h1>{html.escape(title)}</h1>
<p>{context}</p>
<table><tr><th>policy</th>{head}</tr>{body}</table>
<div class="plots">{_cdf_plot(runs)}
{_series_plot(runs, "utilization", "allocated GPUs (%)", "GPU utilization over time", percent=True)}
{_series_plot(runs, "queue_mean", "jobs waiting", "Queue length over time")}
{_tenant_plot(runs)}
{_qos_section(runs)}
{_tenant_usage_section(runs)}
{_pools_section(runs)}
{_perf_section(runs)}</div>
<h2>Parameters</h2><ul>{params}</ul>
</body></html>"""
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text(page)
    return out_file
