"""A small MLP trained with Adam on the CPU: the program a code what-if changes, recorded as really changed.

`--batch` scales the activations (and the backward pass's gradients of them), `--hidden` widens the hidden
layers (their parameters, gradients and Adam state too). Recorded by tests/support/whatif_programs.py.
"""
import argparse

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)  # the hidden activation: its size follows --batch and --hidden
        return x + self.down(torch.nn.functional.gelu(h))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=2)
    a = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(a.width, a.hidden) for _ in range(a.layers)])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    for _ in range(a.steps):
        x = torch.randn(a.batch, a.width)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
