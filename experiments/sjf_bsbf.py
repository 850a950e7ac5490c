"""Reproduction experiment for SJF-BSBF (docs/experiments/sjf-bsbf.md).

    .venv/bin/python experiments/sjf_bsbf.py [--out out/sjf-bsbf] [--load 1.0] [--scan greedy]

Runs SJF-BSBF, SJF-FFS, Tiresias, SJF and FIFO (the `dlsched compare` command, one per
workload) on (a) the four Muri traces, each on a cluster of 8-GPU RTX A6000 nodes (the SJF-BSBF
authors' testbed GPU, 48 GB) sized so that the offered load (average GPU demand / GPUs) is
--load, and (b) the full Philly trace on 64 x 8 V100. Writes each compare's folder and report,
a summary table (summary.md) and a chart of mean JCT relative to SJF-BSBF (mean_jct.png).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from common import experiment_parser  # (experiments/: the script's own folder)

from dlsched.cli import main as dlsched
from dlsched.traces import load_trace

POLICIES = ["sjf-bsbf", "sjf-ffs", "tiresias", "sjf", "fifo"]


def offered_demand_gpus(name: str) -> float:
    jobs = load_trace(name).jobs
    span = max(j.submit_time_s for j in jobs) - min(j.submit_time_s for j in jobs)
    return sum(j.num_gpus * j.duration_s for j in jobs) / span


def main() -> None:
    parser = experiment_parser(__doc__, "out/sjf-bsbf", workers=False)
    parser.add_argument(
        "--load",
        type=float,
        default=1.0,
        help="offered load the Muri clusters are sized for (default 1.0: as many "
        "GPUs as the trace's average demand)",
    )
    parser.add_argument(
        "--scan",
        choices=["strict", "backfill", "greedy"],
        help="run every policy with this scan (default: each policy's own: strict for "
        "the SJF family and FIFO, greedy for Tiresias)",
    )
    args = parser.parse_args()
    out = Path(args.out)
    workloads = []
    for k in range(1, 5):
        name = f"muri-{k}"
        nodes = max(4, math.ceil(offered_demand_gpus(name) / args.load / 8))
        # speed 1: the Muri traces' durations were recorded on these GPUs
        workloads.append((name, f"{nodes}x8:RTXA6000*1"))
    if not args.skip_philly:
        workloads.append(("philly", "64x8:V100"))
    rows = []
    for trace, cluster in workloads:
        folder = out / trace
        code = dlsched(
            [
                "compare",
                "--trace",
                trace,
                "--cluster",
                cluster,
                "--policies",
                ",".join(POLICIES),
                "--out",
                str(folder),
                "--no-progress",
            ]
            + (["--scan", args.scan] if args.scan else [])
        )
        if code:
            raise SystemExit(code)
        for s in json.loads((folder / "comparison.json").read_text()):
            rows.append({"trace": trace, "cluster": cluster, **s})
    write_summary(rows, out)


def write_summary(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = [
        "| trace | cluster | policy | mean JCT (h) | vs SJF-BSBF | median JCT (h) | p99 JCT (h) | "
        "makespan (d) | shared GPU-time | jobs shared | mean slowdown sharing | preemptions |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    traces = list(dict.fromkeys(r["trace"] for r in rows))
    ratios = {p: [] for p in POLICIES}
    for trace in traces:
        these = {r["policy"]: r for r in rows if r["trace"] == trace}
        ref = these["sjf-bsbf"]["mean_jct_s"]
        for p in POLICIES:
            r = these[p]
            ratios[p].append(r["mean_jct_s"] / ref)
            slow = r.get("mean_sharing_slowdown")
            lines.append(
                f"| {trace} | {r['cluster']} | {p} | {r['mean_jct_s'] / 3600:,.1f} | "
                f"{r['mean_jct_s'] / ref:.2f}x | {r['median_jct_s'] / 3600:,.2f} | "
                f"{r['p99_jct_s'] / 3600:,.1f} | {r['makespan_s'] / 86400:,.1f} | "
                f"{r['shared_gpu_time_share']:.1%} | {r['jobs_shared']:,} | "
                f"{'-' if slow is None else f'{slow:.2f}'} | {r['preemptions']:,} |"
            )
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    fig, ax = plt.subplots(figsize=(8, 3.5))
    width = 0.8 / len(POLICIES)
    for k, p in enumerate(POLICIES):
        ax.bar([i + k * width for i in range(len(traces))], ratios[p], width, label=p)
    ax.set_xticks([i + width * (len(POLICIES) - 1) / 2 for i in range(len(traces))])
    ax.set_xticklabels(traces)
    ax.set_yscale("log")
    ax.set_ylabel("mean JCT / SJF-BSBF's")
    ax.axhline(1, color="black", linewidth=0.8)
    ax.legend(fontsize=8, ncol=5)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "mean_jct.png", dpi=110)


if __name__ == "__main__":
    main()
