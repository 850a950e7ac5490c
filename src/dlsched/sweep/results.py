"""A sweep's results: ``sweep.csv`` (one row per finished run: its axes, seed and every scalar
summary field, those of a nested summary as ``quotas.evictions``), and per metric the mean and
95% confidence interval across seeds for each policy at each point of the other axes, each
policy also relative to the baseline (the ratio per seed, same workload, then its mean and
interval). Printed as tables and written as an HTML report with a plot along the report's
axis."""

from __future__ import annotations

import csv
import html
import json
import math
from collections.abc import Iterable
from pathlib import Path

from ..report.columns import METRICS, PAGE_STYLE, format_cell
from ..stats import mean_ci
from .execute import run_key
from .spec import SweepSpec

FORMATS = {key: fmt for key, _, fmt in METRICS}
LABELS = {key: label for key, label, _ in METRICS}


def collect(spec: SweepSpec, out: Path) -> list[dict]:
    """One row per run of ``spec`` whose outputs are in ``out``, in the spec's order."""
    rows = []
    for run in spec.runs:
        folder = out / "runs" / run_key(run)
        if not folder.is_dir():
            continue
        summary = json.loads((folder / "summary.json").read_text())
        row = {"policy": run.get("policy").label, **dict(run.point), "seed": run.seed}
        row["run"] = folder.name
        for key, value in summary.items():
            if key in row:
                continue
            if _scalar(value):
                row[key] = value
            elif isinstance(value, dict):  # one level down: quotas.evictions, params.scan...
                row.update({f"{key}.{k}": v for k, v in value.items() if _scalar(v)})
        rows.append(row)
    return rows


def _scalar(value: object) -> bool:
    return value is None or isinstance(value, int | float | str)


def write_csv(rows: list[dict], path: Path) -> None:
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, list(columns), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def _points(spec: SweepSpec) -> list[tuple]:
    """The combinations of the axes other than policy, in the spec's order."""
    seen: dict[tuple, None] = {}
    for run in spec.runs:
        seen[tuple((k, v) for k, v in run.point if k != "policy")] = None
    return list(seen)


def _policies(spec: SweepSpec) -> list[str]:
    return list(dict.fromkeys(run.get("policy").label for run in spec.runs))


def aggregate(spec: SweepSpec, rows: list[dict]) -> dict:
    """metric -> point -> policy -> {"mean", "ci", "n", "rel_mean", "rel_ci"} (relative to
    the baseline: the mean of the per-seed ratios, for seeds both finished)."""
    by: dict[tuple, dict] = {}
    for row in rows:
        point = tuple((k, row[k]) for k in spec.axes if k != "policy")
        by[(point, row["policy"], row["seed"])] = row
    out: dict = {}
    for metric in spec.metrics:
        table: dict = {}
        for point in _points(spec):
            cells = {}
            base = _numbers(by, point, spec.baseline, spec.seeds, metric)
            for policy in _policies(spec):
                values = _numbers(by, point, policy, spec.seeds, metric)
                if not values:
                    continue
                mean, ci = mean_ci(list(values.values()))
                cell = {"mean": mean, "ci": ci, "n": len(values)}
                ratios = [values[s] / base[s] for s in values if base.get(s)]  # (not 0)
                if ratios and policy != spec.baseline:
                    cell["rel_mean"], cell["rel_ci"] = mean_ci(ratios)
                cells[policy] = cell
            table[point] = cells
        out[metric] = table
    return out


def _numbers(
    by: dict[tuple, dict], point: tuple, policy: str | None, seeds: list[int], metric: str
) -> dict[int, float]:
    """The metric of the policy's runs at the point, by seed: those whose summary has a number."""
    found = {seed: by.get((point, policy, seed), {}).get(metric) for seed in seeds}
    return {seed: v for seed, v in found.items() if isinstance(v, int | float)}


def _cell(metric: str, cell: dict | None, relative: bool = False) -> str:
    if cell is None:
        return "-"
    if relative:
        if "rel_mean" not in cell:
            return "-"
        mean, ci = cell["rel_mean"], cell["rel_ci"]
        return f"{mean:.3f}" + ("" if math.isnan(ci) else f" ± {ci:.3f}")
    fmt = FORMATS.get(metric, "{:.4g}")
    if fmt == "{:,}":  # a count: its mean and interval are fractional
        fmt = "{:,.1f}"
    mean, ci = cell["mean"], cell["ci"]
    text = format_cell(mean, fmt)
    return text if math.isnan(ci) else f"{text} ± {format_cell(ci, fmt)}"


def _point_name(point: tuple) -> str:
    return ", ".join(f"{k}={v}" for k, v in point) or "all runs"


def text_tables(spec: SweepSpec, agg: dict) -> str:
    """Per metric: a row per point and policy, mean ± 95% CI across seeds, and the ratio to
    the baseline."""
    from tabulate import tabulate

    parts = []
    for metric, table in agg.items():
        rows = []
        for point, cells in table.items():
            for policy, cell in cells.items():
                rows.append(
                    [
                        _point_name(point),
                        policy,
                        _cell(metric, cell),
                        _cell(metric, cell, relative=True),
                        cell["n"],
                    ]
                )
        head = ["point", "policy", LABELS.get(metric, metric), f"vs {spec.baseline}", "seeds"]
        parts.append(tabulate(rows, head, disable_numparse=True))
    return "\n\n".join(parts)


def _plot(spec: SweepSpec, metric: str, table: dict) -> str:
    """The metric along the report's axis, one line per policy (and per value of the other
    axes), with 95% intervals."""
    if spec.x is None:
        return ""
    lines: dict[tuple, list[tuple]] = {}
    for point, cells in table.items():
        rest = tuple((k, v) for k, v in point if k != spec.x)
        x = dict(point)[spec.x]
        for policy, cell in cells.items():
            lines.setdefault((policy, rest), []).append((x, cell["mean"], cell["ci"]))
    if not lines:  # no run reported the metric
        return ""
    from ..report.plots import plt, svg_of

    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    numeric = all(isinstance(v, int | float) for v in spec.axes[spec.x])
    ticks = spec.axes[spec.x]
    for (policy, rest), points in lines.items():
        xs = [p[0] if numeric else ticks.index(p[0]) for p in points]
        errs = [0.0 if math.isnan(p[2]) else p[2] for p in points]
        label = policy + (f" ({_point_name(rest)})" if rest else "")
        ax.errorbar(xs, [p[1] for p in points], yerr=errs, marker="o", capsize=3, label=label)
    if not numeric:
        ax.set_xticks(range(len(ticks)), [str(t) for t in ticks])
    ax.set_xlabel(spec.x)
    ax.set_ylabel(LABELS.get(metric, metric) + (" (s)" if metric.endswith("_s") else ""))
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return svg_of(fig)


def write_html(spec: SweepSpec, agg: dict, rows: list[dict], failed: Iterable, path: Path) -> None:
    sections = []
    for metric, table in agg.items():
        policies = _policies(spec)
        head = "".join(f"<th>{html.escape(p)}</th>" for p in policies)
        body = rel = ""
        for point, cells in table.items():
            name = html.escape(_point_name(point))
            body += f"<tr><th>{name}</th>" + "".join(
                f"<td>{html.escape(_cell(metric, cells.get(p)))}</td>" for p in policies
            )
            rel += f"<tr><th>{name}</th>" + "".join(
                f"<td>{html.escape(_cell(metric, cells.get(p), relative=True))}</td>"
                for p in policies
            )
        label = html.escape(LABELS.get(metric, metric))
        sections.append(
            f"<h2>{label}</h2><table><tr><th></th>{head}</tr>{body}</table>"
            f"<h3>{label} relative to {html.escape(str(spec.baseline))} (ratio per seed)</h3>"
            f"<table><tr><th></th>{head}</tr>{rel}</table>"
            f"<div class='plots'>{_plot(spec, metric, table)}</div>"
        )
    failures = "".join(
        f"<li><b>{html.escape(_point_name(tuple(run.point)))}, seed {run.seed}</b>: "
        f"<pre>{html.escape(error.splitlines()[-1] if error else '')}</pre></li>"
        for run, error in failed
    )
    axes = ", ".join(f"{k} ({len(v)})" for k, v in spec.axes.items())
    title = html.escape(spec.name)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>
<style>{PAGE_STYLE}</style></head><body><h1>{title}</h1>
<p>{len(rows)} of {len(spec.runs)} runs finished; axes: {html.escape(axes) or "none"};
seeds: {len(spec.seeds)}. Each cell: the mean across seeds ± the half-width of its 95%
confidence interval (Student's t); no interval with one seed.</p>
{"".join(sections)}
{f"<h2>Failed runs</h2><ul>{failures}</ul>" if failures else ""}
<p>Every run's row: <code>sweep.csv</code>; its outputs: <code>runs/&lt;key&gt;/</code>.</p>
</body></html>"""
    path.write_text(page)
