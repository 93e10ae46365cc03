"""Replay a device's trace: undo it backward from the final state to the start, then apply it forward.

The backward pass (what PyTorch's viewer does, reference B.4) finds the state at the start of the trace
window. The forward pass rebuilds the state after every event, records the per-event series and keeps
checkpoints so that any past state can be restored quickly. Block sizes that the trace does not record
(a freed block's rounded size) come from a `Sizer`; blocks still live at the end take their real size.
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Callable

import numpy as np

from fragviz.base.units import LARGE_BUFFER
from fragviz.model import (ALLOC, FREE_COMPLETED, FREE_REQUESTED, SEGMENT_ALLOC, SEGMENT_FREE, SEGMENT_MAP,
                           SEGMENT_UNMAP, BlockState, Segment, Trace)
from fragviz.replay.layout import (ALLOC_EVENT, PENDING, PRE_TRACE, SIZE, Layout, Mismatch, Seg, Sizer,
                                   pool_of_segment_alloc)

AfterEvent = Callable[[int, int, int], None]  # (event, action, address), after the event is applied
FINAL = -2  # a block record taken from the final state during the backward pass
CHECKPOINT_EVERY = 8192


@dataclass
class StartState:
    segments: list[Seg]
    blocks: dict[int, list]
    exact_sizes: dict[int, int]  # alloc event -> real block size, for blocks still live at the end
    mismatch: Mismatch


def final_records(segments: list[Segment]) -> tuple[list[Seg], dict[int, list]]:
    segs, blocks = [], {}
    for s in segments:
        segs.append(Seg(s.address, s.total_size, s.stream, s.pool, s.pool_id, s.is_expandable, s.stack))
        for b in s.blocks:
            if b.state.is_active:
                pending = b.state is BlockState.ACTIVE_PENDING_FREE
                blocks[b.address] = [b.size, b.requested_size, pending, b.stack, FINAL, s.stream]
    return segs, blocks


def undo_to_start(final: list[Segment], trace: Trace) -> StartState:
    """The state before the first event of `trace`, by undoing every event from the final state."""
    seg_list, blocks = final_records(final)
    segs = {s.address: s for s in seg_list}
    exact: dict[int, int] = {}
    mismatch = Mismatch()
    n = len(trace)
    cols = zip(range(n - 1, -1, -1), *(reversed(c.tolist()) for c in
                                       (trace.action, trace.addr, trace.size, trace.stream, trace.stack)))
    for i, act, addr, size, stream, stack in cols:
        if act == ALLOC:
            rec = blocks.pop(addr, None)
            if rec is None:
                mismatch.note("alloc_of_block_missing_later", i)
            elif rec[ALLOC_EVENT] == FINAL:
                exact[i] = rec[SIZE]
        elif act == FREE_REQUESTED:
            rec = blocks.get(addr)
            if rec is not None:
                rec[PENDING] = False
        elif act == FREE_COMPLETED:
            if addr in blocks:
                mismatch.note("free_of_block_live_later", i)
            else:
                blocks[addr] = [0, size, True, stack, PRE_TRACE, stream]
        elif act == SEGMENT_ALLOC:
            if segs.pop(addr, None) is None:
                mismatch.note("segment_alloc_missing_later", i)
        elif act == SEGMENT_FREE:
            segs[addr] = Seg(addr, size, stream, pool_of_segment_alloc(size))
        elif act == SEGMENT_MAP:
            _undo_map(segs, addr, size, mismatch, i)
        elif act == SEGMENT_UNMAP:
            _undo_unmap(segs, addr, size, stream)
    return StartState(sorted(segs.values(), key=lambda s: s.address), blocks, exact, mismatch)


def _undo_map(segs: dict[int, Seg], addr: int, size: int, mismatch: Mismatch, event: int) -> None:
    end = addr + size
    for seg in list(segs.values()):
        if seg.address <= addr and end <= seg.end:
            del segs[seg.address]
            for lo, hi in ((seg.address, addr), (end, seg.end)):
                if hi > lo:
                    segs[lo] = Seg(lo, hi - lo, seg.stream, seg.pool, seg.pool_id, True, seg.stack)
            return
    mismatch.note("segment_map_missing_later", event)


def _undo_unmap(segs: dict[int, Seg], addr: int, size: int, stream: int) -> None:
    lo, hi = addr, addr + size
    pool = "large" if size % LARGE_BUFFER == 0 else "small"
    for seg in list(segs.values()):
        if seg.expandable and seg.stream == stream and (seg.end == lo or seg.address == hi):
            del segs[seg.address]
            lo, hi, pool = min(lo, seg.address), max(hi, seg.end), seg.pool
    segs[lo] = Seg(lo, hi - lo, stream, pool, None, True)


def build_layout(segments: list[Seg], blocks: dict[int, list], sizer: Sizer) -> Layout:
    """A Layout holding these segments and active blocks; unknown block sizes (0) come from the sizer."""
    layout = Layout(sizer)
    for seg in segments:
        fresh = Seg(seg.address, seg.size, seg.stream, seg.pool, seg.pool_id, seg.expandable, seg.stack)
        layout.add_segment(fresh, -1)
    for addr in sorted(blocks):
        rec = list(blocks[addr])
        layout.add_block(addr, rec, -1, rec[SIZE] > 0)
    return layout


@dataclass
class ForwardResult:
    series: dict[str, np.ndarray]  # each of length len(trace) + 1: the value after K events
    block_size: np.ndarray  # per event: the block size an alloc got (0 for other actions)
    layout: Layout  # the state after the last event


SERIES = ("allocated", "requested", "reserved", "free_gaps", "largest_gap", "non_releasable")


def _filled(changed: array, values: list[array], first: int, last: int) -> dict[str, np.ndarray]:
    """Series for the states after events first..last, from the values recorded at the states that changed."""
    changed.append(last + 1)
    repeats = np.diff(np.frombuffer(changed, np.int64))  # `changed` is strictly increasing
    return {name: np.repeat(np.frombuffer(v, np.int64), repeats) for name, v in zip(SERIES, values)}


def run_forward(layout: Layout, trace: Trace, block_size: np.ndarray, start: int = 0, stop: int | None = None,
                record: bool = True, checkpoint_every: int = CHECKPOINT_EVERY,
                on_checkpoint=None, offset: int = 0, after: AfterEvent | None = None) -> ForwardResult:
    """Apply events [start, stop) to `layout`. `block_size` is read where > 0 and filled where 0.

    With `record`, the series after every event is kept, and `on_checkpoint(event, layout)` is called
    before every `checkpoint_every`-th event (the state after that many events). `trace` may be a slice
    of the device's trace that starts at event `offset`; events are numbered from there. Without `record`,
    `after(event, action, address)` is called after each event that changes the state.
    """
    stop = len(trace) if stop is None else stop
    if not record:
        _apply(layout, trace, block_size, start, stop, offset, None, after)
        return ForwardResult({}, block_size, layout)
    # Figures are recorded only after events that can change them, then filled forward.
    changed = array("q")
    out = [array("q") for _ in SERIES]
    changed.append(start + offset)
    for column, value in zip(out, (layout.allocated, layout.requested, layout.reserved, layout.n_gaps,
                                   layout.largest_gap(), layout.non_releasable)):
        column.append(value)
    lo = start
    while lo < stop:  # spans between checkpoints, so the event loop itself never asks whether to keep one
        if on_checkpoint is not None and (lo + offset) % checkpoint_every == 0:
            on_checkpoint(lo + offset, layout)
        hi = min(stop, lo + checkpoint_every - (lo + offset) % checkpoint_every)
        _apply(layout, trace, block_size, lo, hi, offset, (changed, out))
        lo = hi
    return ForwardResult(_filled(changed, out, start + offset, stop + offset), block_size, layout)


def _apply(layout: Layout, trace: Trace, block_size: np.ndarray, start: int, stop: int, offset: int,
           record: tuple[array, list[array]] | None, after: AfterEvent | None = None) -> None:
    """The event loop: events [start, stop) applied to `layout`, figures appended to `record` after each
    event that can change them. The hottest code of ingest: names are bound locally, pending flags set inline."""
    sizes = block_size[start:stop].tolist()
    cols = zip(range(start + offset, stop + offset), trace.action[start:stop].tolist(),
               trace.addr[start:stop].tolist(), trace.size[start:stop].tolist(),
               trace.stream[start:stop].tolist(), trace.stack[start:stop].tolist(), sizes)
    blocks, heap, counts, largest_gap = layout.blocks, layout._gap_heap, layout.gap_count, layout.largest_gap
    add_block, remove_block = layout.add_block, layout.remove_block
    base = start + offset
    if record is not None:
        changed, out = record
        rec_k, rec_a, rec_r, rec_s, rec_g, rec_l, rec_n = changed.append, *(o.append for o in out)
    for i, act, addr, size, stream, stack, known in cols:
        if act == ALLOC:
            got = add_block(addr, [known, size, False, stack, i, stream], i, known > 0)
            if not known:
                sizes[i - base] = got
        elif act == FREE_COMPLETED:
            remove_block(addr, i)
        elif act == FREE_REQUESTED:
            rec = blocks.get(addr)
            if rec is None:
                layout.mismatch.note("free_request_of_unknown_block", i)
            else:
                rec[PENDING] = True
            if after is not None:
                after(i, act, addr)
            continue
        elif act == SEGMENT_ALLOC:
            layout.add_segment(Seg(addr, size, stream, pool_of_segment_alloc(size), None, False), i)
        elif act == SEGMENT_FREE:
            layout.remove_segment(addr, i)
        elif act == SEGMENT_MAP:
            layout.map_range(addr, size, stream, i)
        elif act == SEGMENT_UNMAP:
            layout.unmap_range(addr, size, i)
        else:
            continue
        if after is not None:
            after(i, act, addr)
        if record is not None:
            rec_k(i + 1), rec_a(layout.allocated), rec_r(layout.requested), rec_s(layout.reserved)
            rec_g(layout.n_gaps), rec_l(-heap[0] if heap and -heap[0] in counts else largest_gap())
            rec_n(layout.non_releasable)
    block_size[start:stop] = sizes
