"""Is this tree slower than another at a replay, by more than a few percent? Paired rounds on a
noisy machine: each round runs both trees' own ``benchmarks/sim_speed.py`` (full Philly by
default) for one policy, in the order A B B A so that a drift in the machine's speed within a
round touches both alike, and takes the ratio of B's wall time to A's. Prints each round, then
the geometric mean of the ratios with its 95% interval (Student's t on their logarithms).

    git worktree add /tmp/old b94690e
    .venv/bin/python benchmarks/ab_speed.py /tmp/old . --policy tiresias --rounds 6
    .venv/bin/python benchmarks/ab_speed.py /tmp/old . --policy elastic-tiresias \
        -- --elastic-fraction 0.5

Options after ``--`` go to both trees' ``sim_speed.py``. A tree is run with its own ``src`` on
``PYTHONPATH``; each run prepares its workload again (not timed: sim_speed times the replay).
A tree's own preparation may draw other models than the other's (b94690e's does), so the two
replays may not be the same work: with ``--same-jobs`` both replay tree A's preparation of the
trace instead, saved once, as ``ab_instructions.py`` counts them (its options ``--trace``,
``--cluster``, ``--elastic-fraction``, ``--limit``, ``--deadlines``, ``--quotas`` then apply).
On this 2-core VM the same replay has varied by 20-45% within an hour (docs/speed-log.md): a
single pair of runs cannot tell 5%, an interval over rounds can say whether it could.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from dlsched.stats import geometric_mean_ci

sys.path.insert(0, str(Path(__file__).parent))
import ab_instructions  # noqa: E402  (its saved jobs and replay)


def replay_s(tree: Path, policy: str, extra: list[str]) -> float:
    """Wall seconds of one replay, as the tree's own sim_speed.py reports it."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    cmd = [sys.executable, str(tree / "benchmarks" / "sim_speed.py"), "--policies", policy]
    out = subprocess.run(cmd + extra, env=env, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        fields = line.split()
        if fields and fields[0] == policy:
            return float(fields[1])
    raise RuntimeError(f"{tree}: no line for {policy} in sim_speed's output:\n{out}")


# a replay of the saved jobs (ab_instructions.py's), timed: its own loop runs no replay
TIMED = """
import time
start = time.perf_counter()
run()
print(time.perf_counter() - start)
"""


def same_jobs_replay_s(tree: Path, args: argparse.Namespace, jobs: Path) -> float:
    """Wall seconds of one replay of the saved jobs in ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "PYTHONHASHSEED": "0"}
    script = ab_instructions.PREPARE + ab_instructions.REPLAY + TIMED
    cmd = [sys.executable, "-c", script, *ab_instructions.inputs(args), str(jobs)]
    cmd += [args.quotas, args.policy, "0"]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return float(out.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="the tree to compare with (e.g. an old commit's)")
    parser.add_argument("b", type=Path, help="the tree measured")
    parser.add_argument("--policy", default="tiresias")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--same-jobs", action="store_true", help="both replay tree A's jobs")
    parser.add_argument("--trace", default="philly")
    parser.add_argument("--cluster", default="64x8:V100")
    parser.add_argument("--elastic-fraction", type=float, default=0.0)
    parser.add_argument("--limit", type=int, default=0, help="the trace's first N jobs (0: all)")
    parser.add_argument("--deadlines", action="store_true", help="generated deadlines")
    parser.add_argument("--quotas", default="-", help="a quota setting (equal, philly-vc, a file)")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    args.extra = argv[cut + 1 :]  # for sim_speed.py
    if args.rounds < 2:
        parser.error("--rounds: at least 2 (an interval needs two ratios)")
    a, b = args.a.resolve(), args.b.resolve()
    with tempfile.TemporaryDirectory(prefix="dlsched-ab-") as tmp:
        if args.same_jobs:
            jobs = ab_instructions.save_jobs(a, args, Path(tmp) / "jobs.json")

            def timed(tree: Path) -> float:
                return same_jobs_replay_s(tree, args, jobs)
        else:

            def timed(tree: Path) -> float:
                return replay_s(tree, args.policy, args.extra)

        rounds(args, a, b, timed)


def rounds(args: argparse.Namespace, a: Path, b: Path, timed: Callable[[Path], float]) -> None:
    """Time the trees in rounds of A B B A; print each round and the mean ratio."""
    ratios = []
    for r in range(args.rounds):
        a1, b1, b2, a2 = timed(a), timed(b), timed(b), timed(a)
        ratios.append((b1 + b2) / (a1 + a2))
        print(
            f"round {r + 1}: A {a1:.2f} {a2:.2f} s, B {b1:.2f} {b2:.2f} s, B/A {ratios[-1]:.3f}",
            flush=True,
        )
    mean, low, high = geometric_mean_ci(ratios)
    print(
        f"{args.policy}: B/A {mean:.3f} (95% interval {low:.3f}-{high:.3f}, "
        f"{len(ratios)} rounds; median {statistics.median(ratios):.3f})"
    )


if __name__ == "__main__":
    main()
