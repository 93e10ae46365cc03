"""State over time: `replay_device` rebuilds a device's allocator state before and after every event."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from fragviz.allocator.config import AllocatorSettings, settings_from_snapshot
from fragviz.model.lod import per_event
from fragviz.model.metrics import StateFigures, fragmentation, state_figures
from fragviz.model import Segment, Snapshot, Trace
from fragviz.replay.engine import (CHECKPOINT_EVERY, SERIES, build_layout, final_records, run_forward,
                                   undo_to_start)
from fragviz.replay.layout import Layout, Mismatch, Sizer, default_sizer
from fragviz.replay.state import layout_segments, layout_to_arrays, segs_and_blocks
from fragviz.usage.lifetimes import Lifetimes, lifetimes_of

# Which figures a past state gives exactly, and which it infers (docs/how-it-works.md, "Exact and inferred figures").
EXACT_FIGURES = ("reserved_bytes", "requested_bytes", "segments", "allocations")
INFERRED_FIGURES = ("allocated_bytes", "free_bytes", "free_blocks", "largest_free_block", "fragmentation")
SIZES_NOTE = ("past block sizes are inferred from the request with PyTorch's rounding and split rules under "
              "the recorded settings; blocks still live at the end keep their real size")

_MISMATCH_TEXT = {
    "alloc_of_block_missing_later": "alloc events whose block is neither freed later nor in the final segments",
    "free_of_block_live_later": "free_completed events for a block the final state or a later event still holds",
    "segment_alloc_missing_later": "segment_alloc events for segments neither freed later nor in the final state",
    "segment_map_missing_later": "segment_map events for ranges not mapped in the final state",
    "block_on_no_segment": "blocks that lie on no segment (the trace frees or allocates memory its segments never held)",
    "overlapping_block": "blocks that overlap another block or their segment's end",
    "free_of_unknown_block": "free_completed events for a block that is not allocated",
    "free_request_of_unknown_block": "free_requested events for a block that is not allocated",
    "alloc_of_live_block": "alloc events at the address of a live block",
    "segment_overlaps_segment": "segments that overlap another segment",
    "free_of_unknown_segment": "segment_free events for a segment that does not exist",
    "segment_freed_with_live_blocks": "segment_free events while blocks are still live in the segment",
    "map_of_mapped_range": "segment_map events over memory already mapped",
    "unmap_of_unmapped_range": "segment_unmap events over memory that is not mapped",
    "unmap_of_live_block": "segment_unmap events under live blocks",
}


@dataclass
class DeviceReplay:
    """A device's trace replayed: series per event, block sizes, checkpoints, and what did not add up."""

    device: int
    trace: Trace
    series: Mapping[str, np.ndarray]
    block_size: np.ndarray
    checkpoints: Mapping[int, dict[str, np.ndarray]]
    sizer: Sizer
    warnings: list[str] = field(default_factory=list)
    pre_trace_blocks: int = 0
    pre_trace_segments: int = 0

    def figures_at(self, k: int) -> StateFigures:
        return state_figures(self.segments_at(k))

    def segments_at(self, k: int) -> list[Segment]:
        return layout_segments(self.layout_at(k), self.device)

    def layout_at(self, k: int) -> Layout:
        return restore_layout(self.checkpoints, self.trace, self.block_size, k, self.sizer)

    def fragmentation_series(self) -> np.ndarray:
        return per_event(self.series)["fragmentation"]

    def lifetimes(self) -> Lifetimes:
        """Every allocation of the trace and the states it is live in (the trace's start state included)."""
        return lifetimes_of(self.trace, self.block_size, self.checkpoints[0])


def restore_layout(checkpoints: Mapping[int, dict[str, np.ndarray]], trace: Trace, block_size: np.ndarray,
                   k: int, sizer: Sizer, offset: int = 0) -> Layout:
    """The layout after `k` events: the checkpoint at or before k, then the events up to k.

    `trace` and `block_size` may be a slice of the device's trace starting at event `offset`, as long as
    it holds the events from that checkpoint up to k.
    """
    base = checkpoint_before(checkpoints, k)
    segs, blocks = segs_and_blocks(checkpoints[base])
    layout = build_layout(segs, blocks, sizer)
    run_forward(layout, trace, block_size, base - offset, k - offset, record=False, offset=offset)
    return layout


def checkpoint_before(checkpoints: Mapping[int, object], k: int) -> int:
    base = (k // CHECKPOINT_EVERY) * CHECKPOINT_EVERY
    while base not in checkpoints:
        base -= CHECKPOINT_EVERY
        if base < 0:
            raise KeyError(f"no checkpoint at or before event {k}")
    return base


def replay_device(snapshot: Snapshot, device: int, settings: AllocatorSettings | None = None,
                  sizer: Sizer | None = None, progress: Callable[[int], None] | None = None) -> DeviceReplay:
    """Replay one device: undo the trace back to its start, then apply it forward recording every state."""
    settings = settings or settings_from_snapshot(snapshot.allocator_settings)
    sizer = sizer or default_sizer(settings)
    trace = snapshot.trace_of(device)
    final = snapshot.segments_of(device)
    start = undo_to_start(final, trace)
    block_size = np.zeros(len(trace), np.int64)
    for event, size in start.exact_sizes.items():
        block_size[event] = size
    layout = build_layout(start.segments, start.blocks, sizer)
    init_mismatch = layout.mismatch
    layout.mismatch = Mismatch()
    checkpoints: dict[int, dict[str, np.ndarray]] = {}

    def keep(event: int, state: Layout) -> None:
        checkpoints[event] = layout_to_arrays(state)
        if progress is not None:
            progress(event)

    result = run_forward(layout, trace, block_size, on_checkpoint=keep)
    if len(trace) % CHECKPOINT_EVERY == 0:
        checkpoints[len(trace)] = layout_to_arrays(result.layout)
    replay = DeviceReplay(device, trace, result.series, block_size, checkpoints, sizer)
    replay.pre_trace_blocks = len(start.blocks)  # every block of the start state predates the trace
    replay.pre_trace_segments = len(start.segments)
    replay.warnings = _warnings(device, start.mismatch, init_mismatch, result.layout, final, len(trace))
    return replay


def _warnings(device: int, backward: Mismatch, init: Mismatch, end: Layout, final: list[Segment],
              n: int) -> list[str]:
    out = []
    for kind, count in init.counts.items():
        out.append(f"device {device}: at the start of the trace, {count} {_MISMATCH_TEXT.get(kind, kind)}")
    for source in (backward, end.mismatch):
        for kind, count in source.counts.items():
            out.append(f"device {device}: {count} {_MISMATCH_TEXT.get(kind, kind)} (first at event "
                       f"{source.first[kind]})")
    if n and not _same_state(end, final):
        out.append(f"device {device}: replaying the trace does not reproduce the final segments and blocks; "
                   "figures for past events are approximate")
    return out


def _same_state(layout: Layout, final: list[Segment]) -> bool:
    segs, blocks = final_records(final)
    if sorted((s.address, s.size) for s in segs) != sorted((s.address, s.size) for s in layout.segs.values()):
        return False
    replayed = {a: (r[0], r[1], r[2]) for a, r in layout.blocks.items()}
    return replayed == {a: (r[0], r[1], r[2]) for a, r in blocks.items()}


__all__ = ["DeviceReplay", "replay_device", "restore_layout", "SERIES", "EXACT_FIGURES", "INFERRED_FIGURES",
           "fragmentation"]
