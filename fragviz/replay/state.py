"""Replay states as data: checkpoint arrays for the store, and model segments for reports and views."""
from __future__ import annotations

import numpy as np

from fragviz.model import NO_STACK, Block, BlockState, Segment
from fragviz.replay.layout import (ALLOC_EVENT, PENDING, REQUESTED, SIZE, STACK, STREAM, Layout, Seg)

_POOLS = ("small", "large")


def layout_to_arrays(layout: Layout) -> dict[str, np.ndarray]:
    """The segments and active blocks of a layout as columns (a checkpoint)."""
    segs = [layout.segs[a] for a in layout.seg_starts]
    blocks = sorted(layout.blocks.items())
    return {
        "seg_addr": np.array([s.address for s in segs], np.int64),
        "seg_size": np.array([s.size for s in segs], np.int64),
        "seg_stream": np.array([s.stream for s in segs], np.int64),
        "seg_pool": np.array([_POOLS.index(s.pool) for s in segs], np.int8),
        "seg_expandable": np.array([-1 if s.expandable is None else int(s.expandable) for s in segs], np.int8),
        "seg_pool_a": np.array([s.pool_id[0] if s.pool_id else -1 for s in segs], np.int64),
        "seg_pool_b": np.array([s.pool_id[1] if s.pool_id else -1 for s in segs], np.int64),
        "seg_stack": np.array([s.stack for s in segs], np.int32),
        "blk_addr": np.array([a for a, _ in blocks], np.int64),
        "blk_size": np.array([r[SIZE] for _, r in blocks], np.int64),
        "blk_requested": np.array([r[REQUESTED] for _, r in blocks], np.int64),
        "blk_pending": np.array([r[PENDING] for _, r in blocks], np.int8),
        "blk_stack": np.array([r[STACK] for _, r in blocks], np.int32),
        "blk_event": np.array([r[ALLOC_EVENT] for _, r in blocks], np.int64),
        "blk_stream": np.array([r[STREAM] for _, r in blocks], np.int64),
    }


def segs_and_blocks(cols: dict[str, np.ndarray]) -> tuple[list[Seg], dict[int, list]]:
    """Checkpoint columns back to segment and block records (the input of `build_layout`)."""
    segs = []
    for addr, size, stream, pool, exp, pa, pb, stack in zip(
            *(cols[k].tolist() for k in ("seg_addr", "seg_size", "seg_stream", "seg_pool", "seg_expandable",
                                         "seg_pool_a", "seg_pool_b", "seg_stack"))):
        segs.append(Seg(addr, size, stream, _POOLS[pool], None if pa < 0 else (pa, pb),
                        None if exp < 0 else bool(exp), stack))
    blocks = {}
    for addr, size, req, pend, stack, event, stream in zip(
            *(cols[k].tolist() for k in ("blk_addr", "blk_size", "blk_requested", "blk_pending", "blk_stack",
                                         "blk_event", "blk_stream"))):
        blocks[addr] = [size, req, bool(pend), stack, event, stream]
    return segs, blocks


def layout_segments(layout: Layout, device: int) -> list[Segment]:
    """The layout's segments as model segments, free gaps included as inactive blocks."""
    out = []
    for addr in layout.seg_starts:
        seg = layout.segs[addr]
        out.append(Segment(device, seg.address, seg.size, seg.stream, seg.pool, _blocks_of(layout, seg),
                           seg.pool_id, seg.expandable, seg.stack))
    return out


def _blocks_of(layout: Layout, seg: Seg) -> tuple[Block, ...]:
    blocks, cursor = [], seg.address
    for start, end in zip(seg.starts, seg.ends):
        if start > cursor:
            blocks.append(Block(cursor, start - cursor, 0, BlockState.INACTIVE, NO_STACK))
        rec = layout.blocks[start]
        state = BlockState.ACTIVE_PENDING_FREE if rec[PENDING] else BlockState.ACTIVE_ALLOCATED
        blocks.append(Block(start, end - start, rec[REQUESTED], state, rec[STACK]))
        cursor = end
    if seg.end > cursor:
        blocks.append(Block(cursor, seg.end - cursor, 0, BlockState.INACTIVE, NO_STACK))
    return tuple(blocks)
