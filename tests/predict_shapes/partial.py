"""Shape `partial`: a training loop recorded with a short history, so its trace starts part-way through the run.

Knob: `--batch`. A token-wise MLP (128 tokens a sample) trained for a few steps with AdamW; every size is a
constant or linear in the batch (a pure power), but the recording keeps only the last entries of its trace (PyTorch's ring buffer,
`max_entries`): the weights and optimizer state made before the trace began are blocks already live at its
start, and the first step seen is cut in the middle. Fixed seed.

    python tests/predict_shapes/partial.py --batch 8 --steps 6
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
    head = nn.Linear(64, 10)
    opt = torch.optim.AdamW([*model.parameters(), *head.parameters()], lr=1e-3)
    for _ in range(args.steps):
        x = torch.randn(args.batch, 128, 64)
        logits = head(model(x).mean(1))
        F.cross_entropy(logits, torch.randint(0, 10, (args.batch,))).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
