"""Shape `affine`: a small transformer encoder trained on the knob's tokens plus a prefix of 49 learned tokens.

Knob: `--seq`, the input's sequence length; the model sees seq + 49 tokens, so an activation's bytes are
a + b·seq (not b·seq, a pure power), and attention's scores (seq + 49)², a full quadratic. Training steps:
forward, backward, AdamW. Fixed seed.

    python tests/predict_shapes/affine.py --seq 64 --steps 2 --batch 4
"""
from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn

PREFIX = 49  # the extra tokens (a CLS and prefix), what keeps sizes from being a power of seq


class Layer(nn.Module):
    """Pre-norm self-attention and MLP, attention written out so its scores are one (t × t) tensor per head."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)).softmax(-1)
        x = x + self.proj((scores @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class Encoder(nn.Module):
    """Token embeddings after a learned prefix of PREFIX tokens; the class is read off the first."""

    def __init__(self, vocab: int, d: int, layers: int, heads: int, classes: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.prefix = nn.Parameter(torch.randn(1, PREFIX, d) * 0.02)
        self.layers = nn.ModuleList(Layer(d, heads) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.prefix.expand(idx.shape[0], -1, -1), self.tok(idx)], dim=1)
        for layer in self.layers:
            x = layer(x)
        return self.head(x[:, 0])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Encoder(vocab=512, d=64, layers=2, heads=4, classes=10)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        idx = torch.randint(0, 512, (args.batch, args.seq))
        target = torch.randint(0, 10, (args.batch,))
        F.cross_entropy(model(idx), target).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
