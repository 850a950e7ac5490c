"""The device-specific layer: the memory cap of a job that may share its GPU, and what of the
machine a sandboxed worker needs to use an NVIDIA GPU (:func:`gpu_mounts`).

Under a sharing policy every job whose memory is known runs capped at the memory the policy
granted it (its profiled peak at its sub-batch plus :data:`MEMORY_HEADROOM`): a partner was
admitted to its GPU on that figure, so a job that grows past it must fail alone, not take its
partner down with an out-of-memory error. The runtime then requeues it to run without sharing
(and without a cap).

- On a CUDA device the cap is PyTorch's allocator limit
  (``torch.cuda.set_per_process_memory_fraction``): an allocation past it raises
  ``torch.OutOfMemoryError`` in this job only. Where the node runs NVIDIA MPS the executor also
  gives the process MPS's own per-client limits (:func:`mps_environment`).
- On emulated GPUs (a CPU) the emulated device keeps its own account of the memory it holds
  (:func:`use_emulated_memory`, at each pass), which profiling reads as it reads the CUDA
  allocator's peak, and raises the same error past the cap. Not the process's resident
  memory: that is mostly the host's (the interpreter, Ray's and gloo's buffers) and moves with
  the machine's load, where a device's allocations at one batch size do not.

A tenant's program runs in the same process and could raise that error itself: it gains
nothing by it, as the runtime honours an over-grant failure once per job (it then runs alone,
uncapped, and a second failure counts as its own).
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

# Chosen default (``RuntimeSpeed(memory_headroom=...)`` overrides it): what a grant adds to the
# profiled peak, as a fraction, for what profiling does not see (the allocator's fragmentation,
# a collective's buffers across several workers, the peak of a longer run).
MEMORY_HEADROOM = 0.10
OVER_GRANT = "exceeded its memory grant"  # starts the error text of a capped job's failure

_cap_mib: float | None = None


def cap_memory(grant_mib: float | None) -> None:
    """Cap this process's device memory at ``grant_mib`` (None: no cap)."""
    global _cap_mib
    _cap_mib = float(grant_mib) if grant_mib else None
    if _cap_mib is None:
        return
    import torch

    if torch.cuda.is_available():
        total = torch.cuda.get_device_properties(0).total_memory / 2**20
        torch.cuda.set_per_process_memory_fraction(min(1.0, _cap_mib / total), 0)


def _over_grant_error(in_use_mib: float) -> Exception:
    import torch

    return torch.OutOfMemoryError(
        f"{OVER_GRANT} of {_cap_mib:,.0f} MiB on a shared GPU ({in_use_mib:,.0f} MiB in use)"
    )


_emulated_peak_mib: float | None = None  # set once an emulated device reported its memory


def use_emulated_memory(in_use_mib: float) -> None:
    """An emulated device's memory in use at this pass: past the cap it raises as the CUDA
    allocator would; its peak is what :func:`peak_mib` reads."""
    global _emulated_peak_mib
    _emulated_peak_mib = max(_emulated_peak_mib or 0.0, in_use_mib)
    if _cap_mib is not None and in_use_mib > _cap_mib:
        raise _over_grant_error(in_use_mib)


def peak_mib() -> float:
    """This process's peak device memory: the CUDA allocator's, an emulated device's, or, for a
    real workload on a CPU, the process's peak resident memory."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    if _emulated_peak_mib is not None:
        return _emulated_peak_mib
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def out_of_memory(error_text: str) -> bool:
    """Whether a worker's error is the allocator's (or the emulated check's) out-of-memory."""
    return "OutOfMemoryError" in error_text or "CUDA out of memory" in error_text


def mps_environment(grant_mib: float | None, jobs_per_gpu: int) -> dict[str, str]:
    """NVIDIA MPS's per-client limits for a capped job's processes, where the node runs the MPS
    daemon (``CUDA_MPS_PIPE_DIRECTORY`` is set for the worker): its memory grant on its one
    visible device, and its share of the device's threads. Empty elsewhere."""
    if not grant_mib or not os.environ.get("CUDA_MPS_PIPE_DIRECTORY"):
        return {}
    return {
        "CUDA_MPS_PIPE_DIRECTORY": os.environ["CUDA_MPS_PIPE_DIRECTORY"],
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={int(grant_mib)}M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(100 // max(1, jobs_per_gpu)),
    }


# Where the NVIDIA driver's device files and the kernel's device tree are (tests point them at
# a fake tree)
DEV = Path("/dev")
SYS = Path("/sys")
MPS_DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"


def gpu_mounts() -> list[str]:
    """bubblewrap arguments that expose the machine's NVIDIA GPUs to a sandboxed worker, after
    its private ``/dev`` is made (nothing on a machine without them). CUDA_VISIBLE_DEVICES then
    picks the worker's one device among them.

    - ``/dev/nvidia*`` (the devices, ``nvidiactl``, ``nvidia-uvm``, ``nvidia-caps/``): bound as
      devices, which a GPU process opens read-write;
    - ``/sys/bus/pci`` and ``/sys/devices``, read-only: NVML reads the GPUs' PCI topology there
      (the rest of ``/sys`` stays hidden); ``/proc/driver/nvidia`` is in the sandbox's own
      ``/proc`` already;
    - the MPS daemon's pipe directory, where the node runs MPS, writable (its clients connect
      to sockets there);
    - the driver's libraries are under ``/usr``, read-only like the rest of the file system;
      a driver installed elsewhere (under ``/run``, as NVIDIA's GPU operator does) is exposed
      with ``--sandbox-expose``.
    """
    devices = sorted(DEV.glob("nvidia*"))
    if not devices:
        return []
    args: list[str] = []
    for device in devices:
        args += ["--dev-bind", str(device), f"/dev/{device.name}"]
    for tree in (SYS / "bus" / "pci", SYS / "devices"):
        if tree.exists():
            args += ["--ro-bind", str(tree), f"/sys/{tree.relative_to(SYS)}"]
    pipes = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", MPS_DEFAULT_PIPE_DIRECTORY)
    if Path(pipes).is_dir():
        args += ["--bind", pipes, pipes]
    return args
