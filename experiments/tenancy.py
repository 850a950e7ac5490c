"""Quotas and fair share on Philly's virtual clusters (docs/experiments/tenancy.md).

    .venv/bin/python experiments/tenancy.py [--out out/tenancy] [--workers 2] [--seeds 0,1,2]

The full Philly trace on 64 x 8 V100, its 15 virtual clusters (VCs) as tenants, nominal quotas
from their node counts (Helios' artifact) scaled to the 512 GPUs (``--quotas philly-vc``; the
4 VCs the file does not list get 0). Runs: Tiresias with no quotas; with hard quotas (no
borrowing, as Philly ran); with borrowing within one cohort (Kueue-style reclaim); and the
fair-share policies DRF and FTF alone and under the borrowing quotas. Each run once per seed
(the seed draws the jobs' models, hence their speeds); the first table gives means with 95%
intervals across seeds, the per-VC tables the first seed. Writes summary.md and results.json.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from dlsched.admission import QuotaAdmission
from dlsched.metrics import job_rows, summarize
from dlsched.policies.catalog import make_policy
from dlsched.prepare import prepare
from dlsched.sim import SimConfig, simulate
from dlsched.stats import format_ci
from dlsched.tenant_quotas import philly_vc

RUNS = [
    ("tiresias, no quotas", "tiresias", None),
    ("tiresias, hard quotas", "tiresias", "hard"),
    ("tiresias, borrowing", "tiresias", "borrow"),
    ("drf", "drf", None),
    ("ftf", "ftf", None),
    ("drf, borrowing", "drf", "borrow"),
]
CLUSTER = "64x8:V100"


def run_one(label: str, seed: int) -> dict:
    _, policy_name, quotas = next(r for r in RUNS if r[0] == label)
    w = prepare("philly", CLUSTER, seed=seed)
    policy = make_policy(policy_name)
    admission = None
    if quotas:
        config = philly_vc(w.cluster.pool_gpus("training"))
        admission = QuotaAdmission(config.without_borrowing() if quotas == "hard" else config)
    t0 = time.perf_counter()
    result = simulate(
        w.cluster, w.jobs, policy, SimConfig(), workload=w.model(), admission=admission
    )
    wall = time.perf_counter() - t0
    rows = job_rows(result.jobs)
    s = summarize(result)
    never: dict[str, int] = {}
    for r in rows:
        if r["first_start_s"] is None:
            never[r["tenant"]] = never.get(r["tenant"], 0) + 1
    return {
        "run": label,
        "seed": seed,
        "wall_s": wall,
        "mean_jct_s": s["mean_jct_s"],
        "mean_queue_s": s["mean_queue_s"],
        "jobs_completed": s["jobs_completed"],
        "preemptions": s["preemptions"],
        "jain_index": s["jain_index"],
        "max_tenant_rho": s["max_tenant_rho"],
        "evictions": (s.get("quotas") or {}).get("evictions", 0),
        "never_started": never,
        "tenants": {
            t: {k: v[k] for k in ("jobs", "mean_jct_s", "mean_queue_s", "job_gpu_time_s")}
            for t, v in s["tenants"].items()
        },
        "rho": s["fairness"]["rho_by_tenant"],
        "quotas": (s.get("quotas") or {}).get("tenants"),
    }


def write_summary(all_results: list[dict], out: Path) -> None:
    quotas = philly_vc(512)
    seeds = sorted({r["seed"] for r in all_results})
    lines = [
        "# Tenancy on Philly: results",
        "",
        f"Means with 95% intervals over seeds {', '.join(map(str, seeds))}.",
        "",
        "| run | mean JCT (h) | mean queuing (h) | completed | preemptions | evictions | Jain | "
        "max rho | wall (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, *_ in RUNS:
        rs = [r for r in all_results if r["run"] == label]
        lines.append(
            f"| {label} | {format_ci([r['mean_jct_s'] for r in rs], 2, 1 / 3600)} | "
            f"{format_ci([r['mean_queue_s'] for r in rs], 2, 1 / 3600)} | "
            f"{format_ci([r['jobs_completed'] for r in rs], 0)} | "
            f"{format_ci([r['preemptions'] for r in rs], 0)} | "
            f"{format_ci([r['evictions'] for r in rs], 0)} | "
            f"{format_ci([r['jain_index'] for r in rs], 3)} | "
            f"{format_ci([r['max_tenant_rho'] for r in rs], 1)} | "
            f"{format_ci([r['wall_s'] for r in rs], 1)} |"
        )
    results = [r for r in all_results if r["seed"] == seeds[0]]
    lines += ["", f"The tables below: seed {seeds[0]}."]
    tenants = sorted(results[0]["tenants"], key=lambda t: -results[0]["tenants"][t]["jobs"])
    lines += [
        "",
        "Mean queuing per VC (hours; nominal quota in GPUs, jobs):",
        "",
        "| VC | quota | jobs | " + " | ".join(r["run"] for r in results) + " |",
        "|---|---|---|" + "---|" * len(results),
    ]
    for t in tenants:
        cells = []
        for r in results:
            v = r["tenants"][t]
            never = r["never_started"].get(t, 0)
            q = v["mean_queue_s"]
            cells.append(
                ("-" if q != q else f"{q / 3600:.2f}") + (f" ({never} never ran)" if never else "")
            )
        lines.append(
            f"| {t} | {quotas.quota(t).nominal} | {results[0]['tenants'][t]['jobs']:,} | "
            + " | ".join(cells)
            + " |"
        )
    lines += [
        "",
        "Rho per VC (summed JCT over summed time on its own 1/15 of the cluster):",
        "",
        "| VC | " + " | ".join(r["run"] for r in results) + " |",
        "|---|" + "---|" * len(results),
    ]
    for t in tenants:
        lines.append(
            f"| {t} | "
            + " | ".join("-" if r["rho"][t] is None else f"{r['rho'][t]:.1f}" for r in results)
            + " |"
        )
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/tenancy")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated (default 0,1,2)")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        grid = [(r[0], seed) for seed in seeds for r in RUNS]
        results = list(pool.map(run_one, *zip(*grid)))
    (out / "results.json").write_text(json.dumps(results, indent=1))
    write_summary(results, out)
    print((out / "summary.md").read_text())
    print(
        f"{len(results)} runs in {time.perf_counter() - t0:.0f} s; wrote {out}/summary.md, "
        f"results.json"
    )


if __name__ == "__main__":
    main()
