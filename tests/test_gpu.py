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


@pytest.mark.gpu
@needs_cuda
@pytest.mark.runtime
def test_the_runtime_profiles_shares_resizes_and_molds_on_real_gpus(tmp_path):
    """End to end on this machine's GPUs: sjf-bsbf profiles two jobs on their device and pairs
    them on one GPU; elastic-fifo grows a job into a freed GPU; GENIE profiles on 1 and 2
    workers."""
    from contextlib import contextmanager

    from runtime_helpers import Harness, local_ray_cluster, wait_for

    gpus = torch.cuda.device_count()
    if gpus < 2:
        pytest.skip(f"needs 2 GPUs (this machine has {gpus})")
    with contextmanager(local_ray_cluster)(nodes=1, gpus_per_node=gpus) as cluster:
        h = Harness(cluster.address, tmp_path / "sjf", "sjf-bsbf")
        try:
            alice = h.tenant("alice")
            long_job = h.submit(alice, **LM_ON_GPU, gpus=1, batch_size=32, iterations=3000)
            wait_for(lambda: h.job(long_job)["iteration"] > 0, 300, what="the long job")
            short = h.submit(alice, **LM_ON_GPU, gpus=1, batch_size=16, iterations=200)
            job = h.wait_status(short, "done", timeout_s=600)
            assert job["profile"]["fixed_mib"] > 0
            assert h.wait_status(long_job, "done", timeout_s=1200)["failures"] == 0
        finally:
            h.close()
        h = Harness(cluster.address, tmp_path / "elastic", "elastic-fifo")
        try:
            alice = h.tenant("alice")
            spec = {**LM_ON_GPU, "batch_size": 32, "iterations": 3000}
            grower = h.submit(alice, **spec, gpus=1, min_gpus=1, max_gpus=2)
            done = h.wait_status(grower, "done", timeout_s=1200)
            assert done["failures"] == 0
        finally:
            h.close()
        h = Harness(cluster.address, tmp_path / "genie", "genie")
        try:
            alice = h.tenant("alice")
            job_id = h.submit(alice, **LM_ON_GPU, gpus=2, batch_size=32, iterations=100)
            job = h.wait_status(job_id, "done", timeout_s=600)
            placements = {(m["gpus"], m["nodes"]) for m in job["profile"]["placements"]}
            assert {(1, 1), (2, 1)} <= placements
        finally:
            h.close()
