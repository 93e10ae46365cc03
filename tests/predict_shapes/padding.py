"""Shape `padding`: a training loop whose batches are padded to their longest sample.

Knob: `--batch`, samples per batch. Sample lengths are drawn from a fixed-seed distribution (8 to 96 tokens,
most short), and every batch is padded to its longest, so an activation's bytes are batch × the longest of
`batch` draws: data-dependent, growing faster than the batch and not by any law of it. Fixed seeds.

    python tests/predict_shapes/padding.py --batch 8 --steps 3
"""
from __future__ import annotations

import argparse
import random

import torch
import torch.nn.functional as F
from torch import nn


def lengths(rng: random.Random, n: int) -> list[int]:
    """Sample lengths as text has them: most short, a long tail."""
    return [min(96, 8 + int(rng.expovariate(1 / 16))) for _ in range(n)]


def padded_batch(rng: random.Random, batch: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch` samples of random lengths, padded (token 0) to the longest, and the mask of real tokens."""
    sizes = lengths(rng, batch)
    longest = max(sizes)
    idx = torch.zeros(batch, longest, dtype=torch.long)
    mask = torch.zeros(batch, longest)
    for i, n in enumerate(sizes):
        idx[i, :n] = torch.randint(1, vocab, (n,))
        mask[i, :n] = 1
    return idx, mask


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    rng = random.Random(0)
    emb = nn.Embedding(1000, 64)
    body = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
    head = nn.Linear(64, 5)
    params = [*emb.parameters(), *body.parameters(), *head.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-3)
    for _ in range(args.steps):
        idx, mask = padded_batch(rng, args.batch, 1000)
        x = emb(idx)
        x = x + body(x)
        pooled = (x * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
        F.cross_entropy(head(pooled), torch.randint(0, 5, (args.batch,))).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
