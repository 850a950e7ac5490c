"""The runtime on real GPUs (docs/gpu.md): the checklist a GPU node must pass.

Tests marked ``gpu`` need CUDA and are skipped elsewhere, with the reason; the first test runs
everywhere, as the sandbox's exposure of the NVIDIA devices is testable on a fake device tree.
On CUDA they profile a job on its device, share one device between two jobs under their memory
caps (one outgrows its grant and fails alone), resize a job, and run GENIE's profiling.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from runtime_helpers import CAN_ISOLATE, sandbox_for

try:
    import torch

    CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover - torch is a test dependency
    CUDA = False

needs_cuda = pytest.mark.skipif(
    not CUDA, reason="no CUDA device on this machine: the real-GPU checklist (docs/gpu.md) skipped"
)
LM_ON_GPU = {
    "entrypoint": "dlsched.workloads.lm:build",
    "args": {"samples": 512, "dim": 256, "layers": 2},
}


@pytest.mark.skipif(not CAN_ISOLATE, reason="needs root and bubblewrap (make test-tools)")
def test_the_sandbox_shows_the_nvidia_devices_and_pci_tree_and_hides_the_rest_of_sys(
    tmp_path, monkeypatch
):
    from dlsched.runtime import device

    dev, sys_root = tmp_path / "dev", tmp_path / "sys"
    (dev / "nvidia-caps").mkdir(parents=True)
    for name in ("nvidia0", "nvidiactl", "nvidia-uvm"):
        (dev / name).write_text(f"fake {name}\n")
    (sys_root / "bus" / "pci" / "devices").mkdir(parents=True)
    (sys_root / "bus" / "pci" / "devices" / "0000:00:04.0").write_text("a GPU\n")
    (sys_root / "devices").mkdir()
    (sys_root / "kernel").mkdir()
    monkeypatch.setattr(device, "DEV", dev)
    monkeypatch.setattr(device, "SYS", sys_root)
    job_dir, data_dir = tmp_path / "job", tmp_path / "data"
    job_dir.mkdir()
    data_dir.mkdir()
    sandbox = sandbox_for(data_dir)
    script = (
        "cat /dev/nvidia0 /dev/nvidiactl; test -d /dev/nvidia-caps && echo caps; "
        "cat /sys/bus/pci/devices/0000:00:04.0; test -e /sys/kernel || echo no-kernel; "
        "test -e /dev/null && echo null"
    )
    out = subprocess.run(
        [*sandbox._bwrap(job_dir, own_network=True), "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n") == [
        "fake nvidia0",
        "fake nvidiactl",
        "caps",
        "a GPU",
        "no-kernel",
        "null",
        "",
    ]


@pytest.mark.gpu
@needs_cuda
def test_profiling_on_the_device_reads_the_device_s_memory():
    from dlsched.runtime.profile import profile_program

    before = torch.cuda.max_memory_allocated()
    result = profile_program({**LM_ON_GPU, "batch_size": 16, "gpus": 2})
    assert torch.cuda.max_memory_allocated() > before
    assert result["fixed_mib"] > 0 and result["c0_s"] > 0
    # the whole iteration under DDP (a group of one) held its buckets and optimizer state
    assert result["iteration_extra_mib"] > 0


CAPPED = textwrap.dedent(
    """
    import sys, torch
    from dlsched.runtime.device import cap_memory
    cap_memory(float(sys.argv[1]))
    keep = []
    try:
        for _ in range(int(sys.argv[2])):
            keep.append(torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda"))  # 64 MiB
    except torch.OutOfMemoryError:
        sys.exit(3)
    """
)


@pytest.mark.gpu
@needs_cuda
def test_two_processes_on_one_device_each_stop_at_their_own_cap():
    """A grant of 1 GiB each: one process takes 8 x 64 MiB and finishes, the other asks for
    40 x 64 MiB and fails alone with the allocator's out-of-memory error."""
    procs = [subprocess.Popen([sys.executable, "-c", CAPPED, "1024", str(n)]) for n in (8, 40)]
    assert [p.wait(timeout=120) for p in procs] == [0, 3]


def test_the_device_layer_without_a_device(monkeypatch):
    from dlsched.runtime import device

    assert device.out_of_memory("torch.OutOfMemoryError: CUDA out of memory. Tried to ...")
    assert not device.out_of_memory("RuntimeError: worker died")
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    assert device.mps_environment(1000.0, 2) == {}  # no MPS on this node
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "/tmp/mps")
    assert device.mps_environment(None, 2) == {}  # not capped
    assert device.mps_environment(1536.4, 2) == {
        "CUDA_MPS_PIPE_DIRECTORY": "/tmp/mps",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1536M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
    }


def _trained(h, job_id):
    """The model a finished job ended with (its last checkpoint)."""
    from dlsched.runtime.ray_executor import CHECKPOINT

    return torch.load(h.executor.job_dir(job_id) / CHECKPOINT, weights_only=True)["model"]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.runtime
def test_the_runtime_shares_a_device_under_caps_resizes_and_molds_on_real_gpus(tmp_path):
    """End to end through Ray and the sandbox: on one device, sjf-bsbf profiles two jobs there
    and runs them together under their caps, and the one that shared ends with the model it
    ends with alone (fifo); on two, elastic-fifo grows a job and GENIE profiles on 1 and 2
    workers."""
    from contextlib import contextmanager

    from runtime_helpers import Harness, local_ray_cluster, wait_for

    spec = {**LM_ON_GPU, "gpus": 1, "batch_size": 32}
    cluster_of = contextmanager(local_ray_cluster)
    with cluster_of(nodes=1, gpus_per_node=1) as cluster:
        h = Harness(cluster.address, tmp_path / "shared", "sjf-bsbf")
        try:
            alice = h.tenant("alice")
            long_job = h.submit(alice, **spec, iterations=3000)
            wait_for(lambda: h.job(long_job)["iteration"] > 0, 300, what="the long job")
            short = h.submit(alice, **spec, iterations=200)
            shared = h.wait_status(short, "done", timeout_s=900)
            # the cluster's one device, while the long job held it
            assert shared["started"] < (h.job(long_job)["finished"] or float("inf"))
            assert shared["failures"] == 0 and shared["profile"]["fixed_mib"] > 0
            assert h.wait_status(long_job, "done", timeout_s=1800)["failures"] == 0
            with_partner = _trained(h, short)
        finally:
            h.close()
        h = Harness(cluster.address, tmp_path / "alone", "fifo")
        try:
            alone = h.submit(h.tenant("alice"), **spec, iterations=200)
            h.wait_status(alone, "done", timeout_s=900)
            for name, value in _trained(h, alone).items():
                torch.testing.assert_close(with_partner[name], value, rtol=1e-3, atol=1e-4)
        finally:
            h.close()
    if torch.cuda.device_count() < 2:
        pytest.skip("the resize and GENIE's profiling need 2 GPUs")
    with cluster_of(nodes=1, gpus_per_node=2) as cluster:
        h = Harness(cluster.address, tmp_path / "elastic", "elastic-fifo")
        try:
            grower = h.submit(
                h.tenant("alice"), **{**spec, "iterations": 3000}, min_gpus=1, max_gpus=2
            )
            done = h.wait_status(grower, "done", timeout_s=1800)
            assert done["failures"] == 0 and len(done["gpus"]) == 2
        finally:
            h.close()
        h = Harness(cluster.address, tmp_path / "genie", "genie")
        try:
            job_id = h.submit(h.tenant("alice"), **{**spec, "gpus": 2}, iterations=100)
            job = h.wait_status(job_id, "done", timeout_s=900)
            placements = {(m["gpus"], m["nodes"]) for m in job["profile"]["placements"]}
            assert {(1, 1), (2, 1)} <= placements
        finally:
            h.close()
