"""A faithful model of one device of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp).

`DeviceAllocator.malloc/free/empty_cache` follow PyTorch's code path (reference C.4-C.13): rounding, the
small and large pools, best-fit search by (stream, size, address), splitting, oversize rules, merging on
free, deferred frees, the recovery order on a failed device allocation, garbage collection under a memory
fraction, and expandable segments. A device capacity makes device allocations fail as on a full GPU.
Every action is recorded as a trace entry in PyTorch's own format.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fragviz.allocator.blocks import Block, BlockPool, ExpandableSegment, stream_key
from fragviz.allocator.config import AllocatorSettings
from fragviz.allocator.expandable import ExpandableSegments
from fragviz.allocator.reservations import ReservationPlan
from fragviz.allocator.rules import ROUND_LARGE, SMALL_SIZE, allocation_size, round_size, should_split

VA_ALIGN = ROUND_LARGE  # where PyTorch's driver reservations line up


@dataclass
class Peaks:
    reserved: int = 0
    active: int = 0
    requested: int = 0


class DeviceAllocator(ExpandableSegments):
    """One device's allocator state. `capacity` is what PyTorch can reserve (None: unlimited)."""

    def __init__(self, settings: AllocatorSettings, capacity: int | None = None, device: int = 0,
                 record: bool = True, va_base: int = 0x7F00_0000_0000) -> None:
        self.settings = settings
        self.capacity = capacity
        self.device = device
        self.record = record
        self.large = BlockPool(False)
        self.small = BlockPool(True)
        self.private: dict[tuple[int, int], tuple[BlockPool, BlockPool]] = {}
        self.active: dict[int, Block] = {}
        self.expandable: list[ExpandableSegment] = []
        self.reserved = 0
        self.active_bytes = 0
        self.requested = 0
        self.peaks = Peaks()
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_device_alloc = 0  # driver allocations and frees (segments, expandable mappings), as memory_stats()
        self.num_device_free = 0
        self.trace: list[dict[str, Any]] = []
        self._next_va = va_base
        self.event = 0  # index of the workload event being served, stamped on trace entries
        # Where the driver put device allocations is not the allocator's choice, but it decides ties in
        # best fit (equal sizes go to the lower address). Recorded cudaMalloc addresses, by workload event,
        # are reused when the simulation asks for the same size there; otherwise addresses grow downward
        # from the lowest one in use, as CUDA's own address allocation mostly does.
        self.address_hints: dict[int, list[tuple[int, int]]] = {}
        self.clock = None  # a callable giving microseconds since the epoch, stamped on trace entries
        self._ranges: dict[int, int] = {}  # start -> size of every segment and reservation in use
        # Where the recorded driver put expandable reservations (inferred from the trace): new reservations
        # go there when they fit, so a simulation under the recorded settings lays memory out as recorded.
        self.reservations = ReservationPlan([])
        self.device_total: int | None = None  # the device's memory, where known (else capacity stands in)

    # -- public API ----------------------------------------------------------------------------------
    @property
    def allowed(self) -> int | None:
        if self.settings.memory_fraction is None or self.capacity is None:
            return None
        return int(self.settings.memory_fraction * self.capacity)

    def malloc(self, orig_size: int, stream: int = 0, stack: int = -1, pool_id=None) -> Block | None:
        """Serve a request of `orig_size` bytes; None is an OOM (an `oom` trace entry is recorded)."""
        size = round_size(orig_size, self.settings)
        pool = self.pool_for(size, pool_id)
        alloc_size = allocation_size(size)
        block = self.get_free_block(pool, size, stream)
        if block is None:
            if self.allowed is not None and self.settings.garbage_collection_threshold > 0:
                self._garbage_collect()
            block = (self._alloc_block(pool, size, alloc_size, stream, False, stack)
                     or (self._release_available_cached_blocks(pool, size, stream)
                         and self._alloc_block(pool, size, alloc_size, stream, False, stack))
                     or (self.release_cached_blocks()
                         and self._alloc_block(pool, size, alloc_size, stream, True, stack)))
        if not block:
            self.num_ooms += 1
            self._trace("oom", None, size, stream, stack, device_free=self.device_free())
            return None
        split = should_split(block.size, size, pool.small, self.settings)
        return self.alloc_found_block(block, size, orig_size, split, stack)

    def free(self, block: Block, pending: bool = False) -> None:
        """The user frees `block`; with `pending` it waits on stream events until `complete` is called."""
        block.allocated = False
        self._trace("free_requested", block.addr, block.requested, block.stream, block.stack)
        if pending:
            block.pending = True
        else:
            self.free_block(block)

    def complete(self, block: Block) -> None:
        """The stream events of a pending free have completed: the block returns to its pool."""
        if block.pending:
            block.pending = False
            self.free_block(block)

    def empty_cache(self) -> None:
        self.release_cached_blocks()

    def device_free(self) -> int:
        return max(0, self.capacity - self.reserved) if self.capacity is not None else 0

    def pool_for(self, size: int, pool_id=None) -> BlockPool:
        if pool_id is not None and pool_id in self.private:
            small, large = self.private[pool_id]
            return small if size <= SMALL_SIZE else large
        return self.small if size <= SMALL_SIZE else self.large

    # -- the free-block search (reference C.7) -------------------------------------------------------
    def get_free_block(self, pool: BlockPool, size: int, stream: int, remove: bool = True) -> Block | None:
        if remove and self.allowed is not None and self.settings.garbage_collection_threshold > 0:
            pool.get_free_blocks_call_count += 1
        keys, s = pool.keys, stream_key(stream)
        i = pool.lower_bound(stream, size)
        if i == len(keys) or keys[i][0] != s:
            return None
        block = pool.by_key[keys[i]]
        if block.es is not None:
            if self.settings.expandable_segments:
                i = self._prefer_unexpandable(pool, i, s)
            else:
                i += 1
                while i < len(keys) and keys[i][0] == s and pool.by_key[keys[i]].es is not None:
                    i += 1
                if i == len(keys) or keys[i][0] != s:
                    return None
            block = pool.by_key[keys[i]]
        max_split = self.settings.max_split_size
        if max_split is not None:
            if size < max_split and block.size >= max_split:
                return None
            if size >= max_split and block.size >= size + self.settings.max_non_split_rounding:
                return None
        if remove:
            pool.remove(block)
        return block

    def _prefer_unexpandable(self, pool: BlockPool, i: int, s: int) -> int:
        # Best fit counts an expandable block by the size it could grow to (itself plus an unmapped tail).
        def grow(b: Block) -> int:
            return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)

        keys = pool.keys
        while (pool.by_key[keys[i]].es is not None and i + 1 < len(keys) and keys[i + 1][0] == s
               and grow(pool.by_key[keys[i + 1]]) < grow(pool.by_key[keys[i]])):
            i += 1
        return i

    # -- handing out a block (reference C.4 step 10) -------------------------------------------------
    def alloc_found_block(self, block: Block, size: int, orig_size: int, split: bool, stack: int) -> Block:
        if split:
            remaining = block
            block = Block(remaining.addr, size, remaining.stream, remaining.pool, True, remaining.es)
            block.splice(remaining.prev, remaining)
            remaining.addr += size
            remaining.size -= size
            remaining.pool.insert(remaining)
        block.allocated = True
        block.requested = orig_size
        block.stack = stack
        self._trace("alloc", block.addr, orig_size, block.stream, stack)
        self.active[block.addr] = block
        self.active_bytes += block.size
        self.requested += orig_size
        self.bump_peaks()
        return block

    # -- freeing (reference C.11) --------------------------------------------------------------------
    def free_block(self, block: Block) -> None:
        self._trace("free_completed", block.addr, block.requested, block.stream, block.stack)
        del self.active[block.addr]
        self.active_bytes -= block.size
        self.requested -= block.requested
        for neighbour in (block.prev, block.next):
            self._try_merge(block, neighbour)
        block.pool.insert(block)
        block.gc_base = block.pool.get_free_blocks_call_count

    def _try_merge(self, dst: Block, src: Block | None) -> int:
        if src is None or src.allocated or src.pending or src.mapped != dst.mapped:
            return 0
        if src.mapped:
            src.pool.remove(src)
        else:
            src.pool.remove_unmapped(src)
        if dst.prev is src:
            dst.addr = src.addr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    # -- new device memory (reference C.9, C.12) -----------------------------------------------------
    def _alloc_block(self, pool: BlockPool, size: int, alloc_size: int, stream: int, retry: bool,
                     stack: int) -> Block | None:
        if retry:
            self.num_alloc_retries += 1
        allowed = self.allowed
        if allowed is not None and self.reserved + alloc_size > allowed:
            return None
        if self.settings.expandable_segments and pool.pool_id is None:
            return self._try_allocate_expandable(pool, size, stream, stack)
        if self.capacity is not None and self.reserved + alloc_size > self.capacity:
            return None
        return self.new_segment(self._take_va(alloc_size), alloc_size, stream, pool, stack)

    def new_segment(self, addr: int, size: int, stream: int, pool: BlockPool, stack: int = -1) -> Block:
        """A cudaMalloc'd segment: one free block, not yet in the pool."""
        block = Block(addr, size, stream, pool)
        self.reserved += size
        self._ranges[addr] = size
        self.bump_peaks()
        self.num_device_alloc += 1
        self._trace("segment_alloc", addr, size, stream, stack)
        return block

    def _take_va(self, size: int) -> int:
        hints = self.address_hints.get(self.event)
        if hints:
            for i, (hint_size, addr) in enumerate(hints):
                if hint_size == size and not self._overlaps(addr, size):
                    del hints[i]
                    return addr
        low = min(self._ranges, default=self._next_va)
        return (low - size - VA_ALIGN) // VA_ALIGN * VA_ALIGN

    def claim(self, addr: int, size: int) -> None:
        """Note that [addr, addr + size) is in use (a segment loaded from a snapshot), so nothing is placed there."""
        self._ranges[addr] = size

    def _overlaps(self, addr: int, size: int) -> bool:
        return any(a < addr + size and addr < a + n for a, n in self._ranges.items())

    # -- giving memory back (reference C.10, C.13) ---------------------------------------------------
    def release_cached_blocks(self) -> bool:
        for block in [b for b in self.active.values() if b.pending]:
            self.complete(block)  # synchronize_and_free_events
        for pool in (self.large, self.small):
            self._release_blocks(pool)
        return True

    def _release_blocks(self, pool: BlockPool) -> None:
        to_unmap = []
        for block in pool.free_blocks():
            if block.es is not None:
                to_unmap.append(block)
            elif block.prev is None and block.next is None:
                self.release_block(block)
        for block in to_unmap:
            self.unmap_block(block)
            if block.prev is None and block.next is None and not block.mapped:
                pool.remove_unmapped(block)
                self.expandable.remove(block.es)
                self._ranges.pop(block.es.base, None)

    def release_block(self, block: Block) -> None:
        """cudaFree of a whole free segment."""
        self.num_device_free += 1
        self._trace("segment_free", block.addr, block.size, block.stream, -1)
        self.reserved -= block.size
        self._ranges.pop(block.addr, None)
        block.pool.remove(block)

    def _release_available_cached_blocks(self, pool: BlockPool, size: int, stream: int) -> bool:
        max_split = self.settings.max_split_size
        if max_split is None:
            return False
        key_size = max(size, max_split)
        keys, s = pool.keys, stream_key(stream)
        i = pool.lower_bound(stream, key_size)
        if i < len(keys) and keys[i][0] == s and pool.by_key[keys[i]].es is None:
            self.release_block(pool.by_key[keys[i]])
            return True
        released, j = 0, i - 1
        while released < key_size and j >= 0 and keys[j][0] == s and keys[j][1] >= max_split:
            block = pool.by_key[keys[j]]
            j -= 1
            if block.es is None:
                released += block.size
                self.release_block(block)
        return released >= key_size

    def _garbage_collect(self) -> None:
        threshold = int(self.settings.garbage_collection_threshold * self.allowed)
        if self.reserved <= threshold:
            return
        target, reclaimed = self.reserved - threshold, 0
        pool = self.large
        candidates = [b for b in pool.free_blocks() if not b.is_split and b.es is None]
        ages = {id(b): pool.get_free_blocks_call_count - b.gc_base for b in candidates}
        total_age, count = float(sum(ages.values())), len(candidates)
        freed = True
        while reclaimed < target and freed and count > 0:
            threshold_age, freed = total_age / count, False
            for block in list(candidates):
                if ages[id(block)] >= threshold_age:
                    freed = True
                    reclaimed += block.size
                    total_age -= ages[id(block)]
                    count -= 1
                    candidates.remove(block)
                    self.release_block(block)

    # -- bookkeeping ---------------------------------------------------------------------------------
    def bump_peaks(self) -> None:
        p = self.peaks
        if self.reserved > p.reserved:
            p.reserved = self.reserved
        if self.active_bytes > p.active:
            p.active = self.active_bytes
        if self.requested > p.requested:
            p.requested = self.requested

    def _trace(self, action: str, addr: int | None, size: int, stream: int, stack: int, **extra: int) -> None:
        if not self.record:
            return
        entry: dict[str, Any] = {"action": action, "size": size, "stream": stream, "stack": stack,
                                 "event": self.event}
        if addr is not None:
            entry["addr"] = addr
        entry.update(extra)
        if self.clock is not None:
            entry["time_us"] = self.clock()
        self.trace.append(entry)

    def largest_free_block(self, private_pools: bool = False) -> int:
        """The largest free block a general request can get (private pools' blocks serve only their own); with
        `private_pools`, of every pool, as the recorded timeline counts it."""
        pools = self.all_pools() if private_pools else (self.large, self.small)
        return max((pool.largest_free() for pool in pools), default=0)

    def free_bytes(self) -> int:
        """Cached free bytes of the general pool (see `largest_free_block`)."""
        return sum(k[1] for pool in (self.large, self.small) for k in pool.keys)

    def non_releasable_bytes(self) -> int:
        """Free bytes of every pool that `release_cached_blocks` could not give back (fragviz.model.metrics)."""
        return sum(pool.non_releasable for pool in self.all_pools())

    def inactive_split_bytes(self) -> int:
        """Free bytes in blocks that share their segment with others: what memory_stats calls inactive_split."""
        return sum(b.size for pool in self.all_pools() for b in pool.by_key.values() if b.is_split)

    def pending_bytes(self) -> int:
        """Bytes in blocks freed by the program but waiting on other streams (active_pending_free)."""
        return sum(b.size for b in self.active.values() if b.pending)

    def all_pools(self) -> list[BlockPool]:
        """The general pool's small and large pools, then every private pool's."""
        pools = [self.large, self.small]
        for pair in self.private.values():
            pools.extend(pair)
        return pools

    def segment_heads(self) -> list[Block]:
        """First block of every segment (every contiguous mapped range, for expandable segments)."""
        blocks = list(self.active.values())
        for pool in self.all_pools():
            blocks.extend(pool.by_key.values())
        heads = [b for b in blocks if b.prev is None or not b.prev.mapped]
        return sorted(heads, key=lambda b: b.addr)
