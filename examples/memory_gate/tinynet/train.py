"""Training and evaluation steps."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from tinynet.model import TinyNet


def batches(steps: int, batch: int = 256, features: int = 512, classes: int = 10, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        yield torch.randn(batch, features, generator=gen), torch.randint(0, classes, (batch,), generator=gen)


def train(model: TinyNet, steps: int = 8) -> list[float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for x, y in batches(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def evaluate(model: TinyNet, steps: int = 4) -> float:
    correct = total = 0
    for x, y in batches(steps, seed=1):
        correct += int((model(x).argmax(dim=1) == y).sum())
        total += len(y)
    return correct / total
