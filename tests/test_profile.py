"""GENIE's profiling group without Ray: three processes on this machine, as the executor's
ProfileWorkers run them (ranks 0 and 1 "on one node", rank 2 "on another")."""

import multiprocessing
import os
import socket

import pytest

pytest.importorskip("torch")

from dlsched.runtime.profile import profile_placements  # noqa: E402

# the emulated device holds each forward pass for 20 ms + 1 ms per sample (wall time)
CONFIG = {
    "entrypoint": "dlsched.workloads.emulated:build",
    "args": {"samples": 64, "fixed_ms": 20.0, "per_sample_ms": 1.0},
    "gpus": 4,
    "batch_size": 16,
}


def _worker(rank: int, world: int, master: str, results) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    results.put((rank, profile_placements(CONFIG, rank, world, master, repeats=1)))


def _run_group(world: int) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        master = f"127.0.0.1:{s.getsockname()[1]}"
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    workers = [
        spawn.Process(target=_worker, args=(rank, world, master, results)) for rank in range(world)
    ]
    for w in workers:
        w.start()
    try:
        out = dict(results.get(timeout=120) for _ in workers)
    finally:
        for w in workers:
            w.join(timeout=30)
            if w.is_alive():
                w.kill()
    assert [w.exitcode for w in workers] == [0] * world
    return out


def test_one_group_of_three_times_the_job_alone_on_one_node_and_on_two():
    out = _run_group(3)
    assert out[1] is None and out[2] is None  # only rank 0 reports
    profile = out[0]
    assert profile["local_batch"] == 4  # 16 samples on 4 GPUs
    found = {(p["gpus"], p["nodes"], p["batch"]): p["iteration_s"] for p in profile["placements"]}
    assert set(found) == {(g, n, b) for g, n in ((1, 1), (2, 1), (2, 2)) for b in (2, 4)}
    for (_, _, batch), seconds in found.items():  # at least the device's time for its batch
        assert seconds >= (20 + batch) / 1000
    # the 1-worker entries are the profile's own points (the fitted line's inputs)
    assert [(p["batch"], p["iteration_s"]) for p in profile["points"]] == [
        (b, found[(1, 1, b)]) for b in (2, 4)
    ]
