"""Small training runs written event by event in PyTorch's snapshot format, for the memory gate's tests, with the
figures the gate should find worked out here from the workload, not by fragviz.

A run on one device: the weights (model.py `__init__`) in a segment of `weights + gap` bytes, the rest of it left
free; the activations (train.py `forward`) in a segment of their own; optionally a leak (train.py, a function of
the test's choice) in a segment of its own; then the loss (train.py `loss`) in a last segment, freed with the
activations, and that last segment released. Every block fills its segment but the weights', and every size is a
multiple of 512 bytes (the allocator's rounding), so a block's size is its request.

Worked out:
- peak reserved: every segment is live after the loss's segment_alloc: weights + gap + act + leak + loss;
- peak allocated: after the loss's alloc: weights + act + leak + loss;
- the peak state, the reserved peak at its fullest (of the states with most reserved bytes, the first with most
  allocated): right after the loss's alloc (its segment_alloc reaches the peak reserved, its alloc fills it);
- fragmentation there: only the weights' segment has free bytes beside a live block (the loss fills its own
  segment): gap / peak reserved;
- the sites live at the peak: weights, act, leak and loss.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.support.helpers import MiB, block, ev, segment, snapshot

ROOT = "/home/a/proj"
BASE = 0x7F00_0000_0000  # device 0's first segment; a device's segments are 256 MiB apart, devices 16 GiB apart


@dataclass(frozen=True)
class Run:
    segments: list[dict[str, Any]]
    trace: list[dict[str, Any]]
    peak_reserved: int
    peak_allocated: int
    gap: int  # the non-releasable bytes at the peak
    peak_state: int
    sites: dict[str, int]  # "filename:line name" -> live bytes at the peak

    @property
    def fragmentation(self) -> float:
        return self.gap / self.peak_reserved

    def snapshot(self) -> dict[str, Any]:
        return snapshot(self.segments, self.trace)


def frames(file: str, line: int, name: str, root: str = ROOT) -> list[dict[str, Any]]:
    return [{"filename": f"{root}/{file}", "line": line, "name": name}]


def label(file: str, line: int, name: str, root: str = ROOT) -> str:
    return f"{root}/{file}:{line} {name}"


def run(weights: int = 12 * MiB, gap: int = 8 * MiB, act: int = 8 * MiB, loss: int = 4 * MiB, leak: int = 0,
        leak_name: str = "stash", root: str = ROOT, shift: int = 0, device: int = 0) -> Run:
    """The run of the module docstring; `shift` moves every line down (lines added above), `root` is the checkout."""
    w, a, k, t = (BASE + device * 0x4_0000_0000 + i * 0x1000_0000 for i in range(4))
    fw, fa = frames("model.py", 10 + shift, "__init__", root), frames("train.py", 20 + shift, "forward", root)
    fk, fl = frames("train.py", 40 + shift, leak_name, root), frames("train.py", 30 + shift, "loss", root)
    trace = [ev("segment_alloc", w, weights + gap, frames=fw), ev("alloc", w, weights, frames=fw),
             ev("segment_alloc", a, act, frames=fa), ev("alloc", a, act, frames=fa)]
    if leak:
        trace += [ev("segment_alloc", k, leak, frames=fk), ev("alloc", k, leak, frames=fk)]
    peak_state = len(trace) + 2  # the loss's segment_alloc and alloc applied
    trace += [ev("segment_alloc", t, loss, frames=fl), ev("alloc", t, loss, frames=fl),
              ev("free_requested", t, loss, frames=fl), ev("free_completed", t, loss, frames=fl),
              ev("free_requested", a, act, frames=fa), ev("free_completed", a, act, frames=fa),
              ev("segment_free", t, loss, frames=fl)]
    segments = [segment(w, [block(w, weights, stack=fw)] + ([block(w + weights, gap, "inactive", 0)] if gap else []),
                        device=device),
                segment(a, [block(a, act, "inactive", act)], device=device)]
    if leak:
        segments.append(segment(k, [block(k, leak, stack=fk)], device=device))
    sites = {label("model.py", 10 + shift, "__init__", root): weights,
             label("train.py", 20 + shift, "forward", root): act}
    if leak:
        key = label("train.py", 40 + shift, leak_name, root)
        sites[key] = sites.get(key, 0) + leak
    sites[label("train.py", 30 + shift, "loss", root)] = loss
    return Run(segments, trace, weights + gap + act + leak + loss, weights + act + leak + loss, gap, peak_state,
               sites)


def devices(*runs: Run) -> dict[str, Any]:
    """One snapshot of several runs, run i on device i (each built with device=i)."""
    return snapshot([s for r in runs for s in r.segments], *[r.trace for r in runs])


def untraced(r: Run) -> dict[str, Any]:
    """The run's final state with memory history off: segments, no trace."""
    return snapshot(r.segments)
