"""Training as it is written for a GPU: the model and each batch moved to the device, mixed precision with
torch.autocast("cuda") and a GradScaler. On a CPU runner fragviz's plugin serves "cuda" from its simulated device."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from tinynet.model import TinyNet
from tinynet.train import batches


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def train_mixed_precision(model: TinyNet, steps: int = 4) -> list[float]:
    dev = device()
    model = model.to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(dev.type)
    losses = []
    for x, y in batches(steps):
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        with torch.autocast(dev.type, dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses
