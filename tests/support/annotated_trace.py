"""A small timed trace with record_function ranges (external_annotations), in PyTorch's own format.

No real file here has more than two named ranges, so this one is written by hand with figures worked out
below: 14 events, 1 ms apart, with a 2 s pause before event 10 (a sparse stretch for the "by time" axis), and
8 annotations, 4 START/END pairs, one name used twice.
"""
from __future__ import annotations

from tests.support.helpers import MiB, block, ev, segment, snapshot

BASE = 0x7F00_0000_0000
T0 = 1_700_000_000_000_000  # microseconds, as time_us is recorded
PAUSE_US = 2_000_000


def event_time(i: int) -> int:
    return T0 + 1000 * i + (PAUSE_US if i >= 10 else 0)


ACTIONS = [("segment_alloc", 0, 64), ("alloc", 0, 8), ("alloc", 8, 16), ("free_requested", 0, 8),
           ("free_completed", 0, 8), ("alloc", 0, 4), ("free_requested", 8, 16), ("free_completed", 8, 16),
           ("alloc", 8, 32), ("free_requested", 0, 4), ("free_completed", 0, 4), ("alloc", 0, 2),
           ("free_requested", 8, 32), ("free_completed", 8, 32)]

# (name, START after event, END after event, microseconds after that event): a range starting 500 µs after
# event i covers the states from i + 1 (events 0..i done) up to the state before the first event after its END.
RANGES = [("forward", 1, 4, 500), ("backward", 5, 8, 500), ("Optimizer.step#AdamW.step", 9, 11, 500),
          ("forward", 12, 13, 200)]
# worked out by hand from the above: (name, first state, state at the END), seconds since event 0
SPANS_BY_EVENT = [("forward", 2, 5), ("backward", 6, 9), ("Optimizer.step#AdamW.step", 10, 12), ("forward", 13, 14)]
SPANS_BY_TIME = [(0.0015, 0.0045), (0.0055, 0.0085), (0.0095, 2.0115), (2.0122, 2.0132)]


def annotations() -> list[dict]:
    out = []
    for name, first, last, after in RANGES:
        out.append({"stage": "START", "name": name, "device": 0, "time_us": event_time(first) + after})
        out.append({"stage": "END", "name": name, "device": 0, "time_us": event_time(last) + after})
    return out


def annotated_snapshot() -> dict:
    trace = [ev(action, BASE + off * MiB, size * MiB, time_us=event_time(i))
             for i, (action, off, size) in enumerate(ACTIONS)]
    final = segment(BASE, [block(BASE, 2 * MiB), block(BASE + 2 * MiB, 62 * MiB, "inactive", 0)])
    return snapshot([final], trace, external_annotations=annotations())
