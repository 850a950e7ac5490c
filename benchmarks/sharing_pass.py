"""Scheduling cost of SJF-BSBF: one pass over 5,000 pending jobs on a 4,096-GPU cluster
(512 nodes x 8 V100) half full of single-GPU jobs (4 of each node's 8 GPUs busy).

    .venv/bin/python benchmarks/sharing_pass.py [--policy sjf-bsbf] [--repeat 5]

Jobs cycle through the Muri traces' models (all with measured memory), with log-uniform
durations (seeded). Prints the wall time of the pass (median and best of --repeat fresh
setups) and what it decided.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time

from dlsched.cluster import parse_cluster_spec
from dlsched.jobs import JobSpec
from dlsched.perf.model import PerfModel
from dlsched.perf.speed import PerfSpeed
from dlsched.policies.catalog import make_policy
from dlsched.state.cluster_state import ClusterState
from dlsched.view import Plan

MODELS = ["resnet18", "shufflenet_v2_x1_0", "vgg16", "vgg19", "dqn", "a2c", "bert", "gpt2"]


def setup(policy_name: str, seed: int):
    rng = random.Random(seed)
    cluster = parse_cluster_spec("512x8:V100")
    running = [
        JobSpec(f"r{i}", 0.0, 1, 10 ** rng.uniform(2, 5), model=MODELS[i % len(MODELS)])
        for i in range(2048)
    ]
    pending = [
        JobSpec(f"p{i}", 0.0, 1, 10 ** rng.uniform(2, 5), model=MODELS[(i * 3) % len(MODELS)])
        for i in range(5000)
    ]
    policy = make_policy(policy_name)
    # the running half arrives and starts without the policy's hooks; then the policy takes over
    state = ClusterState(cluster, make_policy("fifo"), workload=PerfSpeed(PerfModel(), cluster))
    states = {s.job_id: state.submit(s) for s in running}
    busy = [node * 8 + k for node in range(512) for k in range(4)]
    state.apply(Plan(start=[(states[f"r{i}"], (busy[i],)) for i in range(2048)]))
    state.policy = policy
    for spec in pending:
        state.submit(spec)
    return state, policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="sjf-bsbf")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    times = []
    for r in range(args.repeat):
        state, policy = setup(args.policy, seed=r)
        gc.collect()  # do not bill the pass for collecting the setup's garbage
        t0 = time.perf_counter()
        plan = policy.schedule(state)
        times.append(time.perf_counter() - t0)
    shared = sum(1 for job, gpus in plan.start if any(not state.free.is_free(g) for g in gpus))
    print(f"{args.policy}: one pass over 5,000 pending jobs, 4,096 GPUs, 2,048 busy")
    print(
        f"  median {statistics.median(times) * 1000:.1f} ms, best {min(times) * 1000:.1f} ms "
        f"over {args.repeat} runs"
    )
    print(
        f"  last run: {len(plan.start):,} jobs started, {shared:,} of them sharing a GPU, "
        f"{len(plan.accumulation):,} with gradient accumulation"
    )


if __name__ == "__main__":
    main()
