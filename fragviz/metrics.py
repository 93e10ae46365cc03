"""Usage and fragmentation figures of a set of segments (the final state, or a replayed past state)."""
from __future__ import annotations

from dataclasses import dataclass

from fragviz.model import BlockState, Segment


@dataclass(frozen=True)
class StateFigures:
    """Figures of segments taken together: for a device, every pool at once (`pool_figures` keeps them apart).

    `allocated_bytes` covers active blocks: allocated, and freed but waiting for other streams (pending).
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

    @property
    def fragmentation(self) -> float:
        return fragmentation(self.free_bytes, self.largest_free_block)


def fragmentation(free_bytes: int, largest_free_block: int) -> float:
    """1 - largest free block / free bytes: 0 when all cached free memory is one gap, near 1 when it is dust."""
    if free_bytes <= 0:
        return 0.0
    return 1.0 - largest_free_block / free_bytes


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
    return StateFigures(reserved, allocated, requested, free, n_free, largest, len(segments), n_blocks, n_alloc)


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

    @property
    def fragmentation(self) -> float:
        return fragmentation(self.free_bytes, self.largest_free_block)

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
                       fig.largest_free_block, fig.segments, pending.bytes, pending.blocks)


def pending_frees(segments: list[Segment]) -> PendingFrees:
    """Bytes and blocks freed by the program but waiting for other streams' work (active_pending_free)."""
    sizes = [b.size for s in segments for b in s.blocks if b.state is BlockState.ACTIVE_PENDING_FREE]
    return PendingFrees(sum(sizes), len(sizes))


def has_private_pools(segments: list[Segment]) -> bool:
    return any(pool_key(s) != GENERAL_POOL for s in segments)
