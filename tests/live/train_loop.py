"""A real torch training loop on the CPU, for the live tests: a small MLP that trains for --steps steps (or
until killed), one optimizer step every --step-ms milliseconds at least.

With --oom-after N it asks for a tensor of --oom-mib MiB after N steps (run it on a smaller simulated device), which raises
PyTorch's OutOfMemoryError; --recover catches it and trains on, else the job dies of it. With --trigger FILE
it does the same once that file exists. --hold keeps a fixed set of tensors and does nothing else (a job
whose figures do not change, for exact comparisons). Prints 'step N' lines with flush (--stamp: 'step N T', T
the step's end on time.monotonic, for benchmarks).
"""
from __future__ import annotations

import argparse
import os
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10**9)
    p.add_argument("--step-ms", type=float, default=20.0)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--oom-after", type=int)
    p.add_argument("--oom-mib", type=int, default=512, help="size of the request that runs out of memory")
    p.add_argument("--trigger")
    p.add_argument("--recover", action="store_true")
    p.add_argument("--hold", action="store_true")
    p.add_argument("--stamp", action="store_true", help="print each step's end time (time.monotonic) after its number")
    args = p.parse_args()
    torch.manual_seed(0)
    if args.hold:
        held = [torch.ones(1 << 18) for _ in range(8)]  # 8 tensors of 1 MiB
        print("holding", sum(t.numel() * t.element_size() for t in held), flush=True)
        while True:
            time.sleep(0.1)
    model = torch.nn.Sequential(torch.nn.Linear(64, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(128, 64), torch.randint(0, 10, (128,))
    for step in range(args.steps):
        started = time.monotonic()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (args.oom_after is not None and step == args.oom_after) or (args.trigger and os.path.exists(args.trigger)):
            if args.trigger:
                os.remove(args.trigger)
            try:
                torch.empty(args.oom_mib << 20, dtype=torch.uint8)  # more than the simulated device holds
            except torch.OutOfMemoryError:
                print("oom", flush=True)
                if not args.recover:
                    raise
        print("step", step, *([f"{time.monotonic():.6f}"] if args.stamp else []), flush=True)
        time.sleep(max(0.0, args.step_ms / 1000 - (time.monotonic() - started)))


if __name__ == "__main__":
    main()
