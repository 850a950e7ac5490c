"""Is this tree's replay more work than another's? The instructions of one replay in each tree,
counted by Valgrind's cachegrind (with ``--cache-sim``, also its simulated cache misses; with
``--branch-sim``, its simulated mispredicted branches, which cost time an instruction count
does not show: docs/speed-log.md, Tiresias' extra time): a
count this machine's timing noise does not touch (the same replay's wall time varies by
20-45% here, so ab_speed.py needs many rounds to tell 5%). Both trees replay the same jobs:
tree A's preparation of the trace, saved as JSON (a tree's own preparation may draw other
models: b94690e's does). Each tree runs its replay in one process and only its preparation in
another; the replay's count is the difference.

    git worktree add /tmp/old b94690e
    .venv/bin/python benchmarks/ab_instructions.py /tmp/old . --policy tiresias
    .venv/bin/python benchmarks/ab_instructions.py /tmp/old . --policy aryl \\
        --cluster 64x8:V100,16x8:V100@inference --elastic-fraction 0.5

Each process hashes strings with the same seed (``PYTHONHASHSEED=0``): with random seeds, sets
and dicts of job ids grow and iterate differently, and one tree's count moved by 0.8% between
two runs. Instructions are not seconds (a cache miss costs more than an add): this says how much
more work a replay does, ``ab_speed.py`` how much more time it takes. Counted processes run
about 20 times slower than plain ones, in parallel (``--parallel``; the counts do not depend on
it). Needs valgrind (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# the replay as sim_speed.py runs it (the same calls exist in older trees), of the jobs saved
# by SAVE in tree A
PREPARE = """
import sys
from dlsched.prepare import prepare
trace, cluster, fraction, limit, deadlines = sys.argv[1:6]
w = prepare(trace, cluster, elastic_fraction=float(fraction), limit=int(limit) or None,
            deadlines=deadlines == "1")
"""
SAVE = """
import dataclasses, json
json.dump([dataclasses.asdict(j) for j in w.jobs], open(sys.argv[6], "w"))
"""
REPLAY = """
import json
from dlsched.inference import demand_cycle, load_curve
from dlsched.jobs import JobSpec
from dlsched.policies.catalog import make_policy
from dlsched.sim import SimConfig, simulate
quotas, policy, replays = sys.argv[7:]
def spec(d):
    types = d["gpu_types"]  # a tuple, saved as a list
    return JobSpec(**{**d, "gpu_types": None if types is None else tuple(types)})
jobs = [spec(d) for d in json.load(open(sys.argv[6]))]
servers = sum(1 for n in w.cluster.nodes if n.pool == "inference")
demand = demand_cycle(load_curve("genai"), servers) if servers else None
def run():
    gpus, tenants = w.cluster.pool_gpus("training"), [j.tenant for j in jobs]
    if quotas == "-":
        return simulate(w.cluster, jobs, make_policy(policy), SimConfig(inference_demand=demand),
                        workload=w.model())
    try:  # the quota stage (since the policy boundary)
        from dlsched.admission import QuotaAdmission
        from dlsched.tenant_quotas import load_tenants
    except ImportError:  # the quota layer over the policy (b94690e)
        from dlsched.policies.quota import QuotaLayer
        from dlsched.tenancy import load_tenants
        return simulate(w.cluster, jobs, QuotaLayer(make_policy(policy), load_tenants(
            quotas, tenants, gpus)), SimConfig(inference_demand=demand), workload=w.model())
    admission = QuotaAdmission(load_tenants(quotas, tenants, gpus))
    return simulate(w.cluster, jobs, make_policy(policy), SimConfig(inference_demand=demand),
                    workload=w.model(), admission=admission)
for _ in range(int(replays)):
    run()
"""


def inputs(args: argparse.Namespace) -> list[str]:
    deadlines = "1" if args.deadlines else "0"
    return [args.trace, args.cluster, str(args.elastic_fraction), str(args.limit), deadlines]


def save_jobs(tree: Path, args: argparse.Namespace, path: Path) -> Path:
    """Save ``tree``'s preparation of the trace (the jobs both trees replay) to ``path``."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "PYTHONHASHSEED": "0"}
    cmd = [sys.executable, "-c", PREPARE + SAVE, *inputs(args), str(path)]
    subprocess.run(cmd, env=env, check=True)
    return path


# cachegrind's totals: with --cache-sim also its simulated first-level and last-level misses,
# with --branch-sim its conditional and indirect branches and those its predictor missed
COUNTERS = ("I refs", "D refs", "D1 misses", "LL misses", "Branches", "Mispredicts")


def counts(tree: Path, args: argparse.Namespace, jobs: Path, replays: int) -> dict[str, int]:
    """cachegrind's totals for a process of ``tree`` that prepares and runs ``replays``."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "PYTHONHASHSEED": "0"}
    cmd = ["valgrind", "--tool=cachegrind", "--cachegrind-out-file=/dev/null"]
    cmd.append(f"--cache-sim={'yes' if args.cache_sim else 'no'}")
    cmd.append(f"--branch-sim={'yes' if args.branch_sim else 'no'}")
    cmd += [sys.executable, "-c", PREPARE + REPLAY, *inputs(args), str(jobs), args.quotas]
    cmd.append(args.policy)
    cmd.append(str(replays))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    found = {
        " ".join(name.split()): int(value.replace(",", ""))
        for name, value in re.findall(r"== (\w+(?:\s+\w+)?):\s+([\d,]+)", done.stderr)
    }
    if done.returncode != 0 or "I refs" not in found:
        raise RuntimeError(f"{tree}: the counted run failed:\n{done.stderr[-3000:]}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="the tree to compare with (e.g. an old commit's)")
    parser.add_argument("b", type=Path, help="the tree measured")
    parser.add_argument("--policy", default="tiresias")
    parser.add_argument("--trace", default="philly")
    parser.add_argument("--cluster", default="64x8:V100")
    parser.add_argument("--elastic-fraction", type=float, default=0.0)
    parser.add_argument("--limit", type=int, default=0, help="the trace's first N jobs (0: all)")
    parser.add_argument("--deadlines", action="store_true", help="generated deadlines")
    parser.add_argument(
        "--cache-sim",
        action="store_true",
        help="also simulate the caches: data reads and writes, first- and last-level misses",
    )
    parser.add_argument(
        "--branch-sim",
        action="store_true",
        help="also simulate branch prediction: branches and mispredicted branches",
    )
    parser.add_argument(
        "--quotas", default="-", help="equal, philly-vc or a YAML file (each tree's own API)"
    )
    parser.add_argument("--parallel", type=int, default=os.cpu_count() or 1, help="runs at once")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        parser.error("needs valgrind on PATH (apt-get install valgrind)")
    trees = {"A": args.a.resolve(), "B": args.b.resolve()}
    runs = [(name, replays) for replays in (1, 0) for name in trees]  # the longest first
    with tempfile.TemporaryDirectory(prefix="dlsched-ab-") as tmp:
        jobs = save_jobs(trees["A"], args, Path(tmp) / "jobs.json")
        with ThreadPoolExecutor(args.parallel) as pool:
            counted = dict(
                zip(runs, pool.map(lambda r: counts(trees[r[0]], args, jobs, r[1]), runs))
            )
    for counter in [c for c in COUNTERS if c in counted["A", 1]]:
        replay = {name: counted[name, 1][counter] - counted[name, 0][counter] for name in trees}
        what = "instructions" if counter == "I refs" else counter
        for name, tree in trees.items():
            print(
                f"{name} {tree}: replay {replay[name] / 1e6:,.1f} M {what} "
                f"(preparation {counted[name, 0][counter] / 1e6:,.1f} M)"
            )
        print(f"{args.policy}: B/A {replay['B'] / replay['A']:.3f} ({what} of the replay)")


if __name__ == "__main__":
    main()
