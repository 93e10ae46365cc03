"""Usage and fragmentation figures of a set of segments (the final state, or a replayed past state).

The headline figure is `fragmentation = non_releasable_bytes / reserved_bytes`: the share of reserved memory
that is free but that `torch.cuda.empty_cache()` could not give back, because it is stuck between live
blocks. It is what PyTorch's `memory_stats()` calls `inactive_split_bytes` and `memory_summary()` calls
"Non-releasable memory", extended to expandable segments:

- an ordinary segment (one cudaMalloc) is released only whole, so all of its free bytes are stuck while it
  holds an active block (allocated, or freed but waiting for other streams), and none are once it holds none;
- an expandable segment is released page by page: `release_cached_blocks` unmaps the pages wholly inside each
  free block (2 MiB pages in the small pool, 20 MiB in the large), so only the partial pages at a free
  block's ends are stuck (`ExpandableSegment::unmap` in CUDACachingAllocator.cpp rounds in to whole pages).

Whole free segments are not counted: the allocator frees them before it ever fails a request. The older figure,
`1 - largest free block / free bytes`, is kept as `free_scatter`: how scattered the cached free memory is,
whole free segments included. It reads high on healthy runs and is never called fragmentation.
"""
from __future__ import annotations

from dataclasses import dataclass

from fragviz.base.units import LARGE_BUFFER, SMALL_BUFFER
from fragviz.model import BlockState, Segment


def expandable_page(pool: str) -> int:
    """The page an expandable segment of this pool kind maps and unmaps: 2 MiB (small pool), 20 MiB (large)."""
    return SMALL_BUFFER if pool == "small" else LARGE_BUFFER


def stuck_in_gap(lo: int, hi: int, base: int, page: int) -> int:
    """Bytes of the free range [lo, hi) of an expandable segment that releasing cannot unmap: the partial
    pages at its ends (pages start at `base` + k * `page`)."""
    first = lo + (-(lo - base) % page)  # the first page boundary at or after lo
    last = hi - (hi - base) % page  # the last page boundary at or before hi
    return hi - lo - max(0, last - first)


def segment_non_releasable(segment: Segment) -> int:
    """Free bytes of one segment that `torch.cuda.empty_cache()` could not give back."""
    if segment.is_expandable:
        page = expandable_page(segment.pool)
        return sum(stuck_in_gap(b.address, b.address + b.size, segment.address, page)
                   for b in segment.blocks if b.state is BlockState.INACTIVE)
    if not any(b.state.is_active for b in segment.blocks):
        return 0
    return sum(b.size for b in segment.blocks if b.state is BlockState.INACTIVE)


def non_releasable_bytes(segments: list[Segment]) -> int:
    return sum(segment_non_releasable(s) for s in segments)


def fragmentation(non_releasable: int, reserved: int) -> float:
    """Non-releasable bytes / reserved bytes: 0 when every cached free byte could be given back (or nothing is
    reserved), near 1 when reserved memory is free but stuck between live blocks."""
    if reserved <= 0:
        return 0.0
    return min(1.0, max(0.0, non_releasable / reserved))


def free_scatter(free_bytes: int, largest_free_block: int) -> float:
    """1 - largest free block / free bytes: 0 when all cached free memory is one gap, near 1 when it is dust.

    A secondary figure: whole free segments, which the allocator releases before it fails, count as scatter."""
    if free_bytes <= 0:
        return 0.0
    return 1.0 - largest_free_block / free_bytes


@dataclass(frozen=True)
class StateFigures:
    """Figures of segments taken together: for a device, every pool at once (`pool_figures` keeps them apart).

    `allocated_bytes` covers active blocks: allocated, and freed but waiting for other streams (pending).
    `largest_free_block` is the largest request the cache can serve now without asking the driver.
    """

    reserved_bytes: int
    allocated_bytes: int
    requested_bytes: int
    free_bytes: int
    free_blocks: int
    largest_free_block: int
    segments: int
    blocks: int
    allocations: int
    non_releasable_bytes: int = 0

    @property
    def fragmentation(self) -> float:
        return fragmentation(self.non_releasable_bytes, self.reserved_bytes)

    @property
    def free_scatter(self) -> float:
        return free_scatter(self.free_bytes, self.largest_free_block)


def state_figures(segments: list[Segment]) -> StateFigures:
    reserved = allocated = requested = free = largest = n_free = n_blocks = n_alloc = 0
    for seg in segments:
        reserved += seg.total_size
        for b in seg.blocks:
            n_blocks += 1
            if b.state is BlockState.INACTIVE:
                free += b.size
                n_free += 1
                largest = max(largest, b.size)
            else:
                n_alloc += 1
                allocated += b.size
                requested += b.requested_size
    return StateFigures(reserved, allocated, requested, free, n_free, largest, len(segments), n_blocks, n_alloc,
                        non_releasable_bytes(segments))


# The default pools' id. Segments of snapshots from before pool ids (pool_id None) belong to them too.
GENERAL_POOL: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class PoolFigures:
    """One memory pool of a device: the general pool (0, 0), or a private pool of a CUDA graph or a
    torch.cuda.MemPool, whose memory only requests made inside that graph or pool can use.

    `allocated_bytes` covers active blocks (pending frees included); reserved = allocated + free.
    """

    pool: tuple[int, int]
    reserved_bytes: int
    allocated_bytes: int
    free_bytes: int
    free_blocks: int
    largest_free_block: int
    segments: int
    pending_free_bytes: int = 0
    pending_free_blocks: int = 0
    non_releasable_bytes: int = 0

    @property
    def fragmentation(self) -> float:
        return fragmentation(self.non_releasable_bytes, self.reserved_bytes)

    @property
    def free_scatter(self) -> float:
        return free_scatter(self.free_bytes, self.largest_free_block)

    @property
    def is_private(self) -> bool:
        return self.pool != GENERAL_POOL


@dataclass(frozen=True)
class PendingFrees:
    """Blocks the program freed that wait for work on other streams (state active_pending_free)."""

    bytes: int
    blocks: int


def pool_key(segment: Segment) -> tuple[int, int]:
    """The pool a segment belongs to; the general pool for segments that record none."""
    return segment.pool_id if segment.pool_id is not None else GENERAL_POOL


def pool_figures(segments: list[Segment]) -> list[PoolFigures]:
    """Figures of each pool the segments belong to: the general pool first (when it has segments), then
    private pools by id."""
    by_pool: dict[tuple[int, int], list[Segment]] = {}
    for seg in segments:
        by_pool.setdefault(pool_key(seg), []).append(seg)
    order = sorted(by_pool, key=lambda p: (p != GENERAL_POOL, p))
    return [_one_pool(p, by_pool[p]) for p in order]


def pool_of(segments: list[Segment], pool: tuple[int, int] = GENERAL_POOL) -> PoolFigures:
    """The figures of one pool (all zeros when no segment belongs to it): for a request made in that pool,
    its cached free memory and largest free block are the ones that count."""
    return _one_pool(pool, [s for s in segments if pool_key(s) == pool])


def _one_pool(pool: tuple[int, int], segments: list[Segment]) -> PoolFigures:
    fig = state_figures(segments)
    pending = pending_frees(segments)
    return PoolFigures(pool, fig.reserved_bytes, fig.allocated_bytes, fig.free_bytes, fig.free_blocks,
                       fig.largest_free_block, fig.segments, pending.bytes, pending.blocks, fig.non_releasable_bytes)


def pending_frees(segments: list[Segment]) -> PendingFrees:
    """Bytes and blocks freed by the program but waiting for other streams' work (active_pending_free)."""
    sizes = [b.size for s in segments for b in s.blocks if b.state is BlockState.ACTIVE_PENDING_FREE]
    return PendingFrees(sum(sizes), len(sizes))
