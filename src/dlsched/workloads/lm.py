"""A small transformer language model on generated token sequences (a noisy repeating pattern,
so the next token is learnable).

Args: ``samples`` (default 1024), ``seq_len`` (32), ``vocab`` (64), ``dim`` (64), ``layers`` (2),
``lr`` (default 1e-3), ``optimizer`` (``adam``, the default, or ``sgd``), ``seed``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from ..runtime.train import Workload


class TinyLM(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, seq_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Parameter(torch.zeros(seq_len, dim))
        layer = nn.TransformerEncoderLayer(
            dim, nhead=4, dim_feedforward=2 * dim, batch_first=True, dropout=0.0
        )
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(dim, vocab)
        self.register_buffer(
            "mask", nn.Transformer.generate_square_subsequent_mask(seq_len), persistent=False
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        h = self.embed(tokens) + self.position[:n]
        return self.head(self.encoder(h, mask=self.mask[:n, :n], is_causal=True))


def sequences(samples: int, seq_len: int, vocab: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, vocab, (samples, 1), generator=g)
    step = torch.randint(1, 4, (samples, 1), generator=g)
    tokens = (start + step * torch.arange(seq_len + 1)) % vocab
    noise = torch.rand(samples, seq_len + 1, generator=g) < 0.05
    tokens = torch.where(noise, torch.randint(0, vocab, tokens.shape, generator=g), tokens)
    return TensorDataset(tokens[:, :-1], tokens[:, 1:])


def build(args: dict) -> Workload:
    seed = int(args.get("seed", 0))
    torch.manual_seed(seed)
    vocab, seq_len = int(args.get("vocab", 64)), int(args.get("seq_len", 32))
    lr = float(args.get("lr", 1e-3))
    model = TinyLM(vocab, int(args.get("dim", 64)), int(args.get("layers", 2)), seq_len)
    make = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[args.get("optimizer", "adam")]
    return Workload(
        model=model,
        optimizer=lambda params: make(params, lr=lr),
        dataset=sequences(int(args.get("samples", 1024)), seq_len, vocab, seed),
        loss=lambda out, target: nn.functional.cross_entropy(
            out.reshape(-1, out.shape[-1]), target.reshape(-1)
        ),
    )
