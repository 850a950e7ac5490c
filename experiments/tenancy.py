"""Quotas and fair share on Philly's virtual clusters (docs/experiments/tenancy.md): the sweep
``experiments/sweeps/tenancy.yaml``, then its tables per virtual cluster.

    .venv/bin/python experiments/tenancy.py [--out out/tenancy] [--sequential] [--force]

The full Philly trace on 64 x 8 V100, its 15 virtual clusters (VCs) as tenants, nominal quotas
from their node counts (Helios' artifact) scaled to the 512 GPUs (``--quotas philly-vc``; the
4 VCs the file does not list get 0). Runs (the spec's): Tiresias with no quotas; with hard
quotas (no borrowing, as Philly ran); with borrowing within one cohort (Kueue-style reclaim);
and the fair-share policies DRF and FTF alone and under the borrowing quotas, each over the
spec's seeds (the seed draws the jobs' models, hence their speeds).

The runs are the sweep's: on Ray, cached and resumable in ``OUT`` (``dlsched sweep`` on the
same spec and folder runs nothing again), with its ``sweep.csv`` and ``report.html``. This
script adds, from each run's summary, the mean queuing and rho of every VC with 95% intervals
across seeds, and how many of a VC's jobs never ran. Writes ``OUT/summary.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dlsched.stats import format_ci
from dlsched.sweep import SweepResult, run_sweep

SPEC = Path(__file__).resolve().parent / "sweeps" / "tenancy.yaml"


def per_vc(result: SweepResult) -> dict[str, dict[str, dict]]:
    """run label -> VC -> mean queuing (s), rho and jobs never run, one value per seed (and
    the VC's nominal quota in GPUs, in a run with quotas)."""
    tables: dict[str, dict[str, dict]] = {}
    for row in sorted(result.rows, key=lambda r: r["seed"]):
        summary = json.loads((result.out / "runs" / row["run"] / "summary.json").read_text())
        rho = summary["fairness"]["rho_by_tenant"]
        quotas = (summary.get("quotas") or {}).get("tenants", {})
        run = tables.setdefault(row["policy"], {})
        for vc, stats in summary["tenants"].items():
            cells = run.setdefault(vc, {"jobs": [], "queue_s": [], "rho": [], "never": []})
            if vc in quotas:
                cells["quota"] = quotas[vc]["nominal_gpus"]
            cells["jobs"].append(stats["jobs"])
            cells["queue_s"].append(stats["mean_queue_s"])
            cells["rho"].append(rho.get(vc))
            cells["never"].append(stats["never_started"])
    return tables


def _cell(values: list, digits: int, scale: float = 1.0) -> str:
    """Mean ± 95% interval across seeds; "-" where a seed has no value (no job finished)."""
    if any(v is None or v != v for v in values):
        return "-"
    return format_ci(values, digits, scale)


def evictions(result: SweepResult) -> str:
    """Jobs the quota stage evicted to reclaim a tenant's quota, per run (0 without quotas)."""
    by_run: dict[str, list] = {}
    for row in result.rows:
        by_run.setdefault(row["policy"], []).append(row.get("quotas.evictions") or 0)
    lines = ["| run | evictions (reclaim) |", "|---|---|"]
    lines += [f"| {run} | {format_ci(values, 0)} |" for run, values in by_run.items()]
    return "\n".join(lines) + "\n"


def vc_tables(result: SweepResult) -> str:
    tables = per_vc(result)
    runs = list(tables)
    first = tables[runs[0]]
    vcs = sorted(first, key=lambda vc: -first[vc]["jobs"][0])
    quota = {
        vc: cells["quota"]
        for run in tables.values()
        for vc, cells in run.items()
        if "quota" in cells
    }
    seeds = sorted({row["seed"] for row in result.rows})
    lines = [
        f"Mean queuing per VC (hours, mean ± 95% interval over seeds {seeds}; nominal quota in "
        "GPUs, jobs; the mean number of its jobs that never ran, if any):",
        "",
        "| VC | quota | jobs | " + " | ".join(runs) + " |",
        "|---|---|---|" + "---|" * len(runs),
    ]
    for vc in vcs:
        cells = []
        for run in runs:
            values = tables[run][vc]
            never = sum(values["never"]) / len(values["never"])
            cells.append(
                _cell(values["queue_s"], 1, 1 / 3600) + (f" ({never:g} never ran)" if never else "")
            )
        jobs = first[vc]["jobs"][0]
        lines.append(f"| {vc} | {quota.get(vc, '-')} | {jobs:,} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Rho per VC (its summed JCT over the summed time on its own 1/15 of the cluster; mean ± "
        "95% interval over the seeds):",
        "",
        "| VC | " + " | ".join(runs) + " |",
        "|---|" + "---|" * len(runs),
    ]
    for vc in vcs:
        lines.append(
            f"| {vc} | " + " | ".join(_cell(tables[run][vc]["rho"], 1) for run in runs) + " |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", default="out/tenancy", help="the folder of the results (default %(default)s)"
    )
    parser.add_argument("--sequential", action="store_true", help="in this process, not on Ray")
    parser.add_argument("--force", action="store_true", help="rerun the runs done before")
    args = parser.parse_args()
    # a bar only on a terminal, as the CLI draws it (a log got a line of cursor moves per update)
    progress = sys.stderr.isatty()
    result = run_sweep(
        SPEC, args.out, force=args.force, sequential=args.sequential, progress=progress
    )
    text = "# Tenancy on Philly: results\n\n" + result.tables() + "\n"
    text += evictions(result) + "\n" + vc_tables(result)
    (result.out / "summary.md").write_text(text)
    print(text)
    failed = len(result.outcome.failed)
    print(
        f"wrote {result.out}/summary.md, sweep.csv, report.html"
        + (f"; {failed} runs failed" if failed else "")
    )
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
