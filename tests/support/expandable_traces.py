"""Expandable-segment traces laid out as the CUDA driver lays them out on a real run.

No public snapshot has expandable segments, so these are written here, on what a real PyTorch 2.8 run with
`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` showed (segments on three devices, an `oom` entry,
`segment_map`/`segment_unmap` with the allocator's release-and-retry):
- each (pool, stream) gets one reservation of 1.125 × the device's memory, in 20 MiB (large pool) or 2 MiB
  (small pool) pages, and the driver puts each new reservation right after the previous one: on an 80 GB
  device (81,050 MiB) the small pool's reservation begins 0x1644000000 bytes (89.06 GiB) above the large
  pool's;
- the large pool's mapped range grows to tens of GiB past its start;
- near the device's capacity a malloc unmaps every wholly free page of every pool, maps again and, when that
  fails too, records an `oom` entry (with `device_free`, without `addr`) and raises.

fragviz's allocator model serves the workload (training-like: parameters, activations of drifting sizes,
small temporaries, a second stream with deferred frees, empty_cache() calls, a growing batch that ends in
OOMs) on a device whose reservations are placed that way; the follower under test is told none of it and
must read the layout back from the recorded addresses.
"""
from __future__ import annotations

import random
from typing import Any

from fragviz.allocator.config import parse_alloc_conf
from fragviz.allocator.sim import DeviceAllocator
from fragviz.allocator.state import snapshot_dict
from fragviz.model import PROVENANCE_KEY, Frame

MiB = 1024 * 1024
GiB = 1024 * MiB
H100_TOTAL = 81_050 * MiB  # its large-pool reservation: 4,560 pages of 20 MiB = 0x1644000000 bytes
A100_40GB_TOTAL = 40_536 * MiB
CUDA_CONTEXT = 530 * MiB
SIDE_STREAM = 0x55D4_0A2B_9C10  # a cudaStream_t as PyTorch writes it into snapshots
T0_US = 1_754_000_000_000_000

FRAMES = (Frame("/workspace/train.py", 88, "forward"), Frame("/workspace/train.py", 120, "train_step"),
          Frame("/usr/lib/python3/site-packages/torch/optim/adamw.py", 401, "_multi_tensor_adamw"),
          Frame("/workspace/model.py", 40, "attention"), Frame("/workspace/comm.py", 12, "all_reduce"))
STACKS = ((0, 1), (2, 1), (3, 0, 1), (4, 1))


class _Run:
    """One device's allocator and the workload's live tensors."""

    def __init__(self, device: int, rng: random.Random, total: int) -> None:
        self.rng = rng
        self.alloc = DeviceAllocator(parse_alloc_conf("expandable_segments:True"), total - CUDA_CONTEXT, device,
                                     va_base=0x7F00_0000_0000 - device * 0x40_0000_0000)
        self.alloc.device_total = total
        self.clock_us = T0_US + device * 1000
        self.alloc.clock = self._tick
        self.ooms = 0

    def _tick(self) -> int:
        self.clock_us += self.rng.randrange(5, 400)
        return self.clock_us

    def malloc(self, size: int, stream: int = 0, stack: int = 0):
        block = self.alloc.malloc(size, stream, stack)
        if block is None:
            self.ooms += 1
        return block

    def free(self, block, pending: bool = False) -> None:
        if block is not None:
            self.alloc.free(block, pending)


def _large(rng: random.Random, scale: float) -> int:
    base = rng.choice((24, 40, 96, 160, 320, 640)) * MiB
    return int(base * scale) + rng.randrange(0, 4096) * 512


def _small(rng: random.Random) -> int:
    return rng.choice((512, 4096, 65536, 262144, 1 << 20)) - rng.randrange(0, 8) * 64


def device_run(device: int, seed: int, steps: int = 14, small_first: bool = False,
               total: int = H100_TOTAL) -> DeviceAllocator:
    """A training-like run on one device, growing until the batch no longer fits."""
    rng = random.Random(seed)
    run = _Run(device, rng, total)
    kept = []
    if small_first:
        kept.extend(run.malloc(_small(rng), 0, 0) for _ in range(40))
    kept.extend(run.malloc(rng.randrange(200, 1500) * MiB, 0, 1) for _ in range(24))  # parameters
    kept.extend(run.malloc(_small(rng), 0, 1) for _ in range(60))
    for step in range(steps):
        _step(run, rng, scale=1.0 + step * 0.55, comm=step % 3 == 1)
        if step % 4 == 3:
            run.alloc.empty_cache()
        if run.ooms >= 2:
            break
    return run.alloc


def _step(run: _Run, rng: random.Random, scale: float, comm: bool) -> None:
    activations, side = [], []
    for _ in range(70):  # forward
        activations.append(run.malloc(_large(rng, scale), 0, 2))
        temps = [run.malloc(_small(rng), 0, 2) for _ in range(rng.randrange(0, 3))]
        for t in temps:
            run.free(t)
        if rng.random() < 0.15:
            run.free(activations.pop(rng.randrange(len(activations))))
    if comm:  # buckets on a side stream, freed while it still works on them
        side = [run.malloc(rng.choice((25, 50, 100)) * MiB, SIDE_STREAM, 3) for _ in range(6)]
        side += [run.malloc(_small(rng), SIDE_STREAM, 3) for _ in range(4)]
        for b in side:
            run.free(b, pending=b is not None)
    for a in reversed(activations):  # backward
        g = run.malloc(_large(rng, scale * 0.5), 0, 2)
        run.free(a)
        run.free(g)
    for b in side:
        if b is not None:
            run.alloc.complete(b)


def expandable_snapshot(devices: int = 3, seed: int = 7, total: int = H100_TOTAL) -> dict[str, Any]:
    """A snapshot in PyTorch's format: every device's segments and trace; device 1 starts in the small pool."""
    allocators = [device_run(d, seed * 100 + d, small_first=d == 1, total=total) for d in range(devices)]
    snap = snapshot_dict(allocators, FRAMES, STACKS, {})
    snap.pop(PROVENANCE_KEY)
    return snap


def ring_buffer(snap: dict[str, Any], device: int, keep: int) -> dict[str, Any]:
    """The same snapshot as if PyTorch had kept only the last `keep` trace entries of `device`."""
    out = dict(snap)
    out["device_traces"] = [list(t) for t in snap["device_traces"]]
    out["device_traces"][device] = out["device_traces"][device][-keep:]
    return out
