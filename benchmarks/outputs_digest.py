"""Fingerprint every built-in policy's simulator outputs, to prove a refactoring changes none.

Runs ``dlsched simulate`` for every built-in policy on Philly (64x8) and muri-3 (16x8), plain
and with the variants each is meant for (deadlines, elastic jobs, quotas, an inference pool),
and writes one digest per run (summary.json without the wall time, and every CSV it wrote:
jobs.csv, timeseries.csv, tenants_timeseries.csv):

    .venv/bin/python benchmarks/outputs_digest.py --out out/digest-before
    ... change the code ...
    .venv/bin/python benchmarks/outputs_digest.py --out out/digest-after --compare out/digest-before

A run that fails is recorded with its error (a known failure compares equal to itself).
``--traces muri-3`` runs the small trace only (seconds, not minutes). Each run's outputs stay in
``OUT/<run>/`` so a difference can be opened with diff.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CLUSTERS = {"philly": "64x8:V100", "muri-3": "16x8:V100"}
INFERENCE = ",16x8:V100@inference"  # Aryl's loaned servers
ELASTIC = ["--elastic-fraction", "0.5"]
DEADLINES = ["--deadlines"]
QUOTAS = ["--quotas", "philly-vc"]

# run name -> (policy, options, with an inference pool)
RUNS: dict[str, tuple[str, list[str], bool]] = {
    **{p: (p, [], False) for p in ["fifo", "sjf", "srtf", "tiresias", "drf", "ftf"]},
    **{p: (p, [], False) for p in ["sjf-bsbf", "sjf-ffs", "sjf-bsbf-consolidated"]},
    "sjf-ffs-consolidated": ("sjf-ffs-consolidated", [], False),
    "fifo-backfill": ("fifo", ["--scan", "backfill"], False),
    "srtf-backfill": ("srtf", ["--scan", "backfill"], False),
    "srtf-strict": ("srtf", ["--scan", "strict"], False),
    "edf": ("edf", DEADLINES, False),
    "genie": ("genie", DEADLINES, False),
    "genie-oracle": ("genie-oracle", DEADLINES, False),
    "elastic-tiresias": ("elastic-tiresias", ELASTIC, False),
    "elastic-tiresias-stop-resume": (
        "elastic-tiresias",
        [*ELASTIC, "--resize-mechanism", "stop-resume"],
        False,
    ),
    "elastic-fifo": ("elastic-fifo", ELASTIC, False),
    "tiresias-quotas": ("tiresias", QUOTAS, False),
    "fifo-quotas": ("fifo", QUOTAS, False),
    "srtf-quotas": ("srtf", QUOTAS, False),
    "drf-quotas": ("drf", QUOTAS, False),
    "ftf-quotas": ("ftf", QUOTAS, False),
    "sjf-bsbf-quotas": ("sjf-bsbf", QUOTAS, False),
    "elastic-tiresias-quotas": ("elastic-tiresias", [*ELASTIC, *QUOTAS], False),
    "tiresias-hard-quotas": ("tiresias", [*QUOTAS, "--hard-quotas"], False),
    **{
        p: (p, ELASTIC, True)
        for p in ["aryl", "aryl-base", "aryl-naive-reclaim", "aryl-no-elastic", "aryl-no-loan"]
    },
    "aryl-quotas": ("aryl", [*ELASTIC, *QUOTAS], True),
}


def digest(run_dir: Path) -> str:
    summary = json.loads((run_dir / "summary.json").read_text())
    summary.pop("wall_s", None)
    h = hashlib.sha256(json.dumps(summary, sort_keys=True).encode())
    for path in sorted(run_dir.glob("*.csv")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def run(trace: str, name: str, out: Path) -> tuple[str, str]:
    policy, options, inference = RUNS[name]
    cluster = CLUSTERS[trace] + (INFERENCE if inference else "")
    run_dir = out / f"{trace}-{name}"
    cmd = [
        sys.executable,
        "-c",
        "import sys; from dlsched.cli import main; sys.exit(main())",
        "simulate",
        "--trace",
        trace,
        "--cluster",
        cluster,
    ]
    cmd += ["--policy", policy, *options, "--out", str(run_dir), "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        return f"{trace}-{name}", "error: " + done.stderr.strip().splitlines()[-1]
    return f"{trace}-{name}", digest(run_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--traces", default="muri-3,philly")
    parser.add_argument("--runs", help="comma-separated run names (default: all)")
    parser.add_argument("--compare", type=Path, help="an earlier --out to compare against")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once")
    args = parser.parse_args()
    names = args.runs.split(",") if args.runs else list(RUNS)
    todo = [(t, n) for t in args.traces.split(",") for n in names]
    args.out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        results = dict(pool.map(lambda tn: run(*tn, args.out), todo))
    (args.out / "digests.json").write_text(json.dumps(results, indent=1, sort_keys=True))
    before = json.loads((args.compare / "digests.json").read_text()) if args.compare else {}
    differ = 0
    for key, value in results.items():
        mark = ""
        if before:
            same = before.get(key) == value
            differ += not same
            mark = "same" if same else f"DIFFERS (was {before.get(key)})"
        print(f"{key:<40} {value:<20} {mark}")
    if before:
        print(f"{len(results) - differ} of {len(results)} runs identical")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
