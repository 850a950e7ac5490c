"""Reproduction experiment for Amoeba/EDL's elastic Tiresias (docs/experiments/elastic.md).

    .venv/bin/python experiments/elastic.py [--out out/elastic] [--loads 0.7,1.0] \\
        [--fractions 0.5,1.0]

For each workload, load and elastic fraction it runs Tiresias, elastic Tiresias with background
scaling and elastic Tiresias with stop-resume on the same jobs (same models, same seeded elastic
rule; plain Tiresias ignores elasticity, so it runs once per load). Workloads: (a) the full
Philly trace on 64 x 8 V100 (512 GPUs); (b) a Muri trace on 8-GPU V100 nodes sized so that its
recorded offered load (average GPU demand / GPUs) is 1.0. A load L replays the trace with every
arrival time divided by L (L = 1: as recorded). Writes summary.md, results.json, mean_jct.png
and scaling_cost.png; two worker processes by default.
"""

from __future__ import annotations

import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from common import experiment_parser  # (experiments/: the script's own folder)

from dlsched.metrics import summarize
from dlsched.policies.catalog import make_policy
from dlsched.prepare import prepare
from dlsched.sim import SimConfig, simulate
from dlsched.traces import load_trace

RUNS = [
    ("tiresias", "tiresias", "background"),
    ("elastic (background)", "elastic-tiresias", "background"),
    ("elastic (stop-resume)", "elastic-tiresias", "stop-resume"),
]


def muri_cluster(name: str) -> str:
    jobs = load_trace(name).jobs
    span = max(j.submit_time_s for j in jobs) - min(j.submit_time_s for j in jobs)
    demand = sum(j.num_gpus * j.duration_s for j in jobs) / span
    return f"{max(4, math.ceil(demand / 8))}x8:V100"


def run_one(task: tuple) -> dict:
    trace, cluster_spec, load, fraction, label, policy, mechanism = task
    workload = prepare(trace, cluster_spec, load=load, elastic_fraction=fraction)
    t0 = time.perf_counter()
    result = simulate(
        workload.cluster,
        workload.jobs,
        make_policy(policy),
        SimConfig(resize_mechanism=mechanism),
        workload=workload.model(),
    )
    wall = time.perf_counter() - t0
    s = summarize(result)
    return {
        "trace": trace,
        "cluster": cluster_spec,
        "load": load,
        "fraction": fraction,
        "run": label,
        "wall_s": wall,
        **{
            k: s[k]
            for k in (
                "jobs_completed",
                "mean_jct_s",
                "median_jct_s",
                "p95_jct_s",
                "mean_queue_s",
                "makespan_s",
                "preemptions",
                "resizes",
                "resize_lost_gpu_s",
                "mean_size_vs_requested",
                "job_gpu_time_s",
            )
        },
    }


def main() -> None:
    parser = experiment_parser(__doc__, "out/elastic")
    parser.add_argument("--muri", default="muri-3", help="which Muri trace (default %(default)s)")
    parser.add_argument(
        "--loads", default="0.7,1.0", help="arrival-rate multipliers (default %(default)s)"
    )
    parser.add_argument(
        "--fractions", default="0.5,1.0", help="elastic fractions (default %(default)s)"
    )
    args = parser.parse_args()
    loads = [float(x) for x in args.loads.split(",")]
    fractions = [float(x) for x in args.fractions.split(",")]
    workloads = [(args.muri, muri_cluster(args.muri))]
    if not args.skip_philly:
        workloads.insert(0, ("philly", "64x8:V100"))
    tasks = []
    for trace, cluster in workloads:
        for load in loads:
            tasks.append((trace, cluster, load, fractions[0], *RUNS[0]))
            for fraction in fractions:
                tasks += [(trace, cluster, load, fraction, *run) for run in RUNS[1:]]
    tasks.sort(key=lambda t: t[0] != "philly")  # the long ones first
    with ProcessPoolExecutor(args.workers) as pool:
        rows = []
        for row in pool.map(run_one, tasks):
            rows.append(row)
            print(
                f"{row['trace']} load {row['load']} fraction {row['fraction']} {row['run']}: "
                f"mean JCT {row['mean_jct_s'] / 3600:.2f} h ({row['wall_s']:.1f} s)",
                flush=True,
            )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    write_summary(rows, fractions, out)


def write_summary(rows: list[dict], fractions: list[float], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = [
        "| trace | cluster | load | elastic fraction | run | mean JCT (h) | vs Tiresias | median "
        "JCT (h) | "
        "p95 JCT (h) | makespan (d) | preemptions | resizes | GPU-h lost to resizing | GPU-s lost "
        "per resize | "
        "mean size / request | wall (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    bars, costs = {}, {}
    groups = list(dict.fromkeys((r["trace"], r["cluster"], r["load"]) for r in rows))
    for trace, cluster, load in groups:
        these = [r for r in rows if (r["trace"], r["cluster"], r["load"]) == (trace, cluster, load)]
        base = next(r for r in these if r["run"] == "tiresias")
        for fraction in fractions:
            for r in [base] + [
                r for r in these if r["fraction"] == fraction and r["run"] != "tiresias"
            ]:
                ratio = r["mean_jct_s"] / base["mean_jct_s"]
                per_resize = r["resize_lost_gpu_s"] / r["resizes"] if r["resizes"] else 0.0
                lines.append(
                    f"| {trace} | {cluster} | {load:g} | {fraction:g} | {r['run']} | "
                    f"{r['mean_jct_s'] / 3600:,.2f} | "
                    f"{ratio:.2f}x | {r['median_jct_s'] / 3600:,.2f} | "
                    f"{r['p95_jct_s'] / 3600:,.1f} | "
                    f"{r['makespan_s'] / 86400:,.1f} | {r['preemptions']:,} | {r['resizes']:,} | "
                    f"{r['resize_lost_gpu_s'] / 3600:,.0f} | {per_resize:,.0f} | "
                    f"{r['mean_size_vs_requested']:.2f} | "
                    f"{r['wall_s']:.1f} |"
                )
                key = f"{trace}\nload {load:g}, f {fraction:g}"
                bars.setdefault(key, {})[r["run"]] = ratio
                if r["resizes"]:
                    costs.setdefault(key, {})[r["run"]] = per_resize
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    for name, data, ylabel in (
        ("mean_jct.png", bars, "mean JCT / Tiresias"),
        ("scaling_cost.png", costs, "GPU-seconds lost per resize"),
    ):
        keys = list(data)
        runs = list(dict.fromkeys(run for d in data.values() for run in d))
        fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(keys)), 3.6))
        width = 0.8 / len(runs)
        for i, run in enumerate(runs):
            ax.bar(
                [k + i * width for k in range(len(keys))],
                [data[key].get(run, 0) for key in keys],
                width,
                label=run,
            )
        ax.set_xticks([k + width * (len(runs) - 1) / 2 for k in range(len(keys))], keys, fontsize=8)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)


if __name__ == "__main__":
    main()
