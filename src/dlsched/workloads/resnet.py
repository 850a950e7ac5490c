"""A small ResNet (two residual stages) on generated 3x32x32 images with 10 classes.

Args: ``samples`` (default 2048), ``width`` (default 16), ``lr`` (default 0.05), ``seed``.
The images are class-dependent noise, so the loss really falls as it trains.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from ..runtime.train import Workload


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = (
            nn.Sequential()
            if stride == 1 and cin == cout
            else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.skip(x))


def small_resnet(width: int = 16, classes: int = 10) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, width, 3, 1, 1, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        Block(width, width, 1),
        Block(width, 2 * width, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2 * width, classes),
    )


def images(samples: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (samples,), generator=g)
    centers = torch.randn(10, 3, 1, 1, generator=g)
    x = centers[labels] + 0.8 * torch.randn(samples, 3, 32, 32, generator=g)
    return TensorDataset(x, labels)


def build(args: dict) -> Workload:
    seed = int(args.get("seed", 0))
    torch.manual_seed(seed)
    lr = float(args.get("lr", 0.05))
    return Workload(
        model=small_resnet(int(args.get("width", 16))),
        optimizer=lambda params: torch.optim.SGD(params, lr=lr, momentum=0.9),
        dataset=images(int(args.get("samples", 2048)), seed),
        loss=nn.functional.cross_entropy,
    )
