"""Aryl in the runtime, end to end: an embedded Ray cluster with one training node and one
inference server (2 emulated GPUs each), a real PyTorch job growing onto the loaned server,
and the server reclaimed through the API while the job trains."""

import os
import time
from pathlib import Path

import pytest

from runtime_helpers import EMULATED, Harness, local_ray_cluster, wait_for

pytestmark = pytest.mark.runtime

NOTICE_S = 20.0


@pytest.fixture(scope="module")
def ray_cluster():
    """Its own shape: one training node and one inference server (a stand-in runs there)."""
    yield from local_ray_cluster(nodes=1, gpus_per_node=2, cpus_per_node=4, inference_nodes=1)


def descendants(pid: int) -> set[int]:
    """The process and every process below it (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        out.add(p)
        todo.extend(children.get(p, []))
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_job_grows_onto_a_loaned_server_and_scales_in_when_it_is_reclaimed(ray_cluster, tmp_path):
    import ray

    h = Harness(ray_cluster.address, tmp_path, "aryl", reclaim_notice_s=NOTICE_S)
    try:
        wait_for(lambda: h.executor.inference_ready("i0"), 60, what="the inference stand-in on i0")
        alice = h.tenant("alice")
        # long enough to outlast a slow scale-out on a loaded machine: cancelled at the end
        job = h.submit(
            alice,
            **EMULATED,
            gpus=2,
            min_gpus=1,
            max_gpus=4,
            batch_size=16,
            iterations=1_000_000,
            checkpoint_every=0,
        )
        h.wait_status(job, "running")
        assert {n for n, _ in h.job(job)["gpus"]} == {"n0"}  # inference holds i0
        # the autoscaler needs none of its servers: i0 is lent, and the job grows onto it
        r = h.client.put("/v1/pools/inference/demand", json={"servers": 0}, headers=h.admin)
        assert r.status_code == 200 and r.json()["loaned"] == ["i0"]
        wait_for(
            lambda: (
                any("background resize done" in e["message"] for e in h.job(job)["events"])
                and {n for n, _ in h.job(job)["gpus"]} == {"n0", "i0"}
            ),
            120,
            what="the job to grow onto i0",
        )
        run = h.executor._runs[job]
        on_i0 = [
            pid
            for (node, _), pid in zip(run.placement, h.executor.worker_pids(job))
            if node == "i0"
        ]
        assert len(on_i0) == 2
        training_there = set().union(*(descendants(p) for p in on_i0))
        assert len(training_there) > 2  # the workers and their tenant processes
        # a tenant cannot do this; the admin (the inference side) can
        tenant_try = h.client.put("/v1/pools/inference/demand", json={"servers": 1}, headers=alice)
        assert tenant_try.status_code == 403
        asked = time.monotonic()
        r = h.client.put("/v1/pools/inference/demand", json={"servers": 1}, headers=h.admin)
        assert r.status_code == 200 and "i0" in r.json()["returning"]
        pools = wait_for(
            lambda: (p := h.client.get("/v1/pools", headers=h.admin).json())["returned"] == 1 and p,
            NOTICE_S + 30,
            what="i0 to be handed back",
        )
        took = time.monotonic() - asked
        print(
            f"i0 handed back {took:.1f} s after the reclaim (service: {pools['max_return_s']:.1f} "
            f"s; notice {NOTICE_S:g} s)"
        )
        assert pools["max_return_s"] <= NOTICE_S and took <= NOTICE_S + 5
        assert pools["reclaim_scale_ins"] == 1 and pools["reclaim_preemptions"] == 0
        # the stand-in serves on i0 and holds every GPU unit there; nothing of training is left
        assert h.executor.inference_ready("i0")
        stand_in = ray.get_actor("inference-i0", namespace="dlsched")
        assert len(ray.get(stand_in.infer.remote([0.5] * 64), timeout=120)) == 8  # it serves
        available = ray.available_resources()
        assert all(available.get(f"dlsched_gpu_i0_{i}", 0) == 0 for i in range(2))
        assert not [p for p in training_there if alive(p)], (
            "a training process outlived the reclaim"
        )
        events = [e["message"] for e in h.job(job)["events"]]
        assert any("inference server was reclaimed" in m for m in events)
        # it trains on where it stayed, neither preempted nor failed
        scaled_in_at = h.job(job)["iteration"]
        after = wait_for(
            lambda: (j := h.job(job))["iteration"] >= scaled_in_at + 50 and j,
            120,
            what="the job to train on after the scale-in",
        )
        assert after["status"] == "running" and {n for n, _ in after["gpus"]} == {"n0"}
        assert after["preemptions"] == 0 and after["failures"] == 0
        assert h.client.post(f"/v1/jobs/{job}/cancel", headers=alice).status_code == 200
        h.wait_status(job, "cancelled", timeout_s=60)
        metrics = h.client.get("/metrics").text
        assert "dlsched_servers_returned_total 1.0" in metrics
    finally:
        h.close()
