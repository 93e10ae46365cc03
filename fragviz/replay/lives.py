"""Every state of a device's trace at once, as lives: each segment and block with the states it is part of.

A page that holds a device's lives rebuilds the state after any event by keeping the rows whose span holds it,
with no replay and no round trip (assets/lives.js does that). The lives follow `fragviz.library.stored.device_state`
exactly: each span between checkpoints starts from its checkpoint, as a stored state does, and the state after
the last event is the snapshot's own final segments, free blocks included.

A row lives in the states [first, end): state k is the state after k events, so an alloc at event i starts its
block's life at state i + 1. A block's pending free (freed, waiting for its stream's work) is a life of its own.
Before the last state the free gaps are not rows: they are the room between a segment's blocks.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fragviz.model import NO_STACK, ALLOC, FREE_COMPLETED, FREE_REQUESTED, Block, BlockState, Segment, Trace
from fragviz.replay import restore_layout
from fragviz.replay.engine import CHECKPOINT_EVERY, AfterEvent, run_forward
from fragviz.replay.layout import PENDING, REQUESTED, SEGMENT, SIZE, STACK, Layout, Seg, Sizer

POOLS = ("small", "large")
ALLOCATED, PENDING_FREE, FREE = 0, 1, 2  # a block row's state
SEGMENT_COLUMNS = ("address", "size", "stream", "pool", "expandable", "pool_a", "pool_b", "stack", "first", "end")
BLOCK_COLUMNS = ("address", "size", "requested", "state", "stack", "first", "end")
_STATES = {ALLOCATED: BlockState.ACTIVE_ALLOCATED, PENDING_FREE: BlockState.ACTIVE_PENDING_FREE,
           FREE: BlockState.INACTIVE}
_ROW_STATES = {state: row for row, state in _STATES.items()}
_BLOCK_EVENTS = (ALLOC, FREE_COMPLETED, FREE_REQUESTED)


@dataclass(frozen=True)
class Lives:
    """A device's segments and blocks over its states 0..states-1, as columns (SEGMENT_COLUMNS, BLOCK_COLUMNS)."""

    device: int
    states: int
    segments: dict[str, np.ndarray]
    blocks: dict[str, np.ndarray]

    def segments_at(self, k: int) -> list[Segment]:
        """The state after k events, as `device_state` gives it."""
        seg_rows = np.flatnonzero((self.segments["first"] <= k) & (k < self.segments["end"]))
        blk_rows = np.flatnonzero((self.blocks["first"] <= k) & (k < self.blocks["end"]))
        blk_rows = blk_rows[np.argsort(self.blocks["address"][blk_rows], kind="stable")]
        addresses = self.blocks["address"][blk_rows]
        out = []
        for row in seg_rows[np.argsort(self.segments["address"][seg_rows], kind="stable")]:
            out.append(self._segment(row, addresses, blk_rows))
        return out

    def _segment(self, row: int, addresses: np.ndarray, blk_rows: np.ndarray) -> Segment:
        s = {name: int(col[row]) for name, col in self.segments.items()}
        lo, hi = np.searchsorted(addresses, [s["address"], s["address"] + s["size"]])
        blocks = tuple(_block(self.blocks, r) for r in blk_rows[lo:hi].tolist())
        if not any(b.state is BlockState.INACTIVE for b in blocks):
            blocks = _with_gaps(s["address"], s["address"] + s["size"], blocks)
        pool_id = None if s["pool_a"] < 0 else (s["pool_a"], s["pool_b"])
        expandable = None if s["expandable"] < 0 else bool(s["expandable"])
        return Segment(self.device, s["address"], s["size"], s["stream"], POOLS[s["pool"]], blocks, pool_id,
                       expandable, s["stack"])


def _block(blocks: dict[str, np.ndarray], row: int) -> Block:
    return Block(int(blocks["address"][row]), int(blocks["size"][row]), int(blocks["requested"][row]),
                 _STATES[int(blocks["state"][row])], int(blocks["stack"][row]))


def _with_gaps(start: int, end: int, active: tuple[Block, ...]) -> tuple[Block, ...]:
    """A replayed segment's blocks with its free gaps between them, as `layout_segments` makes them."""
    out, cursor = [], start
    for b in active:
        if b.address > cursor:
            out.append(Block(cursor, b.address - cursor, 0, BlockState.INACTIVE, NO_STACK))
        out.append(b)
        cursor = b.address + b.size
    if end > cursor:
        out.append(Block(cursor, end - cursor, 0, BlockState.INACTIVE, NO_STACK))
    return tuple(out)


class _Rows:
    """Lives being written: the open row of each address, closed when what lies there changes."""

    def __init__(self, columns: tuple[str, ...]) -> None:
        self.columns = columns
        self.rows: list[tuple] = []
        self.open: dict[int, tuple[int, tuple]] = {}  # address -> (row, what lies there)

    def set(self, address: int, what: tuple | None, state: int) -> None:
        """From `state` on, `what` lies at `address` (None: nothing)."""
        current = self.open.get(address)
        if current is not None and current[1] == what:
            return
        if current is not None:
            row = self.rows[current[0]]
            self.rows[current[0]] = row[:-1] + (state,)
            del self.open[address]
        if what is not None:
            self.open[address] = (len(self.rows), what)
            self.rows.append((address, *what, state, -1))

    def close_all(self, state: int) -> None:
        for address in list(self.open):
            self.set(address, None, state)

    def arrays(self) -> dict[str, np.ndarray]:
        table = np.array(self.rows, np.int64).reshape(len(self.rows), len(self.columns))
        return {name: table[:, i] for i, name in enumerate(self.columns)}


def _seg_key(seg: Seg) -> tuple:
    pool_a, pool_b = seg.pool_id if seg.pool_id else (-1, -1)
    expandable = -1 if seg.expandable is None else int(seg.expandable)
    return (seg.size, seg.stream, POOLS.index(seg.pool), expandable, pool_a, pool_b, seg.stack)


def _block_key(rec: list | None) -> tuple | None:
    """What a block row holds, or None for a block the state does not show (one on no segment)."""
    if rec is None or len(rec) <= SEGMENT or rec[SEGMENT] is None:
        return None
    return (rec[SIZE], rec[REQUESTED], PENDING_FREE if rec[PENDING] else ALLOCATED, rec[STACK])


class _Tracker:
    """Follows a layout event by event into segment and block lives."""

    def __init__(self) -> None:
        self.segs, self.blocks = _Rows(SEGMENT_COLUMNS), _Rows(BLOCK_COLUMNS)

    def sync_all(self, layout: Layout, state: int) -> None:
        self.sync_segments(layout, state)
        for address in set(self.blocks.open) | set(layout.blocks):
            self.blocks.set(address, _block_key(layout.blocks.get(address)), state)

    def sync_segments(self, layout: Layout, state: int) -> None:
        for address in set(self.segs.open) | set(layout.segs):
            seg = layout.segs.get(address)
            self.segs.set(address, None if seg is None else _seg_key(seg), state)
        for address in list(self.blocks.open):  # a segment's end or unmap can take blocks off every segment
            self.blocks.set(address, _block_key(layout.blocks.get(address)), state)

    def after(self, layout: Layout) -> AfterEvent:
        """What to do after each event: write what it changed, starting at the state it makes."""
        blocks, rows = layout.blocks, self.blocks

        def changed(event: int, action: int, address: int) -> None:
            if action in _BLOCK_EVENTS:
                rows.set(address, _block_key(blocks.get(address)), event + 1)
            else:
                self.sync_segments(layout, event + 1)
        return changed


def state_lives(final: list[Segment], trace: Trace, block_size: np.ndarray,
                checkpoints: Mapping[int, dict[str, np.ndarray]], sizer: Sizer, device: int) -> Lives:
    """The lives of every state of `device`: states 0..n-1 replayed span by span from their checkpoints, as
    `device_state` rebuilds them, and state n the final segments as recorded."""
    n = len(trace)
    tracker = _Tracker()
    for base in range(0, n, CHECKPOINT_EVERY):
        layout = restore_layout(checkpoints, trace, block_size, base, sizer)
        tracker.sync_all(layout, base)
        # the span's states base .. next checkpoint - 1 (or n - 1: state n is the final one)
        run_forward(layout, trace, block_size, base, min(n, base + CHECKPOINT_EVERY) - 1, record=False,
                    after=tracker.after(layout))
    tracker.segs.close_all(n)
    tracker.blocks.close_all(n)
    _add_final(tracker, final, n)
    return Lives(device, n + 1, tracker.segs.arrays(), tracker.blocks.arrays())


def _add_final(tracker: _Tracker, final: list[Segment], n: int) -> None:
    for seg in final:
        pool_a, pool_b = seg.pool_id if seg.pool_id else (-1, -1)
        expandable = -1 if seg.is_expandable is None else int(seg.is_expandable)
        tracker.segs.rows.append((seg.address, seg.total_size, seg.stream, POOLS.index(seg.pool), expandable,
                                  pool_a, pool_b, seg.stack, n, n + 1))
        for b in seg.blocks:
            tracker.blocks.rows.append((b.address, b.size, b.requested_size, _ROW_STATES.get(b.state, FREE),
                                        b.stack, n, n + 1))
