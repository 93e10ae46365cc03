"""The caching allocator's sizing rules (reference C.1, C.5, C.6, C.8): pure functions of sizes and settings."""
from __future__ import annotations

from fragviz.allocator.config import AllocatorSettings
from fragviz.base.units import (LARGE_BUFFER, MIN_BLOCK, MIN_LARGE_ALLOC, ROUND_LARGE, SMALL_BUFFER,  # noqa: F401
                                SMALL_SIZE)


def round_size(size: int, settings: AllocatorSettings) -> int:
    """The block size PyTorch rounds a request of `size` bytes to."""
    if size < MIN_BLOCK:
        return MIN_BLOCK
    divisions = settings.divisions_for(size)
    if divisions > 1 and size > MIN_BLOCK * divisions:
        return _roundup_power2_next_division(size, divisions)
    return -(-size // MIN_BLOCK) * MIN_BLOCK


def _roundup_power2_next_division(size: int, divisions: int) -> int:
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor // divisions
    return -(-size // step) * step


def is_small(rounded: int) -> bool:
    return rounded <= SMALL_SIZE


def allocation_size(rounded: int) -> int:
    """The cudaMalloc size of a new segment for a rounded request."""
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-rounded // ROUND_LARGE) * ROUND_LARGE


def should_split(block_size: int, rounded: int, small_pool: bool, settings: AllocatorSettings) -> bool:
    """Whether a free block of `block_size` is split when it serves a rounded request."""
    remaining = block_size - rounded
    if small_pool or settings.expandable_segments:
        return remaining >= MIN_BLOCK
    max_split = settings.max_split_size
    return (max_split is None or rounded < max_split) and remaining > SMALL_SIZE
