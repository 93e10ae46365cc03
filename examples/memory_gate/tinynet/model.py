"""A two-layer classifier."""
from __future__ import annotations

import torch
from torch import nn

HIDDEN = 1024


class TinyNet(nn.Module):
    def __init__(self, features: int = 512, hidden: int = HIDDEN, classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        return self.fc2(h)
