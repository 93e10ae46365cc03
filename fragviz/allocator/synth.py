"""Synthetic snapshots in PyTorch's own format, for benchmarks, tests and demos.

The workload is training-like: long-lived parameters, activations freed in reverse order of allocation
(some held across steps, which leaves holes), and short-lived temporaries. fragviz's allocator model
places every request, so trace and final segments agree and the placement is what PyTorch's allocator
would choose. Frames are shared dicts in per-entry lists, as PyTorch writes them.
"""
from __future__ import annotations

import random
from typing import Any

from fragviz.allocator.config import DEFAULT_SETTINGS
from fragviz.allocator.sim import DeviceAllocator
from fragviz.allocator.state import allocator_segments
from fragviz.model import PROVENANCE_KEY

_T0_US = 1_764_000_000_000_000


class _Full(Exception):
    """The trace has its length: stop wherever the workload is (the final state is what is live then)."""


class _Workload:
    def __init__(self, rng: random.Random, n_stacks: int, depth: int, limit: int,
                 stack_rng: random.Random | None = None) -> None:
        self.rng = rng
        self.alloc = DeviceAllocator(DEFAULT_SETTINGS)
        self.limit = limit
        self.stacks = _stacks(stack_rng or rng, n_stacks, depth)

    def _check(self) -> None:
        if len(self.alloc.trace) >= self.limit:
            raise _Full

    def malloc(self, size: int):
        block = self.alloc.malloc(size, 0, self.rng.randrange(len(self.stacks)))
        self._check()
        return block

    def free(self, block) -> None:
        self.alloc.free(block)
        self._check()


def _stacks(rng: random.Random, n_stacks: int, depth: int) -> list[list[dict]]:
    files = [f"/home/user/project/model/layer_{i}.py" for i in range(40)]
    torch_files = [f"/usr/lib/python3/site-packages/torch/nn/modules/mod_{i}.py" for i in range(20)]
    frame_pool = [{"filename": rng.choice(files + torch_files), "line": rng.randint(1, 900),
                   "name": f"fn_{i}"} for i in range(4 * n_stacks)]
    return [rng.sample(frame_pool, depth) for _ in range(n_stacks)]


def synthetic_snapshot(n_events: int, seed: int = 0, with_frames: bool = True, n_stacks: int = 400,
                       depth: int = 12, params: int = 200, stack_seed: int | None = None) -> dict[str, Any]:
    """A consistent snapshot dict with `n_events` trace events (or one more) on device 0. `stack_seed` draws
    the call stacks apart from the workload (default: from `seed`): the ranks of one job run the same code, so
    they share their stacks and frames."""
    rng = random.Random(seed)
    w = _Workload(rng, n_stacks, depth, n_events, None if stack_seed is None else random.Random(stack_seed))
    pinned: list = []
    try:
        for _ in range(params):
            w.malloc(rng.choice((4, 16, 64)) << 20 if rng.random() < 0.3 else rng.randint(1, 1 << 20))
        while True:
            _training_step(w, rng, pinned)
    except _Full:
        pass
    return _as_snapshot(w, with_frames)


def _training_step(w: _Workload, rng: random.Random, pinned: list) -> None:
    activations = []
    for _ in range(rng.randint(20, 60)):
        size = rng.randint(1 << 14, 24 << 20) if rng.random() < 0.5 else rng.randint(512, 1 << 19)
        activations.append(w.malloc(size))
        if rng.random() < 0.3:
            w.free(w.malloc(rng.randint(512, 4 << 20)))  # a temporary
    if rng.random() < 0.2:
        pinned.append(activations.pop(rng.randrange(len(activations))))  # kept across steps: leaves a hole
    if len(pinned) > 8:
        w.free(pinned.pop(0))
    for block in reversed(activations):
        w.free(block)


def _as_snapshot(w: _Workload, with_frames: bool) -> dict[str, Any]:
    stacks = w.stacks
    time_us = _T0_US
    trace = []
    for entry in w.alloc.trace:  # one malloc can add two entries: the trace may pass the limit by one
        time_us += w.rng.randint(1, 40)
        e = {"action": entry["action"], "addr": entry["addr"], "size": entry["size"], "stream": 0, "time_us": time_us}
        if with_frames:
            e["frames"] = list(stacks[entry["stack"]]) if entry["stack"] >= 0 else []
        trace.append(e)
    segments = allocator_segments(w.alloc)
    for seg in segments:
        seg["frames"] = []
        for b in seg["blocks"]:
            stack = b.pop("stack")
            b["frames"] = list(stacks[stack]) if with_frames and stack >= 0 else []
    return {"segments": segments, "device_traces": [trace], "allocator_settings": DEFAULT_SETTINGS.as_dict(),
            PROVENANCE_KEY: {"origin": "synthetic", "generator": "fragviz.allocator.synth"}}


def main(argv: list[str] | None = None) -> int:
    """python -m fragviz.allocator.synth OUT [--events N] [--seed S]: write a synthetic snapshot (gzip if OUT ends in .gz)."""
    import argparse

    from fragviz.allocator.recorder import write_snapshot

    ap = argparse.ArgumentParser(prog="python -m fragviz.allocator.synth", description=main.__doc__)
    ap.add_argument("out")
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    data = synthetic_snapshot(args.events, seed=args.seed)
    data[PROVENANCE_KEY]["command"] = f"python -m fragviz.allocator.synth {args.out} --events {args.events} --seed {args.seed}"
    write_snapshot(args.out, data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
