"""Synthetic but consistent snapshots, in PyTorch's own format, for benchmarks, tests and demos.

The workload is a training-like loop: long-lived parameters, activations freed in reverse order of
allocation (with some out of order, which leaves holes), and short-lived temporaries. Placement is a
simple bump allocator per segment that follows PyTorch's rounding, segment-size and split rules, so the
trace and the final segments always agree. It is not a faithful caching allocator (the simulator is).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from fragviz.allocator.config import DEFAULT_SETTINGS
from fragviz.allocator.rules import SMALL_SIZE, allocation_size, round_size
from fragviz.model import PROVENANCE_KEY

_BASE_ADDRESS = 0x7F0000000000
_T0_US = 1_764_000_000_000_000


@dataclass
class _Seg:
    address: int
    size: int
    pool: str
    live: list[list] = field(default_factory=list)  # [addr, size, requested, frames, state] in address order

    @property
    def top(self) -> int:
        return self.live[-1][0] + self.live[-1][1] if self.live else self.address


class _Full(Exception):
    """The trace has its length: stop wherever the workload is (the final state is what is live then)."""


class _Writer:
    def __init__(self, rng: random.Random, stacks: list[list[dict]], with_frames: bool, limit: int) -> None:
        self.limit = limit
        self.rng = rng
        self.stacks = stacks
        self.with_frames = with_frames
        self.segments: list[_Seg] = []
        self.trace: list[dict] = []
        self.next_address = _BASE_ADDRESS
        self.time = _T0_US

    def event(self, action: str, addr: int, size: int, frames: list[dict] | None) -> None:
        self.time += self.rng.randint(1, 40)
        e: dict[str, Any] = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": self.time}
        if self.with_frames and frames is not None:
            e["frames"] = list(frames)  # a list of its own, shared frame dicts: as PyTorch writes them
        self.trace.append(e)
        if len(self.trace) >= self.limit:
            raise _Full

    def alloc(self, requested: int) -> list:
        rounded = round_size(requested, DEFAULT_SETTINGS)
        pool = "small" if rounded <= SMALL_SIZE else "large"
        frames = self.rng.choice(self.stacks)
        seg = next((s for s in self.segments if s.pool == pool and s.address + s.size - s.top >= rounded), None)
        if seg is None:
            seg = _Seg(self.next_address, allocation_size(rounded), pool)
            self.next_address += seg.size + (2 << 20)
            self.segments.append(seg)
            self.event("segment_alloc", seg.address, seg.size, frames)
        addr = seg.top
        room = seg.address + seg.size - addr
        size = rounded if pool == "small" or room - rounded > SMALL_SIZE else room
        block = [addr, size, requested, frames, "active_allocated"]
        seg.live.append(block)
        self.event("alloc", addr, requested, frames)
        return block

    def free(self, block: list) -> None:
        block[4] = "active_pending_free"
        self.event("free_requested", block[0], block[2], block[3])
        for seg in self.segments:
            if seg.address <= block[0] < seg.address + seg.size:
                seg.live.remove(block)
                break
        self.event("free_completed", block[0], block[2], block[3])


def _stacks(rng: random.Random, n_stacks: int, depth: int) -> list[list[dict]]:
    files = [f"/home/user/project/model/layer_{i}.py" for i in range(40)]
    torch_files = [f"/usr/lib/python3/site-packages/torch/nn/modules/mod_{i}.py" for i in range(20)]
    frame_pool = [{"filename": rng.choice(files + torch_files), "line": rng.randint(1, 900),
                   "name": f"fn_{i}"} for i in range(4 * n_stacks)]
    return [rng.sample(frame_pool, depth) for _ in range(n_stacks)]


def synthetic_snapshot(n_events: int, seed: int = 0, with_frames: bool = True, n_stacks: int = 400,
                       depth: int = 12, params: int = 200) -> dict[str, Any]:
    """A consistent snapshot dict with about `n_events` trace events on device 0."""
    rng = random.Random(seed)
    w = _Writer(rng, _stacks(rng, n_stacks, depth), with_frames, n_events)
    pinned: list[list] = []
    try:
        for _ in range(params):
            w.alloc(rng.choice((4, 16, 64)) << 20 if rng.random() < 0.3 else rng.randint(1, 1 << 20))
        while True:
            _training_step(w, rng, pinned)
    except _Full:
        pass
    return _as_snapshot(w)


def _training_step(w: _Writer, rng: random.Random, pinned: list[list]) -> None:
    activations = []
    for _ in range(rng.randint(20, 60)):
        size = rng.randint(1 << 14, 24 << 20) if rng.random() < 0.5 else rng.randint(512, 1 << 19)
        activations.append(w.alloc(size))
        if rng.random() < 0.3:
            w.free(w.alloc(rng.randint(512, 4 << 20)))  # a temporary
    if rng.random() < 0.2:
        pinned.append(activations.pop(rng.randrange(len(activations))))  # kept across steps: leaves a hole
    if len(pinned) > 8:
        w.free(pinned.pop(0))
    for block in reversed(activations):
        w.free(block)


def _as_snapshot(w: _Writer) -> dict[str, Any]:
    return {"segments": [_segment_dict(s) for s in w.segments], "device_traces": [w.trace],
            "allocator_settings": DEFAULT_SETTINGS.as_dict(),
            PROVENANCE_KEY: {"origin": "synthetic", "generator": "fragviz.synth"}}


def _segment_dict(seg: _Seg) -> dict[str, Any]:
    blocks, cursor = [], seg.address
    for addr, size, requested, frames, state in seg.live:
        if addr > cursor:
            blocks.append({"address": cursor, "size": addr - cursor, "requested_size": 0, "state": "inactive",
                           "frames": []})
        blocks.append({"address": addr, "size": size, "requested_size": requested, "state": state,
                       "frames": list(frames)})
        cursor = addr + size
    end = seg.address + seg.size
    if end > cursor:
        blocks.append({"address": cursor, "size": end - cursor, "requested_size": 0, "state": "inactive",
                       "frames": []})
    active = sum(b["size"] for b in blocks if b["state"] != "inactive")
    return {"device": 0, "address": seg.address, "total_size": seg.size, "allocated_size": active,
            "active_size": active, "requested_size": sum(b["requested_size"] for b in blocks
                                                         if b["state"] != "inactive"),
            "stream": 0, "segment_type": seg.pool, "segment_pool_id": (0, 0), "is_expandable": False,
            "frames": [], "blocks": blocks}


def main(argv: list[str] | None = None) -> int:
    """python -m fragviz.synth OUT [--events N] [--seed S]: write a synthetic snapshot (gzip if OUT ends in .gz)."""
    import argparse
    import gzip
    import pickle

    ap = argparse.ArgumentParser(prog="python -m fragviz.synth", description=main.__doc__)
    ap.add_argument("out")
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    data = synthetic_snapshot(args.events, seed=args.seed)
    data[PROVENANCE_KEY]["command"] = f"python -m fragviz.synth {args.out} --events {args.events} --seed {args.seed}"
    blob = pickle.dumps(data, protocol=4)
    if args.out.endswith(".gz"):
        blob = gzip.compress(blob, mtime=0)
    with open(args.out, "wb") as fh:
        fh.write(blob)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
