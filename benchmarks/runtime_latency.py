"""Runtime latencies on an embedded Ray cluster (2 emulated nodes x 2 GPUs):

1. submit-to-first-iteration: from the submit call's return to the job's first finished
   iteration as the API reports it (scheduling pass, gang start of the Ray workers, torch import
   and model build, one iteration, progress report), for a 1-GPU and a 2-GPU job;
2. the scheduling loop with 1,000 queued jobs: one whole pass of the service (store, executor
   reports, policy, books) and the policy's decision alone, for FIFO and Tiresias.

    .venv/bin/python benchmarks/runtime_latency.py [--jobs 1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from runtime_helpers import LM, Harness, wait_for  # noqa: E402


def first_iteration_latency(
    h: Harness, auth: dict, gpus: int, repeat: int
) -> tuple[list[float], list[float]]:
    to_running, to_first = [], []
    for _ in range(repeat):
        jid = h.submit(auth, **LM, gpus=gpus, batch_size=8, iterations=100000, log_every=1000)
        t_submit = time.perf_counter()
        wait_for(lambda jid=jid: h.job(jid)["status"] == "running", 60, every_s=0.01)
        to_running.append(time.perf_counter() - t_submit)
        wait_for(lambda jid=jid: h.job(jid)["iteration"] >= 1, 120, every_s=0.01)
        to_first.append(time.perf_counter() - t_submit)
        h.client.post(f"/v1/jobs/{jid}/cancel", headers=auth)
        h.wait_status(jid, "cancelled")
        wait_for(lambda: not h.executor.active(), 60, every_s=0.05)
    return to_running, to_first


def loop_latency(h: Harness, auth: dict, jobs: int, passes: int) -> tuple[list[float], list[float]]:
    blocker = h.submit(auth, **LM, gpus=4, batch_size=8, iterations=10**7, log_every=10**6)
    h.wait_status(blocker, "running")
    for _ in range(jobs):
        h.store.add_job(
            "bench", {**LM, "gpus": 4, "batch_size": 8, "iterations": 10, "checkpoint_every": 50}
        )
    h.service.stop()  # drive the passes by hand from here
    h.service.step()  # takes the 1,000 jobs in
    assert len(h.service.state.pending) == jobs
    whole, policy = [], []
    for _ in range(passes):
        t0 = time.perf_counter()
        h.service.step()
        whole.append(time.perf_counter() - t0)
        policy.append(h.service.pass_s)
    h.executor.stop(blocker, graceful=False)
    return whole, policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument(
        "--repeat", type=int, default=5, help="jobs per first-iteration measurement"
    )
    parser.add_argument("--passes", type=int, default=20)
    args = parser.parse_args()
    from dlsched.runtime.ray_executor import LocalRayCluster

    cluster = LocalRayCluster(nodes=2, gpus_per_node=2)

    def ms(xs: list[float]) -> str:
        return f"median {statistics.median(xs) * 1000:8.1f} ms, min {min(xs) * 1000:8.1f}, " + (
            f"max {max(xs) * 1000:8.1f}"
        )

    try:
        with tempfile.TemporaryDirectory() as tmp:
            h = Harness(cluster.address, Path(tmp), "fifo")
            auth = h.tenant("bench")
            for gpus in (1, 2):
                running, first = first_iteration_latency(h, auth, gpus, args.repeat)
                print(
                    f"submit -> running,         {gpus} GPU(s), {args.repeat} jobs: {ms(running)}"
                )
                print(f"submit -> first iteration, {gpus} GPU(s), {args.repeat} jobs: {ms(first)}")
            h.close()
        for policy in ("fifo", "tiresias"):
            with tempfile.TemporaryDirectory() as tmp:
                h = Harness(cluster.address, Path(tmp), policy)
                auth = h.tenant("bench")
                whole, decide = loop_latency(h, auth, args.jobs, args.passes)
                print(
                    f"{policy:<8} {args.jobs:,} queued: whole pass {ms(whole)}; policy alone "
                    f"{ms(decide)}"
                )
                h.close()
    finally:
        import ray

        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
