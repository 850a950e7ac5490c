"""The user API: what a training program hands dlsched, and the data-parallel loop it runs.

A program is a module with a function ``build(args) -> Workload`` (its entrypoint is written
``package.module:build`` or ``path/to/file.py:build``). dlsched's worker does the rest:
data-parallel training over the job's GPUs (gloo on CPU, nccl on GPUs), a fixed data order
(sample positions follow from the iteration number alone, so a resumed job continues where it
stopped and sees every sample once per epoch), periodic checkpoints and one on preemption, resume
from the last checkpoint, and progress reports.

Every iteration processes the job's global batch: each of the W workers takes its share of the
positions and scales its mean loss by (its samples x W / batch), so after DDP averages the
gradients they are exactly the gradient of the global batch's mean loss, whatever W is. With
``accumulation`` k (GPU sharing: a smaller sub-batch so that two jobs fit on one GPU), a worker
runs its share as k sub-batches, each scaled the same way, and gradients add up before the one
optimizer step: the step, and the global batch, are unchanged (exactly so for models whose
layers treat samples independently; batch normalization sees smaller batches).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .device import cap_memory
from .startup_gc import collector_paused


@dataclass
class Workload:
    model: nn.Module
    optimizer: Callable[[Any], torch.optim.Optimizer]  # params -> optimizer
    dataset: Any  # len() and [i] -> (inputs, target)
    loss: Callable[[Any, Any], torch.Tensor] | None = None  # (outputs, targets) -> mean loss
    step: Callable[[nn.Module, Any], torch.Tensor] | None = None  # or (model, batch) -> mean loss

    def __post_init__(self) -> None:
        if (self.loss is None) == (self.step is None):
            raise ValueError("a Workload needs exactly one of loss or step")

    def mean_loss(self, model: Any, batch: Any) -> torch.Tensor:
        """The batch's mean loss under ``model`` (the program's, or it under DDP)."""
        if self.step is not None:
            return self.step(model, batch)
        assert self.loss is not None  # (one of the two: __post_init__)
        inputs, targets = batch
        return self.loss(model(inputs), targets)


def load_entrypoint(entrypoint: str) -> Callable[[dict], Workload]:
    """``module:function`` or ``file.py:function``."""
    target, _, func = entrypoint.rpartition(":")
    if not target or not func:
        raise ValueError(
            f"entrypoint must be 'module:function' or 'file.py:function', got {entrypoint!r}"
        )
    if target.endswith(".py"):
        if not Path(target).is_file():  # a bare FileNotFoundError did not say where it looked
            raise FileNotFoundError(
                f"entrypoint file {target} is not there for the job: an isolated job sees the "
                "machine's files read-only but for /tmp, /root, /home and a few more (the "
                "operator can expose a directory: dlsched server --sandbox-expose DIR), and a "
                "relative path starts at the job's own directory"
            )
        spec = importlib.util.spec_from_file_location(Path(target).stem, target)
        if spec is None or spec.loader is None:
            raise ValueError(f"cannot load {target}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    return getattr(module, func)


def sample_positions(iteration: int, batch: int, rank: int, world: int) -> range:
    """The global sample positions worker ``rank`` of ``world`` takes at ``iteration``."""
    start = iteration * batch
    return range(start + rank * batch // world, start + (rank + 1) * batch // world)


class EpochOrder:
    """Position -> dataset index: a seeded permutation per epoch."""

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed = size, seed
        self._perms: dict[int, torch.Tensor] = {}

    def __call__(self, position: int) -> int:
        epoch, offset = divmod(position, self.size)
        perm = self._perms.get(epoch)
        if perm is None:
            self._perms = {
                epoch: torch.randperm(
                    self.size, generator=torch.Generator().manual_seed(self.seed + epoch)
                )
            }
            perm = self._perms[epoch]
        return int(perm[offset])


def collate(items: list) -> Any:
    first = items[0]
    if isinstance(first, (tuple, list)):
        return type(first)(collate([it[k] for it in items]) for k in range(len(first)))
    if isinstance(first, torch.Tensor):
        return torch.stack(items)
    return torch.tensor(items)


def save_checkpoint(path: Path, model: nn.Module, optimizer: Any, iteration: int) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(
        {"iteration": iteration, "model": model.state_dict(), "optimizer": optimizer.state_dict()},
        tmp,
    )
    os.replace(tmp, path)  # a crash mid-write leaves the previous checkpoint


def load_checkpoint(path: Path, model: nn.Module, optimizer: Any) -> int:
    if not path.exists():
        return 0
    state = torch.load(path, weights_only=True)  # a tenant-written file: tensors only, no code
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["iteration"])


class Trainer:
    """One worker of a job: rank ``rank`` of ``world``. ``run`` trains until the job's
    iterations are done or ``request_stop`` is called (then every worker stops after the same
    iteration and rank 0 checkpoints)."""

    def __init__(self, config: dict, rank: int, world: int, log: Callable[[str], None]) -> None:
        self.config, self.rank, self.world, self.log = config, rank, world, log
        self.batch = int(config["batch_size"])
        # an epochs job's: known once its data is built (prepare)
        self.iterations: int | None = config.get("iterations")
        self.checkpoint_every = int(config.get("checkpoint_every") or 0)
        self.checkpoint = Path(config["checkpoint_path"])
        self.accumulation = int(config.get("accumulation") or 1)
        self.samples_path = config.get("samples_path")  # debugging and tests: record the data order
        self.iteration = 0
        self.iteration_s: float | None = None  # moving average of the last iterations' time
        self.last_loss: float | None = None
        self._stop = self._switch = False
        self.plain_model: Any = None  # the program's model (self.model: under DDP too)

    def setup(self, master: str | None = None) -> int:
        """Prepare, join the job's group and load the last checkpoint: a (re)start."""
        # with "joining the group" below: a rank that never joins says whether it began
        self.log(f"rank {self.rank} of {self.world}: preparing")
        self.prepare()
        self.join(master, self.rank, self.world)
        self.iteration = load_checkpoint(self.checkpoint, self.plain_model, self.optimizer)
        return self.iteration

    @collector_paused()
    def prepare(self) -> None:
        """Everything that does not need the other workers: the program, its model, optimizer
        and data (a background scale-out's new workers do this while the old ones train)."""
        torch.manual_seed(int(self.config.get("seed", 0)))
        cap_memory(self.config.get("memory_grant_mib"))  # before the program allocates
        build = load_entrypoint(self.config["entrypoint"])
        self.workload = build(dict(self.config.get("args") or {}))
        self.device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
        self.plain_model = self.workload.model.to(self.device)
        self.optimizer = self.workload.optimizer(self.plain_model.parameters())
        self.order = EpochOrder(len(self.workload.dataset), int(self.config.get("seed", 0)))
        if self.iterations is None:
            self.iterations = -(
                -int(self.config["epochs"]) * len(self.workload.dataset) // self.batch
            )
        if self.world > 1:
            # what DDP's first construction imports (1-2 s of CPU): a background scale-out's
            # newcomer imports it here, while the others train, not in the switch's pause
            importlib.import_module("torch._dynamo.utils")

    @collector_paused()  # a first DDP construction imports torch._dynamo
    def join(self, master: str | None, rank: int, world: int) -> None:
        """(Re)form the process group as ``rank`` of ``world``."""
        self.close()
        self.rank, self.world, self._stop, self._switch = rank, world, False, False
        self.model = self.plain_model
        if world > 1:
            import torch.distributed as dist

            backend = "nccl" if torch.cuda.is_available() else "gloo"
            # each rank's own line: a group that does not form says who never came
            self.log(f"rank {rank} of {world}: joining the group")
            dist.init_process_group(
                backend, init_method=f"tcp://{master}", rank=rank, world_size=world
            )
            self.log(f"rank {rank} of {world}: in the group")
            self.model = nn.parallel.DistributedDataParallel(self.plain_model)

    def regroup(self, master: str | None, rank: int, world: int) -> int:
        """Background scaling's switch: join the new group and take rank 0's model, optimizer
        state and iteration (rank 0 is a worker that kept training)."""
        self.join(master, rank, world)
        if world > 1:
            import torch.distributed as dist

            state: list[Any] = [None]
            if rank == 0:
                buffer = io.BytesIO()
                torch.save(
                    {
                        "iteration": self.iteration,
                        "model": self.plain_model.state_dict(),
                        "optimizer": self.optimizer.state_dict(),
                    },
                    buffer,
                )
                state = [buffer.getvalue()]
            dist.broadcast_object_list(state, src=0)
            if rank != 0:
                loaded = torch.load(io.BytesIO(state[0]), weights_only=True)
                self.plain_model.load_state_dict(loaded["model"])
                self.optimizer.load_state_dict(loaded["optimizer"])
                self.iteration = int(loaded["iteration"])
        return self.iteration

    def request_stop(self) -> None:
        self._stop = True

    def request_switch(self) -> None:
        self._switch = True

    def _should_stop(self) -> int:
        """0: go on; 1: stop (checkpoint); 2: switch to a new group. Every worker gets the same
        answer after the same iteration."""
        local = 1 if self._stop else 2 if self._switch else 0
        if self.world == 1:
            return local
        import torch.distributed as dist

        flag = torch.tensor([local])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # a stop outranks a switch
        return int(flag.item())

    def _step(self) -> float:
        positions = sample_positions(self.iteration, self.batch, self.rank, self.world)
        data = self.workload.dataset
        k = max(1, min(self.accumulation, len(positions)))
        self.optimizer.zero_grad()
        total = 0.0
        for part in range(k):
            sub = positions[part * len(positions) // k : (part + 1) * len(positions) // k]
            batch = to_device(collate([data[self.order(p)] for p in sub]), self.device)
            last = part == k - 1
            sync = contextlib.nullcontext() if last or self.world == 1 else self.model.no_sync()
            with sync:  # DDP all-reduces the summed gradients once, with the last sub-batch
                loss = self.workload.mean_loss(self.model, batch)
                (loss * (len(sub) * self.world / self.batch)).backward()
            total += float(loss.detach()) * len(sub)
        self.optimizer.step()
        if self.samples_path:
            with open(self.samples_path, "a") as f:
                f.write(
                    json.dumps(
                        {
                            "iteration": self.iteration,
                            "rank": self.rank,
                            "world": self.world,
                            "indices": [self.order(p) for p in positions],
                        }
                    )
                    + "\n"
                )
        return total / len(positions)

    def run(self) -> dict:
        log_every = max(1, int(self.config.get("log_every") or 10))
        if self.iterations is None:
            raise RuntimeError("run before prepare: the job's iteration count is not known")
        if self.rank == 0:
            self.log(
                f"start at iteration {self.iteration} of {self.iterations} on {self.world} "
                f"worker(s)"
            )
        while self.iteration < self.iterations:
            decision = self._should_stop()
            if decision == 2:
                if self.rank == 0:
                    self.log(f"switching to a new group at iteration {self.iteration}")
                return {"status": "switch", "iteration": self.iteration}
            if decision == 1:
                if self.rank == 0:
                    save_checkpoint(
                        self.checkpoint, self.plain_model, self.optimizer, self.iteration
                    )
                    self.log(f"stopped at iteration {self.iteration}; checkpoint saved")
                return {"status": "stopped", "iteration": self.iteration}
            t0 = time.perf_counter()
            self.last_loss = self._step()
            dt = time.perf_counter() - t0
            mean_s = dt if self.iteration_s is None else 0.8 * self.iteration_s + 0.2 * dt
            self.iteration_s = mean_s
            self.iteration += 1
            if self.rank == 0:
                if self.checkpoint_every and self.iteration % self.checkpoint_every == 0:
                    save_checkpoint(
                        self.checkpoint, self.plain_model, self.optimizer, self.iteration
                    )
                if self.iteration % log_every == 0 or self.iteration == self.iterations:
                    self.log(
                        f"iteration {self.iteration} loss {self.last_loss:.4f} "
                        f"{mean_s * 1000:.1f} ms/it"
                    )
        if self.rank == 0:
            save_checkpoint(self.checkpoint, self.plain_model, self.optimizer, self.iteration)
            self.log(f"done: {self.iterations} iterations")
        return {"status": "done", "iteration": self.iteration}

    def progress(self) -> dict:
        return {
            "iteration": self.iteration,
            "iterations": self.iterations,
            "iteration_s": self.iteration_s,
            "loss": self.last_loss,
        }

    def close(self) -> None:
        import torch.distributed as dist

        # DDP goes before its process group: a DDP wrapper freed after its gloo group was
        # destroyed hung the process, here within 40 rounds (tests/test_profile.py)
        self.model = self.plain_model
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


def to_device(batch: Any, device: Any) -> Any:
    """A batch (a tensor, or a tuple or list of them) on ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    return type(batch)(to_device(b, device) for b in batch)
