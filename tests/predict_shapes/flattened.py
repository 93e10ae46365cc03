"""Shape `flattened`: an MLP trained with Adam that keeps an EMA of its parameters flattened into one vector.

Knob: `--hidden`, the hidden width h. The weights are h·in, h², h·out and biases, so the flattened vector
(torch.cat of every p.flatten()) is a + b·h + c·h² bytes: one tensor mixing three powers of the knob.
Fixed seed.

    python tests/predict_shapes/flattened.py --hidden 128 --steps 3
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn


def flat(model: nn.Module) -> torch.Tensor:
    """Every parameter in one vector (what an EMA or a checkpoint of the weights keeps)."""
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    torch.manual_seed(0)
    h = args.hidden
    model = nn.Sequential(nn.Linear(96, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ema = flat(model)
    for _ in range(args.steps):
        x = torch.randn(args.batch, 96)
        target = torch.randint(0, 10, (args.batch,))
        F.cross_entropy(model(x), target).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        ema.mul_(0.99).add_(flat(model), alpha=0.01)


if __name__ == "__main__":
    main()
