"""A classifier whose accelerator time is emulated: for runs on emulated GPUs (a machine without
any, where every "GPU" is a share of the same few CPU cores).

The model is a real two-layer network trained on generated data, with real gradients,
all-reduce, checkpoints and gradient accumulation. Its forward pass also holds the emulated
device for ``fixed_ms + per_sample_ms x samples`` of wall time, as a GPU kernel would, without
using a CPU core: so eight emulated GPUs on two cores run as eight devices would, and a job's
iteration time follows its per-worker batch as on a real accelerator (the fixed part is what a
sub-batch costs, as kernel launches do). Two jobs on one emulated GPU do not slow each other's
device time: the runtime measures the slowdown a shared job really had.

Its device memory is emulated the same way: a pass holds ``fixed_mib + per_sample_mib x
samples`` on the device, reported to :mod:`dlsched.runtime.device`, which profiling reads as a
GPU's peak allocation and which, under a memory cap, fails the pass past the cap as the CUDA
allocator would. ``grow_mib_per_pass`` emulates a job whose memory grows (a cache, a leak):
each forward pass keeps that much more, really held (written, so resident) and counted.

Args: ``per_sample_ms`` (default 2.0), ``fixed_ms`` (default 5.0), ``fixed_mib`` (default 256),
``per_sample_mib`` (default 1.0), ``samples`` (default 4096), ``features`` (default 32), ``lr``
(default 0.05), ``grow_mib_per_pass`` (default 0, at most 1024), ``seed``. The two times and
two memory figures are chosen defaults, of the order of a small model's on a GPU.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import torch
from torch import nn
from torch.utils.data import TensorDataset

from ..runtime.device import use_emulated_memory
from ..runtime.train import Workload


class EmulatedDevice(nn.Module):
    """Passes its input through after the emulated device time for that many samples."""

    def __init__(
        self,
        fixed_ms: float,
        per_sample_ms: float,
        fixed_mib: float = 256.0,
        per_sample_mib: float = 1.0,
        grow_mib: float = 0.0,
    ) -> None:
        super().__init__()
        self.fixed_s, self.per_sample_s = fixed_ms / 1000, per_sample_ms / 1000
        self.fixed_mib, self.per_sample_mib = fixed_mib, per_sample_mib
        self.grow_bytes = int(grow_mib * 2**20)
        self.kept: list[bytes] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.grow_bytes:
            self.kept.append(b"\1" * self.grow_bytes)  # written, so resident
        kept_mib = len(self.kept) * self.grow_bytes / 2**20
        use_emulated_memory(self.fixed_mib + self.per_sample_mib * x.shape[0] + kept_mib)
        time.sleep(self.fixed_s + self.per_sample_s * x.shape[0])
        return x


class MomentumSGD:
    """``torch.optim.SGD(params, lr, momentum)``'s update (no dampening, weight decay or
    Nesterov), written out. A ``torch.optim`` optimizer imports ``torch._dynamo`` when it is made
    and at every step: 1.5-2.3 s of CPU per process here (2026-11-26), which an emulated job does
    not need and the test suite, starting its processes by the hundred, pays for every one."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float, momentum: float) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.momentum = lr, momentum
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            buffer = self.buffers[i]
            if buffer is None:
                buffer = self.buffers[i] = p.grad.detach().clone()
            else:
                buffer.mul_(self.momentum).add_(p.grad)
            p.add_(buffer, alpha=-self.lr)

    def state_dict(self) -> dict:
        return {"momentum_buffers": list(self.buffers)}

    def load_state_dict(self, state: dict) -> None:
        buffers = state["momentum_buffers"]
        if len(buffers) != len(self.params):
            raise ValueError(f"{len(buffers)} momentum buffers for {len(self.params)} parameters")
        self.buffers = [None if b is None else b.clone() for b in buffers]


def build(args: dict) -> Workload:
    seed = int(args.get("seed", 0))
    torch.manual_seed(seed)
    features = int(args.get("features", 32))
    per_sample_ms, fixed_ms = (
        float(args.get("per_sample_ms", 2.0)),
        float(args.get("fixed_ms", 5.0)),
    )
    fixed_mib, per_sample_mib = (
        float(args.get("fixed_mib", 256.0)),
        float(args.get("per_sample_mib", 1.0)),
    )
    grow_mib = float(args.get("grow_mib_per_pass", 0.0))
    if not (0 <= per_sample_ms <= 1000 and 0 <= fixed_ms <= 10_000):
        raise ValueError("per_sample_ms must be in 0..1000 and fixed_ms in 0..10000")
    if not (0 <= fixed_mib <= 1 << 20 and 0 <= per_sample_mib <= 1024):
        raise ValueError("fixed_mib must be in 0..1048576 and per_sample_mib in 0..1024")
    if not 0 <= grow_mib <= 1024:
        raise ValueError("grow_mib_per_pass must be in 0..1024")
    g = torch.Generator().manual_seed(seed)
    samples = int(args.get("samples", 4096))
    labels = torch.randint(0, 4, (samples,), generator=g)
    x = torch.randn(4, features, generator=g)[labels] + torch.randn(samples, features, generator=g)
    model = nn.Sequential(
        EmulatedDevice(fixed_ms, per_sample_ms, fixed_mib, per_sample_mib, grow_mib),
        nn.Linear(features, 64),
        nn.ReLU(),
        nn.Linear(64, 4),
    )
    lr = float(args.get("lr", 0.05))
    return Workload(
        model=model,
        optimizer=lambda params: MomentumSGD(params, lr=lr, momentum=0.9),
        dataset=TensorDataset(x, labels),
        loss=nn.functional.cross_entropy,
    )
