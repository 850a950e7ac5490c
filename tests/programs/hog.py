"""Programs that ask for more than a job may have (tests/test_security.py)."""

import torch
from torch import nn

from dlsched.runtime.train import Workload


def build(args):
    """Tries to take 12 GiB of memory."""
    hoard = torch.empty(12 * 2**30, dtype=torch.uint8)
    return Workload(
        nn.Linear(1, 1),
        lambda p: torch.optim.SGD(p, lr=0.1),
        [(hoard[:1].float(), 0.0)],
        loss=nn.functional.mse_loss,
    )


class Images:
    """224 x 224 RGB images, made on demand (600 KB each)."""

    def __len__(self):
        return 1000

    def __getitem__(self, i):
        return torch.zeros(3, 224, 224), 0


def big_samples(args):
    return Workload(
        nn.Sequential(nn.Flatten(), nn.Linear(3 * 224 * 224, 1)),
        lambda p: torch.optim.SGD(p, lr=0.1),
        Images(),
        loss=lambda out, t: out.mean(),
    )
