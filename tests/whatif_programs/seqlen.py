"""A small transformer block trained with Adam on the CPU on batches whose sequence length varies step to step
(drawn with a fixed seed): the program `--bucket` changes, recorded as really changed.

Its activations scale with the length L: linearly (the projections, the MLP: batch·L·width) and quadratically
(the attention scores: batch·heads·L²). `--buckets K` pads each batch's length up to the smallest of K lengths
evenly spaced up to the longest (`--max-len`·j/K), as a data loader that buckets sequences does.
Recorded by tests/support/whatif_programs.py.
"""
import argparse
import math

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, w = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(w // self.heads)  # batch·heads·L²
        x = x + self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, w))
        return x + self.down(torch.relu(self.up(x)))


def padded(length: int, buckets: int, max_len: int) -> int:
    """The smallest of the bucket lengths max_len·j/buckets at or above `length` (0 buckets: as drawn)."""
    if not buckets:
        return length
    return next(top for top in (max_len * j // buckets for j in range(1, buckets + 1)) if top >= length)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--min-len", type=int, default=17)
    p.add_argument("--max-len", type=int, default=256)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--buckets", type=int, default=0, help="pad each batch's length to one of K lengths (0: none)")
    a = p.parse_args()
    torch.manual_seed(0)
    lengths = torch.randint(a.min_len, a.max_len + 1, (a.steps,)).tolist()
    model = nn.Sequential(*[Block(a.width, a.heads) for _ in range(a.layers)])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    for length in lengths:
        x = torch.randn(a.batch, padded(length, a.buckets, a.max_len), a.width)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
