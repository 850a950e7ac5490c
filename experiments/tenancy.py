"""Quotas and fair share on Philly's virtual clusters (docs/experiments/tenancy.md).

    .venv/bin/python experiments/tenancy.py [--out out/tenancy] [--workers 2]

The full Philly trace on 64 x 8 V100, its 15 virtual clusters (VCs) as tenants, nominal quotas
from their node counts (Helios' artifact) scaled to the 512 GPUs (``--quotas philly-vc``; the
4 VCs the file does not list get 0). Runs: Tiresias with no quotas; with hard quotas (no
borrowing, as Philly ran); with borrowing within one cohort (Kueue-style reclaim); and the
fair-share policies DRF and FTF alone and under the borrowing quotas. Writes summary.md and
results.json.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from dlsched.metrics import job_rows, summarize
from dlsched.policies.catalog import make_policy
from dlsched.policies.quota import QuotaLayer
from dlsched.prepare import prepare
from dlsched.sim import SimConfig, simulate
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


def run_one(label: str) -> dict:
    _, policy_name, quotas = next(r for r in RUNS if r[0] == label)
    w = prepare("philly", CLUSTER)
    policy = make_policy(policy_name)
    if quotas:
        config = philly_vc(w.cluster.pool_gpus("training"))
        policy = QuotaLayer(policy, config.without_borrowing() if quotas == "hard" else config)
    t0 = time.perf_counter()
    result = simulate(w.cluster, w.jobs, policy, SimConfig(), workload=w.model())
    wall = time.perf_counter() - t0
    rows = job_rows(result.jobs)
    s = summarize(result, rows)
    never: dict[str, int] = {}
    for r in rows:
        if r["first_start_s"] is None:
            never[r["tenant"]] = never.get(r["tenant"], 0) + 1
    return {
        "run": label,
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


def write_summary(results: list[dict], out: Path) -> None:
    quotas = philly_vc(512)
    lines = [
        "# Tenancy on Philly: results",
        "",
        "| run | mean JCT (h) | mean queuing (h) | completed | preemptions | evictions | Jain | "
        "max rho | wall (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['run']} | {r['mean_jct_s'] / 3600:.2f} | {r['mean_queue_s'] / 3600:.2f} | "
            f"{r['jobs_completed']:,} | {r['preemptions']:,} | {r['evictions']:,} | "
            f"{r['jain_index']:.3f} | "
            f"{r['max_tenant_rho']:.1f} | {r['wall_s']:.1f} |"
        )
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
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        results = list(pool.map(run_one, [r[0] for r in RUNS]))
    (out / "results.json").write_text(json.dumps(results, indent=1))
    write_summary(results, out)
    print((out / "summary.md").read_text())
    print(
        f"{len(RUNS)} runs in {time.perf_counter() - t0:.0f} s; wrote {out}/summary.md, "
        f"results.json"
    )


if __name__ == "__main__":
    main()
