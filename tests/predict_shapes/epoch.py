"""Shape `epoch`: one epoch over a fixed data set of N samples, in steps of `batch`.

Knob: `--batch`. The data set is the same at every batch size (a constant), each step's activations grow
with the batch, but the epoch takes N / batch steps, so the NUMBER of steps (and of allocations) shrinks as
the knob grows. Fixed seed.

    python tests/predict_shapes/epoch.py --batch 64 --samples 1024
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--samples", type=int, default=1024)
    args = ap.parse_args()
    torch.manual_seed(0)
    data = torch.randn(args.samples, 512)
    labels = torch.randint(0, 10, (args.samples,))
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for start in range(0, args.samples, args.batch):
        x, y = data[start:start + args.batch], labels[start:start + args.batch]
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
