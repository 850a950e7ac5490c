"""Training time lost to one resize (2 -> 4 workers), stop-resume against background scaling,
for a real workload on an embedded Ray cluster (2 emulated nodes x 2 GPUs).

    .venv/bin/python benchmarks/resize_cost.py [--workload lm|resnet] [--repeat 3] [--cold-starts]

The job logs every iteration with a millisecond timestamp. The time lost to a resize is the gap
between the last iteration before it and the first one after it, minus one ordinary iteration
at the new size (the median gap of the 20 iterations that follow). Also printed, from the same
log: for stop-resume, the stop and checkpoint, and the restart (worker processes, imports,
building the program, loading the checkpoint); for background scaling, the preparation that
overlaps training and the switch pause (new process group, state handed over by rank 0).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

os.environ.setdefault("OMP_NUM_THREADS", "1")

WORKLOADS = {
    "lm": {
        "entrypoint": "dlsched.workloads.lm:build",
        "args": {"samples": 512, "dim": 64, "layers": 2},
        "batch_size": 16,
    },
    "resnet": {
        "entrypoint": "dlsched.workloads.resnet:build",
        "args": {"samples": 512, "width": 16},
        "batch_size": 32,
    },
}
OLD = [("n0", 0), ("n0", 1)]
NEW = [("n0", 0), ("n0", 1), ("n1", 0), ("n1", 1)]


def parse(log: Path) -> list[tuple[float, str]]:
    out = []
    for line in log.read_text().splitlines():
        stamp, text = line[:23], line[24:]
        out.append((datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").timestamp(), text))
    return out


def is_marker(text: str) -> bool:
    return text.startswith("stopped at") or text.startswith("switching")


def iterations_after_resize(log: Path) -> int:
    lines = parse(log) if log.exists() else []
    marks = [i for i, (_, text) in enumerate(lines) if is_marker(text)]
    return sum(1 for _, text in lines[marks[0] :] if text.startswith("iteration ")) if marks else 0


def wait_iterations(executor, jid: str, n: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        p = executor.progress(jid)
        if p and (p.get("iteration") or 0) >= n:
            return
        time.sleep(0.05)
    raise TimeoutError(f"{jid} did not reach iteration {n}")


def one_resize(executor, workload: dict, mechanism: str, tag: str) -> dict:
    jid = f"{mechanism}-{tag}"
    config = {**workload, "iterations": 10**6, "checkpoint_every": 0, "log_every": 1}
    executor.start(jid, 1, OLD, config)
    wait_iterations(executor, jid, 40)
    if mechanism == "stop-resume":
        executor.stop(jid, graceful=True)
        executor.start(jid, 2, NEW, config)  # waits for the stop's checkpoint first
    else:
        executor.resize(jid, NEW)
    deadline = time.monotonic() + 180
    while iterations_after_resize(executor.log_path(jid)) < 25:  # some at the new size
        if time.monotonic() > deadline:
            raise TimeoutError(f"{jid}: too few iterations after the resize")
        time.sleep(0.2)
    executor.stop(jid, graceful=False)
    while jid in executor.active():
        time.sleep(0.1)
    lines = parse(executor.log_path(jid))
    iterations = [(t, int(text.split()[1])) for t, text in lines if text.startswith("iteration ")]
    marker = next(i for i, (_, text) in enumerate(lines) if is_marker(text))
    t_mark = lines[marker][0]
    before = max(t for t, _ in iterations if t <= t_mark)
    after = [t for t, _ in iterations if t > t_mark]
    gaps = [b - a for a, b in zip(after, after[1:])][:20]
    ordinary = statistics.median(gaps)
    out = {"lost_s": after[0] - before - ordinary, "iteration_s": ordinary}
    if mechanism == "stop-resume":
        restart = next(
            t for t, text in lines if t > t_mark and text.startswith("start at iteration")
        )
        out["stop_s"] = t_mark - before
        out["restart_s"] = restart - t_mark
    else:
        note = next(text for t, text in lines if "background resize" in text)
        out["prepare_s"] = float(note.split("prepared in ")[1].split(" s")[0])
        out["pause_s"] = float(note.split("paused ")[1].split(" s")[0])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="lm")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--cold-starts",
        action="store_true",
        help="tenant processes as new interpreters, not forked from the node's template",
    )
    args = parser.parse_args()
    # first: it configures Ray (its token, its session folder) before Ray is imported
    from runtime_helpers import sandbox_for  # isort: split

    import ray

    from dlsched.runtime.ray_executor import LocalRayCluster, RayExecutor

    cluster = LocalRayCluster(nodes=2, gpus_per_node=2)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            executor = RayExecutor(
                cluster.address, Path(tmp), sandbox_for(tmp, warm=not args.cold_starts)
            )
            results = {"stop-resume": [], "background": []}
            for r in range(args.repeat):
                for mechanism in results:
                    results[mechanism].append(
                        one_resize(executor, WORKLOADS[args.workload], mechanism, str(r))
                    )
            executor.shutdown()
    finally:
        ray.shutdown()
        cluster.shutdown()
    med = lambda rows, key: statistics.median(row[key] for row in rows)  # noqa: E731
    sr, bg = results["stop-resume"], results["background"]
    print(
        f"workload {args.workload}, resize 2 -> 4 workers, {args.repeat} runs each (medians); "
        f"an iteration at 4 workers takes {med(bg, 'iteration_s') * 1000:.0f} ms"
    )
    print(
        f"stop-resume: {med(sr, 'lost_s'):6.2f} s lost  (stop + checkpoint "
        f"{med(sr, 'stop_s'):.2f} s, "
        f"restart: processes, imports, build, load {med(sr, 'restart_s'):.2f} s)"
    )
    print(
        f"background:  {med(bg, 'lost_s'):6.2f} s lost  (switch pause {med(bg, 'pause_s'):.2f} s; "
        f"{med(bg, 'prepare_s'):.2f} s of preparation overlapped training)"
    )
    print(
        f"background / stop-resume: {med(bg, 'lost_s') / med(sr, 'lost_s'):.3f} "
        f"({(1 - med(bg, 'lost_s') / med(sr, 'lost_s')) * 100:.0f}% less time lost)"
    )


if __name__ == "__main__":
    main()
