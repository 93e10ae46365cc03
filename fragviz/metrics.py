"""Usage and fragmentation figures of a set of segments (the final state, or a replayed past state)."""
from __future__ import annotations

from dataclasses import dataclass

from fragviz.model import BlockState, Segment


@dataclass(frozen=True)
class StateFigures:
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
