"""How a recorded trace groups into mallocs: an `alloc` and the segment events right before it (its
cudaMalloc or expandable maps, and the releases of a retry) are one call of the allocator."""
from __future__ import annotations

from fragviz.model import ALLOC, SEGMENT_ALLOC, SEGMENT_FREE, SEGMENT_MAP, SEGMENT_UNMAP

SEGMENT_ACTIONS = (SEGMENT_ALLOC, SEGMENT_FREE, SEGMENT_MAP, SEGMENT_UNMAP)
NEW_MEMORY = (SEGMENT_ALLOC, SEGMENT_MAP)
RELEASES = (SEGMENT_FREE, SEGMENT_UNMAP)


def malloc_groups(act: list[int]) -> dict[int, int]:
    """alloc event index -> the index of the first event of its malloc (the alloc itself if none before it)."""
    groups = {}
    for a, x in enumerate(act):
        if x == ALLOC:
            g = a
            while g > 0 and act[g - 1] in SEGMENT_ACTIONS:
                g -= 1
            groups[a] = g
    return groups
