"""Expandable segments (`expandable_segments:True`, reference C.11): one reservation of address space per pool
and stream, mapped and unmapped a page at a time. The half of `DeviceAllocator` that follows PyTorch's
`ExpandableSegment`, `try_allocate_expandable_block`, `map_block` and `unmap_block`; it works on the
allocator's own state (pools, ranges, counters, trace)."""
from __future__ import annotations

from bisect import bisect_left

from fragviz.allocator.blocks import Block, BlockPool, ExpandableSegment, stream_key
from fragviz.allocator.reservations import page_size, reservation_bytes

UNKNOWN_DEVICE_RESERVATION = 1 << 40  # expandable reservation size when neither trace nor device size tells it


class ExpandableSegments:
    """Mixed into `DeviceAllocator` (fragviz.allocator.sim), whose attributes and methods these use."""

    def _try_allocate_expandable(self, pool: BlockPool, size: int, stream: int, stack: int) -> Block | None:
        candidate = self.find_expandable_block(pool, size, stream)
        if not candidate.mapped and not self.map_block(candidate, min(candidate.size, size), stack):
            return None
        while candidate.size < size:
            nxt = candidate.next
            if not self.map_block(nxt, min(size - candidate.size, nxt.size), stack):
                return None
            candidate = nxt
        pool.remove(candidate)
        return candidate

    def find_expandable_block(self, pool: BlockPool, size: int, stream: int, create: bool = True) -> Block | None:
        """The lowest-address run of free and unmapped blocks on this stream that can hold `size` bytes."""
        s = stream_key(stream)
        keys = pool.unmapped_keys
        i = bisect_left_unmapped(keys, s)
        while i < len(keys) and keys[i][0] == s:
            c = pool.unmapped[keys[i]]
            if _allocatable(c.prev):
                c = c.prev
            if _room(c, size) >= size:
                return c
            i += 1
        if not create:
            return None
        base, pages = self._place_reservation(pool.small, stream)
        return self.reserve(pool, stream, base, pages)

    def reserve(self, pool: BlockPool, stream: int, base: int, pages: int) -> Block:
        """A new expandable segment: `pages` pages of address space at `base`, one unmapped block of the pool."""
        es = self.new_expandable(pool.small, stream, base, pages)
        block = Block(es.base, es.size, stream, pool, mapped=False, es=es)
        pool.insert_unmapped(block)
        return block

    def new_expandable(self, small: bool, stream: int, base: int, pages: int) -> ExpandableSegment:
        """The reservation of a new expandable segment, with no blocks yet (see `reserve`)."""
        es = ExpandableSegment(base, page_size(small), pages, stream)
        self._ranges[es.base] = es.size
        self.expandable.append(es)
        return es

    def reservation_default(self, small: bool) -> int:
        """Bytes PyTorch reserves per expandable segment: 1.125 × the device, when its size is known."""
        total = self.device_total or self.capacity
        return reservation_bytes(total, small) if total else UNKNOWN_DEVICE_RESERVATION

    def _place_reservation(self, small: bool, stream: int) -> tuple[int, int]:
        """(base, pages) of a new reservation: where the recorded driver put this pool's, if that range is
        free; else right after the highest reservation, as the driver lays them out; else below all memory."""
        page = page_size(small)
        default = self.reservation_default(small)
        for r in self.reservations.of(small, stream):
            pages = r.pages(default)
            if not self._overlaps(r.base, pages * page):
                return r.base, pages
        pages = default // page
        top = max((es.base + es.size for es in self.expandable), default=None)
        if top is not None:
            base = -(-top // page) * page
            if not self._overlaps(base, pages * page):
                return base, pages
        low = min(self._ranges, default=self._next_va)
        return (low - pages * page - page) // page * page, pages

    def map_block(self, to_map: Block, size: int, stack: int = -1) -> bool:
        es = to_map.es
        begin, end = es.pages_to_map(to_map.addr, size)
        start, mapped = es.range_of(begin, end)
        if self.capacity is not None and self.reserved + mapped > self.capacity:
            return False
        if self.allowed is not None and self.reserved + mapped > self.allowed:
            return False
        es.mapped.update(range(begin, end))
        pool = to_map.pool
        pool.remove_unmapped(to_map)
        to_map.mapped = True
        if mapped < to_map.size:
            rest = Block(start + mapped, to_map.size - mapped, to_map.stream, pool, mapped=False, es=es)
            rest.splice(to_map, to_map.next)
            pool.insert_unmapped(rest)
            to_map.size = mapped
        self._try_merge(to_map, to_map.prev)
        self._try_merge(to_map, to_map.next)
        pool.insert(to_map)
        self.reserved += mapped
        self.bump_peaks()
        self.num_device_alloc += 1
        self._trace("segment_map", start, mapped, to_map.stream, stack)
        return True

    def unmap_block(self, block: Block, lo: int | None = None, hi: int | None = None) -> int:
        """Unmap the whole pages inside a free expandable block (or inside [lo, hi) of it)."""
        es, pool = block.es, block.pool
        lo = block.addr if lo is None else lo
        hi = block.addr + block.size if hi is None else hi
        begin, end = es.pages_to_unmap(lo, hi - lo)
        if begin >= end:
            return 0
        start, size = es.range_of(begin, end)
        pool.remove(block)
        before = start - block.addr
        if before > 0:
            head = Block(block.addr, before, block.stream, pool, True, es)
            head.splice(block.prev, block)
            pool.insert(head)
        after = block.size - before - size
        if after > 0:
            tail = Block(start + size, after, block.stream, pool, True, es)
            tail.splice(block, block.next)
            pool.insert(tail)
        block.addr, block.size, block.mapped = start, size, False
        es.mapped.difference_update(range(begin, end))
        self._try_merge(block, block.prev)
        self._try_merge(block, block.next)
        pool.insert_unmapped(block)
        self.reserved -= size
        self.num_device_free += 1
        self._trace("segment_unmap", start, size, block.stream, -1)
        return size


def bisect_left_unmapped(keys: list[tuple[int, int]], s: int) -> int:
    return bisect_left(keys, (s, -1))


def _allocatable(b: Block | None) -> bool:
    return b is not None and not b.allocated and not b.pending


def _room(b: Block | None, size: int) -> int:
    total = 0
    while total < size and _allocatable(b):
        total += b.size
        b = b.next
    return total
