"""The allocator's state on one device as it changes event by event: segments, blocks and free gaps.

`Layout` applies trace events forward. It keeps, per segment, the active blocks in address order, so
the free gaps (the inactive blocks, which the allocator always merges with free neighbours) are the
spaces between them; a multiset of gap sizes gives the count and the largest gap after every event, and a
running total the free bytes that releasing the cache could not give back (`fragviz.model.metrics`).
This is the hot loop of ingest (millions of events), so records are plain lists and the methods are flat.
"""
from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from typing import Callable

from fragviz.allocator.config import AllocatorSettings
from fragviz.allocator.rules import LARGE_BUFFER, SMALL_BUFFER, is_small, round_size, should_split
from fragviz.model.metrics import expandable_page, stuck_in_gap

# A block record: [size, requested, pending_free, stack, alloc_event, stream, segment (None: on no segment)]
SIZE, REQUESTED, PENDING, STACK, ALLOC_EVENT, STREAM, SEGMENT = range(7)
PRE_TRACE = -1  # allocated before the trace window: alloc event unknown


class Seg:
    """A segment (or, for expandable segments, one contiguous mapped range) and its active blocks."""

    __slots__ = ("address", "end", "stream", "pool", "pool_id", "expandable", "stack", "starts", "ends")

    def __init__(self, address: int, size: int, stream: int, pool: str, pool_id=None, expandable=None,
                 stack: int = -1) -> None:
        self.address, self.end, self.stream, self.pool = address, address + size, stream, pool
        self.pool_id, self.expandable, self.stack = pool_id, expandable, stack
        self.starts: list[int] = []
        self.ends: list[int] = []

    @property
    def size(self) -> int:
        return self.end - self.address

    def gaps(self) -> list[int]:
        out, cursor = [], self.address
        for s, e in zip(self.starts, self.ends):
            if s > cursor:
                out.append(s - cursor)
            cursor = max(cursor, e)
        if self.end > cursor:
            out.append(self.end - cursor)
        return out

    def stuck(self, lo: int, hi: int) -> int:
        """Bytes of the gap [lo, hi) of this expandable segment that releasing cannot unmap."""
        return stuck_in_gap(lo, hi, self.address, expandable_page(self.pool)) if hi > lo else 0

    def non_releasable(self) -> int:
        """Free bytes of this segment that `torch.cuda.empty_cache()` could not give back (fragviz.model.metrics)."""
        if self.expandable:
            out, cursor = 0, self.address
            for s, e in zip(self.starts, self.ends):
                out += self.stuck(cursor, s)
                cursor = max(cursor, e)
            return out + self.stuck(cursor, self.end)
        return sum(self.gaps()) if self.starts else 0


class Mismatch:
    """Counts of events the recorded state cannot explain, reported as warnings."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.first: dict[str, int] = {}

    def note(self, kind: str, event: int) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.first[kind] = min(event, self.first.get(kind, event))


Sizer = Callable[[int, "Seg | None", int], int]


def default_sizer(settings: AllocatorSettings) -> Sizer:
    """Block size for a request placed at the front of `room` free bytes: PyTorch's rounding and split rules."""
    if settings == AllocatorSettings():
        return _default_settings_sizer

    def size_of(requested: int, seg: Seg | None, room: int) -> int:
        rounded = round_size(requested, settings)
        if seg is None or room <= rounded:
            return rounded
        small = seg.pool == "small" if seg.pool else is_small(rounded)
        return rounded if should_split(room, rounded, small, settings) else room

    return size_of


def _default_settings_sizer(requested: int, seg: Seg | None, room: int) -> int:
    # The same rules as size_of above with PyTorch's default settings, unrolled: this runs once per alloc.
    rounded = 512 if requested < 512 else (requested + 511) & ~511
    if seg is None or room <= rounded:
        return rounded
    remaining = room - rounded
    if seg.pool == "small":
        return rounded if remaining >= 512 else room
    return rounded if remaining > 1048576 else room


class Layout:
    def __init__(self, sizer: Sizer) -> None:
        self.sizer = sizer
        self.seg_starts: list[int] = []
        self.segs: dict[int, Seg] = {}
        self.blocks: dict[int, list] = {}
        self.gap_count: dict[int, int] = {}
        self._gap_heap: list[int] = []  # negated sizes; each size at most once (see _in_heap)
        self._in_heap: set[int] = set()
        self.n_gaps = 0
        self.allocated = 0
        self.requested = 0
        self.reserved = 0
        self.non_releasable = 0
        self.mismatch = Mismatch()

    # -- gaps ----------------------------------------------------------------------------------------
    def _gap_add(self, g: int) -> None:
        c = self.gap_count.get(g, 0)
        self.gap_count[g] = c + 1
        if not c and g not in self._in_heap:
            self._in_heap.add(g)
            heapq.heappush(self._gap_heap, -g)
        self.n_gaps += 1

    def _gap_remove(self, g: int) -> None:
        c = self.gap_count[g]
        if c == 1:
            del self.gap_count[g]
        else:
            self.gap_count[g] = c - 1
        self.n_gaps -= 1

    def largest_gap(self) -> int:
        heap, counts = self._gap_heap, self.gap_count
        while heap and -heap[0] not in counts:
            self._in_heap.discard(-heapq.heappop(heap))
        return -heap[0] if heap else 0

    # -- lookup --------------------------------------------------------------------------------------
    def segment_at(self, addr: int) -> Seg | None:
        i = bisect_right(self.seg_starts, addr) - 1
        if i >= 0:
            seg = self.segs[self.seg_starts[i]]
            if addr < seg.end:
                return seg
        return None

    # -- blocks --------------------------------------------------------------------------------------
    def add_block(self, addr: int, rec: list, event: int, size_known: bool) -> int:
        """Insert an active block; returns its size (computed by the sizer when not known)."""
        seg = self.segment_at(addr)
        if addr in self.blocks:
            self.mismatch.note("alloc_of_live_block", event)
            return rec[SIZE]
        if seg is None:
            if not size_known:
                rec[SIZE] = self.sizer(rec[REQUESTED], None, 0)
            self.mismatch.note("block_on_no_segment", event)
            rec.append(None)
        else:
            starts = seg.starts
            j = bisect_right(starts, addr)
            prev_end = seg.ends[j - 1] if j else seg.address
            next_start = starts[j] if j < len(starts) else seg.end
            if not size_known:
                rec[SIZE] = self.sizer(rec[REQUESTED], seg, next_start - addr)
            size = rec[SIZE]
            if addr < prev_end or addr + size > next_start:
                self.mismatch.note("overlapping_block", event)
                rec.append(None)
            else:
                rec.append(seg)
                self._gap_remove(next_start - prev_end)
                if addr > prev_end:
                    self._gap_add(addr - prev_end)
                if next_start > addr + size:
                    self._gap_add(next_start - addr - size)
                if seg.expandable:
                    self.non_releasable += (seg.stuck(prev_end, addr) + seg.stuck(addr + size, next_start)
                                            - seg.stuck(prev_end, next_start))
                else:  # its free bytes are stuck from its first active block on
                    self.non_releasable += -size if starts else seg.end - seg.address - size
                starts.insert(j, addr)
                seg.ends.insert(j, addr + size)
        self.blocks[addr] = rec
        self.allocated += rec[SIZE]
        self.requested += rec[REQUESTED]
        return rec[SIZE]

    def remove_block(self, addr: int, event: int) -> list | None:
        rec = self.blocks.pop(addr, None)
        if rec is None:
            self.mismatch.note("free_of_unknown_block", event)
            return None
        self.allocated -= rec[SIZE]
        self.requested -= rec[REQUESTED]
        seg = rec.pop()
        if seg is None:
            return rec
        starts = seg.starts
        j = bisect_left(starts, addr)
        prev_end = seg.ends[j - 1] if j else seg.address
        next_start = starts[j + 1] if j + 1 < len(starts) else seg.end
        end = seg.ends[j]
        if addr > prev_end:
            self._gap_remove(addr - prev_end)
        if next_start > end:
            self._gap_remove(next_start - end)
        self._gap_add(next_start - prev_end)
        if seg.expandable:
            self.non_releasable += (seg.stuck(prev_end, next_start) - seg.stuck(prev_end, addr)
                                    - seg.stuck(end, next_start))
        else:  # the segment's last active block leaves it whole and free: releasable
            self.non_releasable += end - addr if len(starts) > 1 else -(seg.end - seg.address - (end - addr))
        del starts[j]
        del seg.ends[j]
        return rec

    # -- segments ------------------------------------------------------------------------------------
    def _insert_segment(self, seg: Seg) -> None:
        insort(self.seg_starts, seg.address)
        self.segs[seg.address] = seg
        for g in seg.gaps():
            self._gap_add(g)
        self.non_releasable += seg.non_releasable()

    def _drop_segment(self, seg: Seg) -> None:
        del self.seg_starts[bisect_left(self.seg_starts, seg.address)]
        del self.segs[seg.address]
        for g in seg.gaps():
            self._gap_remove(g)
        self.non_releasable -= seg.non_releasable()

    def add_segment(self, seg: Seg, event: int) -> None:
        if self.segment_at(seg.address) or self.segment_at(seg.end - 1):
            self.mismatch.note("segment_overlaps_segment", event)
            return
        self._insert_segment(seg)
        self.reserved += seg.size

    def remove_segment(self, addr: int, event: int) -> None:
        seg = self.segs.get(addr)
        if seg is None:
            self.mismatch.note("free_of_unknown_segment", event)
            return
        if seg.starts:
            self.mismatch.note("segment_freed_with_live_blocks", event)
            for start in seg.starts:  # they outlive their segment: a later free only settles the counts
                rec = self.blocks.get(start)
                if rec is not None and rec[SEGMENT] is seg:
                    rec[SEGMENT] = None
        self._drop_segment(seg)
        self.reserved -= seg.size

    def map_range(self, addr: int, size: int, stream: int, event: int) -> None:
        """Pages mapped into an expandable segment: a new range, merged with touching ranges of its stream."""
        left = self.segment_at(addr - 1)
        right = self.segs.get(addr + size)
        if self.segment_at(addr) or self.segment_at(addr + size - 1):
            self.mismatch.note("map_of_mapped_range", event)
            return
        left = left if left and left.expandable and left.stream == stream and left.end == addr else None
        right = right if right and right.expandable and right.stream == stream else None
        pool = (left or right).pool if (left or right) else ("large" if size % LARGE_BUFFER == 0 else "small")
        merged = Seg(addr, size, stream, pool, None, True)
        for part in (left, right):
            if part is not None:
                self._drop_segment(part)
                merged = _join(merged, part, self.blocks)
        self._insert_segment(merged)
        self.reserved += size

    def unmap_range(self, addr: int, size: int, event: int) -> None:
        seg = self.segment_at(addr)
        if seg is None or addr + size > seg.end:
            self.mismatch.note("unmap_of_unmapped_range", event)
            return
        j = bisect_left(seg.starts, addr)
        if j < len(seg.starts) and seg.starts[j] < addr + size or j and seg.ends[j - 1] > addr:
            self.mismatch.note("unmap_of_live_block", event)
        self._drop_segment(seg)
        for part in _cut(seg, addr, addr + size, self.blocks):
            self._insert_segment(part)
        self.reserved -= size


def _join(a: Seg, b: Seg, blocks: dict[int, list]) -> Seg:
    lo, hi = (a, b) if a.address < b.address else (b, a)
    seg = Seg(lo.address, hi.end - lo.address, lo.stream, lo.pool, lo.pool_id or hi.pool_id, True,
              lo.stack if lo.stack >= 0 else hi.stack)
    seg.starts = lo.starts + hi.starts
    seg.ends = lo.ends + hi.ends
    for start in seg.starts:
        blocks[start][SEGMENT] = seg
    return seg


def _cut(seg: Seg, start: int, end: int, blocks: dict[int, list]) -> list[Seg]:
    """The parts of `seg` left when [start, end) is unmapped; blocks not wholly in a part lose their segment."""
    for s, e in zip(seg.starts, seg.ends):
        if s < end and e > start:
            blocks[s][SEGMENT] = None
    parts = []
    for lo, hi in ((seg.address, start), (end, seg.end)):
        if hi > lo:
            part = Seg(lo, hi - lo, seg.stream, seg.pool, seg.pool_id, seg.expandable, seg.stack)
            keep = [(s, e) for s, e in zip(seg.starts, seg.ends) if lo <= s and e <= hi]
            part.starts = [s for s, _ in keep]
            part.ends = [e for _, e in keep]
            for s in part.starts:
                blocks[s][SEGMENT] = part
            parts.append(part)
    return parts


def pool_of_segment_alloc(size: int) -> str:
    return "small" if size == SMALL_BUFFER else "large"
