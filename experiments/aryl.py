"""Reproduction experiment for Aryl's capacity loaning and elastic scaling
(docs/experiments/aryl.md).

    .venv/bin/python experiments/aryl.py [--out out/aryl] [--skip-philly] [--workers 2]
                                         [--workloads "NAME;..."] [--seeds 0]

Workloads: (a) the full Philly trace on 64 x 8 V100 for training and 16 x 8 V100 for inference;
(b) a synthetic Poisson workload (Philly's size and duration mix, models from the zoo, nominal
load 2) on 16 x 8 training and 4 x 8 inference. Half of the jobs are elastic (the seeded rule
of dlsched.elastic_jobs: min = request / 2, max = 2 x request). The inference pool follows the
Alibaba GenAI QPS curve (dlsched.inference: peak = 90% of the pool, announced 120 s ahead);
Philly is also run with Philly's own active-node curve as the demand, at half its arrival rate
(an unsaturated training cluster), and with an inference pool of P100s (slower than the training
V100s). Policies: Aryl and its ablations; ``aryl-base`` (SJF with backfill, neither loaning nor
elasticity) is the scheduler the paper compares against. With several seeds (the elastic jobs are
drawn from them) each cell is a mean with its 95% interval, ratios taken per seed. Writes
summary.md, results.json and loaning.png.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from common import experiment_parser  # (experiments/: the script's own folder)

from dlsched.inference import demand_cycle, load_curve
from dlsched.metrics import summarize
from dlsched.policies.catalog import make_policy
from dlsched.prepare import prepare
from dlsched.sim import SimConfig, simulate
from dlsched.stats import format_ci

POLICIES = [
    ("aryl-base", {}),
    ("aryl-no-loan", {}),
    ("aryl-no-elastic", {}),
    ("aryl-naive-reclaim", {}),
    ("aryl (random reclaim)", {"reclaim": "random"}),
    ("aryl", {}),
]
WORKLOADS = {  # name: trace, training + inference cluster, trace parameters, demand curve, load
    "philly": ("philly", "64x8:V100,16x8:V100@inference", {}, "genai", 1.0),
    "philly, Philly-nodes demand": (
        "philly",
        "64x8:V100,16x8:V100@inference",
        {},
        "philly-nodes",
        1.0,
    ),
    # like for like with the paper (issue 25, 6): a training cluster that is not saturated
    # (Philly's arrivals spread over twice the time), and inference servers slower than training's
    "philly, half the arrival rate": ("philly", "64x8:V100,16x8:V100@inference", {}, "genai", 0.5),
    # P100: a type Gavel measured (dlsched.perf.model.type_speed); a T4 has no measured speed
    "philly, P100 inference": ("philly", "64x8:V100,16x8:P100@inference", {}, "genai", 1.0),
    "synthetic": (
        "synthetic",
        "16x8:V100,4x8:V100@inference",
        {"num_jobs": 3000, "load": 2.0},
        "genai",
        1.0,
    ),
}
ELASTIC_FRACTION = 0.5
PLOT_DAYS = 3


def run_one(task: tuple) -> dict:
    workload, label, seed = task
    trace, cluster, params, source, load = WORKLOADS[workload]
    name, policy_params = next((n, p) for n, p in POLICIES if n == label)
    policy = make_policy(name.split(" ")[0], **policy_params)
    w = prepare(
        trace,
        cluster,
        elastic_fraction=ELASTIC_FRACTION,
        trace_params=params,
        load=load,
        seed=seed,
    )
    servers = sum(1 for n in w.cluster.nodes if n.pool == "inference")
    demand = demand_cycle(load_curve(source), servers)
    t0 = time.perf_counter()
    result = simulate(
        w.cluster, w.jobs, policy, SimConfig(inference_demand=demand), workload=w.model()
    )
    wall = time.perf_counter() - t0
    s = summarize(result)
    horizon = result.start_s + PLOT_DAYS * 86400
    series = [
        (t - result.start_s, loaned, needed)
        for t, loaned, needed in zip(
            result.ts_time, result.loaning.ts_loaned, result.loaning.ts_inference
        )
        if t <= horizon
    ]
    return {
        "workload": workload,
        "run": label,
        "seed": seed,
        "wall_s": wall,
        "pools": s["pools"],
        "series": series[:: max(1, len(series) // 4000)],
        **{
            k: s[k]
            for k in (
                "jobs",
                "mean_jct_s",
                "mean_queue_s",
                "makespan_s",
                "gpu_utilization",
                "preemptions",
            )
        },
    }


# the summary's columns after the policy: (value of a run r given the base run b of its seed,
# digits, unit)
COLUMNS = [
    (lambda r, b: r["mean_queue_s"] / 3600, 2, ""),
    (lambda r, b: b["mean_queue_s"] / r["mean_queue_s"], 2, "x"),
    (lambda r, b: r["mean_jct_s"] / 3600, 2, ""),
    (lambda r, b: b["mean_jct_s"] / r["mean_jct_s"], 2, "x"),
    (lambda r, b: 100 * r["pools"]["cluster_usage"], 1, "%"),
    (lambda r, b: 100 * (r["pools"]["cluster_usage"] / b["pools"]["cluster_usage"] - 1), 1, "%"),
    (lambda r, b: r["pools"]["reclaims"], 0, ""),
    (lambda r, b: r["pools"]["reclaim_scale_ins"], 0, ""),
    (lambda r, b: r["pools"]["reclaim_preemptions"], 0, ""),
    (lambda r, b: r["pools"]["forced_preemptions"], 0, ""),
    (lambda r, b: r["pools"]["inference_shortfall_server_s"], 0, ""),
    (lambda r, b: r["wall_s"], 1, ""),
]


def write_summary(results: list[dict], out: Path) -> None:
    lines = ["# Aryl reproduction: results", ""]
    for workload in WORKLOADS:
        rows = [r for r in results if r["workload"] == workload]
        if not rows:
            continue
        base = {r["seed"]: r for r in rows if r["run"] == "aryl-base"}
        lines += [
            f"## {workload} ({rows[0]['jobs']:,} jobs; seeds {', '.join(map(str, sorted(base)))})",
            "",
            "| policy | mean queuing (h) | vs base | mean JCT (h) | vs base | usage, both pools | "
            "vs base | reclaims | scale-ins | reclaim preemptions | of which at the deadline | "
            "inference shortfall (server-s) | wall (s) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for run, _ in POLICIES:
            rs = [r for r in rows if r["run"] == run]
            if rs:
                cells = [
                    format_ci([f(r, base[r["seed"]]) for r in rs], digits) + unit
                    for f, digits, unit in COLUMNS
                ]
                lines.append(f"| {run} | " + " | ".join(cells) + " |")
        lines.append("")
    (out / "summary.md").write_text("\n".join(lines))


def plot(results: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run = (
        next((r for r in results if r["workload"] == "philly" and r["run"] == "aryl"), None)
        or results[-1]
    )
    fig, ax = plt.subplots(figsize=(8, 3))
    t = [x[0] / 86400 for x in run["series"]]
    ax.step(
        t,
        [x[2] for x in run["series"]],
        where="post",
        color="black",
        linewidth=1,
        label="inference needs",
    )
    ax.step(
        t,
        [x[1] for x in run["series"]],
        where="post",
        linewidth=1,
        label="loaned to training (aryl)",
    )
    ax.set_xlabel("days since the first submission")
    ax.set_ylabel("inference servers")
    ax.set_title(f"{run['workload']}: inference demand (GenAI QPS curve) vs loaned servers")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "loaning.png", dpi=110)


def main() -> None:
    parser = experiment_parser(__doc__, "out/aryl")
    parser.add_argument(
        "--workloads",
        help=f"separated by ';', of: {'; '.join(WORKLOADS)} (default: all)",
    )
    parser.add_argument("--seeds", default="0", help="comma-separated (default %(default)s)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workloads = list(WORKLOADS)
    if args.workloads:
        workloads = [w.strip() for w in args.workloads.split(";")]
        unknown = [w for w in workloads if w not in WORKLOADS]
        if unknown:
            parser.error(f"unknown workload '{unknown[0]}' (choose from: {'; '.join(WORKLOADS)})")
    workloads = [w for w in workloads if not (args.skip_philly and w.startswith("philly"))]
    seeds = [int(x) for x in args.seeds.split(",")]
    tasks = [(w, label, seed) for w in workloads for label, _ in POLICIES for seed in seeds]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        results = list(pool.map(run_one, tasks))
    (out / "results.json").write_text(json.dumps(results, indent=1))
    write_summary(results, out)
    plot(results, out)
    print((out / "summary.md").read_text())
    print(
        f"{len(tasks)} runs in {time.perf_counter() - t0:.0f} s; wrote {out}/summary.md, "
        f"results.json, loaning.png"
    )


if __name__ == "__main__":
    main()
