"""A short profiling run of a new job: a few forward and backward passes of its program at its
per-worker batch b and at b / 2 (no optimizer step, nothing saved), timing each and reading the
peak memory. Two points give a line for each: iteration time = c0 + c1 x batch, memory =
fixed + per_sample x batch, which is what the sharing policies need (memory at a sub-batch,
the cost of gradient accumulation) and what a job's duration estimate is made from.

Memory is the device's peak allocation (:func:`.device.peak_mib`): the CUDA allocator's on a
GPU, the emulated device's own account on emulated GPUs, and for a real workload on a CPU the
process's peak resident memory.
A last, whole iteration (the optimizer's step, and for a job of several workers its model under
DDP in a group of one) adds to the fixed part what a training run holds on top of the timed
passes: the optimizer's state, DDP's gradient buckets and its collective's buffers. A job that
shares a GPU is capped at this line plus a headroom (:mod:`.device`), so it must not be low.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .device import cap_memory, peak_mib
from .startup_gc import collector_paused

if TYPE_CHECKING:  # (the module imports torch: a profiling run's own process does, later)
    from .train import Workload

PROFILE_REPEATS = 3  # timed passes per batch size, after one warm-up


def _nbytes(item: Any) -> int:
    if hasattr(item, "nbytes"):
        return int(item.nbytes)
    if isinstance(item, (tuple, list)):
        return sum(_nbytes(x) for x in item)
    return 8


def check_batch_fits(sample: Any, batch: int, limit_mib: float | None) -> None:
    """Refuse, before running anything, a batch whose inputs alone exceed the job's memory
    limit (a lower bound: activations come on top)."""
    need_mib = _nbytes(sample) * batch / 2**20
    if limit_mib and need_mib > limit_mib:
        raise MemoryError(
            f"batch_size: a worker's batch of {batch} samples holds {need_mib:,.0f} MiB of inputs "
            f"alone, over the job's memory limit of {limit_mib:,.0f} MiB"
        )


@collector_paused()
def _build(config: dict) -> tuple[Any, Workload, int, list[int]]:
    """The job's program built, its per-worker batch b (at its requested size) and the batches
    measured: b / 2 and b, the smaller first (peak memory only grows)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    from .train import load_entrypoint

    cap_memory(config.get("memory_grant_mib"))  # a run beside a job: the rest of its GPU
    workload = load_entrypoint(config["entrypoint"])(dict(config.get("args") or {}))
    if torch.cuda.is_available():  # the device it measures (the one CUDA_VISIBLE_DEVICES names)
        workload.model.to(torch.device("cuda", 0))
    local = max(1, int(config["batch_size"]) // int(config["gpus"]))
    check_batch_fits(workload.dataset[0], local, config.get("memory_limit_mib"))
    return torch, workload, local, sorted({max(1, local // 2), local})


def _batch(torch: Any, workload: Workload, batch: int) -> Any:
    from .train import collate, to_device

    data = workload.dataset
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    return to_device(collate([data[i % len(data)] for i in range(batch)]), device)


def _median_pass_s(torch: Any, workload: Workload, model: Any, batch: int, repeats: int) -> float:
    """The median time of a forward and backward pass at ``batch`` (after one warm-up)."""
    items = _batch(torch, workload, batch)
    times = []
    for r in range(repeats + 1):
        t0 = time.perf_counter()
        model.zero_grad()
        workload.mean_loss(model, items).backward()  # under DDP: the gradient all-reduce too
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        if r:
            times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def _whole_iteration_peak_mib(torch: Any, workload: Workload, batch: int, workers: int) -> float:
    """The peak memory once one whole training iteration ran at ``batch``: with the optimizer's
    step and, for a job of several workers, under DDP in a group of this process alone."""
    import torch.distributed as dist
    from torch import nn

    model = workload.model
    if workers > 1:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
        with collector_paused():  # its first construction imports torch._dynamo
            model = nn.parallel.DistributedDataParallel(model)
    try:
        optimizer = workload.optimizer(workload.model.parameters())
        optimizer.zero_grad()
        workload.mean_loss(model, _batch(torch, workload, batch)).backward()
        optimizer.step()
    finally:
        if workers > 1:
            model = None  # DDP goes before its group: freed after, the teardown can hang
            dist.destroy_process_group()
    return peak_mib()


def profile_program(config: dict, repeats: int = PROFILE_REPEATS) -> dict:
    return _profile_alone(*_build(config), int(config["gpus"]), repeats)


def _profile_alone(
    torch: Any, workload: Workload, local: int, batches: list[int], workers: int, repeats: int
) -> dict:
    points = []
    for batch in batches:
        t = _median_pass_s(torch, workload, workload.model, batch, repeats)
        points.append({"batch": batch, "iteration_s": t, "memory_mib": peak_mib()})
    lo, hi = points[0], points[-1]
    span = hi["batch"] - lo["batch"]
    c1 = max(0.0, (hi["iteration_s"] - lo["iteration_s"]) / span) if span else 0.0
    per_sample = max(0.0, (hi["memory_mib"] - lo["memory_mib"]) / span) if span else 0.0
    # what a training iteration holds beyond the timed passes (optimizer state, DDP buffers)
    extra = max(0.0, _whole_iteration_peak_mib(torch, workload, local, workers) - hi["memory_mib"])
    return {
        "local_batch": local,
        "points": points,
        "c0_s": max(1e-6, hi["iteration_s"] - c1 * hi["batch"]),
        "c1_s": c1,
        "fixed_mib": hi["memory_mib"] + extra - per_sample * hi["batch"],
        "per_sample_mib": per_sample,
        "iteration_extra_mib": extra,
    }


def profile_placements(
    config: dict,
    rank: int,
    world: int,
    master: str,
    partner_nodes: Sequence[int] = (1, 2),
    repeats: int = PROFILE_REPEATS,
) -> dict | None:
    """One worker of GENIE's profiling group of ``world`` processes (1 to 3): by default ranks
    0 and 1 on one node, rank 2 on another; ``partner_nodes[r - 1]`` is 1 when rank r shares
    rank 0's node, 2 when not. Rank 0 first profiles the job alone (:func:`profile_program`'s
    result), then each pair {0, r} times the model under DDP in a gloo (CPU) or NCCL group,
    each pass with its gradient all-reduce, at the per-worker batches b / 2 and b, while the
    other rank waits. Rank 0 returns the profile with its ``placements`` (gpus, nodes, batch,
    iteration_s); the others None. A worker's one process serves all its measurements: the
    program's build (torch's import, most of a profiling run's cost) is paid once per worker."""
    torch, workload, local, batches = _build(config)
    # DDP's constructor imports torch._dynamo (1.5 s of CPU here): every rank at once, while
    # rank 0 profiles alone, not each in its pair's turn with its partner waiting
    with collector_paused():
        importlib.import_module("torch._dynamo")

    alone = (
        _profile_alone(torch, workload, local, batches, int(config["gpus"]), repeats)
        if rank == 0
        else None
    )
    import torch.distributed as dist
    from torch import nn

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://{master}", rank=rank, world_size=world)
    placements = [
        {"gpus": 1, "nodes": 1, "batch": p["batch"], "iteration_s": p["iteration_s"]}
        for p in (alone["points"] if alone else [])
    ]
    try:
        for partner in range(1, world):
            group = dist.new_group([0, partner])  # a collective: every rank, in the same order
            if rank in (0, partner):
                model = nn.parallel.DistributedDataParallel(workload.model, process_group=group)
                placements += [
                    {
                        "gpus": 2,
                        "nodes": partner_nodes[partner - 1],
                        "batch": b,
                        "iteration_s": _median_pass_s(torch, workload, model, b, repeats),
                    }
                    for b in batches
                ]
                del model  # its gradient hooks go before the next pair wraps the same model
            dist.barrier()  # one pair at a time
    finally:
        dist.destroy_process_group()
    return {**alone, "placements": placements} if alone else None
