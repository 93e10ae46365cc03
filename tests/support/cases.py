"""Small traces worked out by hand, shared by the replay's, the report's and the pools' tests."""
from __future__ import annotations

from tests.support.helpers import MiB, block, ev, segment, snapshot

S = 0x7F00_0000_0000  # a segment address


def case_a() -> dict:
    """One 20 MiB segment: three allocs, two frees; the trace starts from an empty device."""
    final = segment(S, [block(S, 4 * MiB), block(S + 4 * MiB, 16 * MiB, "inactive", 0)])
    trace = [
        ev("segment_alloc", S, 20 * MiB),
        ev("alloc", S, 4 * MiB),
        ev("alloc", S + 4 * MiB, 3 * MiB - 100),
        ev("alloc", S + 7 * MiB, 2 * MiB),
        ev("free_requested", S + 4 * MiB, 3 * MiB - 100),
        ev("free_completed", S + 4 * MiB, 3 * MiB - 100),
        ev("free_requested", S + 7 * MiB, 2 * MiB),
        ev("free_completed", S + 7 * MiB, 2 * MiB),
    ]
    return snapshot([final], trace)
