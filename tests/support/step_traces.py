"""Real snapshots with step markers added, for the compare page's step alignment.

No real file here marks steps (at most one `snapshot` action, no annotation used twice), so these take a real
trace and add markers where the test chooses them: `snapshot` actions inserted into the trace, or a
record_function range named STEP started between two events. Each builder returns the states its markers
fall on, worked out from where they were put, not by fragviz.
"""
from __future__ import annotations

import pickle
from typing import Any

from tests.support.helpers import real, write_pickle

STEP = "train_step"


def load(name: str) -> dict[str, Any]:
    with open(real(name), "rb") as fh:
        return pickle.load(fh)


def with_snapshot_actions(name: str, after: list[int], path: str) -> tuple[str, list[int]]:
    """`name` with a `snapshot` action inserted after each of device 0's events `after` (original indices,
    ascending); the states right after the inserted actions."""
    data = load(name)
    trace = data["device_traces"][0]
    out, states = [], []
    for i, event in enumerate(trace):
        out.append(event)
        if i in after:
            out.append({"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "frames": []}
                       | ({"time_us": event["time_us"]} if "time_us" in event else {}))
            states.append(len(out))  # the state after the snapshot action: every event so far done
    data["device_traces"][0] = out
    return write_pickle(path, data), states


def with_step_annotations(name: str, starts: list[int], path: str) -> tuple[str, list[int]]:
    """`name` (a timed trace) with a STEP range starting 1 µs after event i - 1 for each i in `starts`, each
    ending where the next starts, keeping the file's own annotations; the states the ranges start at: i, as
    only events 0..i - 1 come before (each i is chosen where event i comes 2 µs or more after event i - 1)."""
    data = load(name)
    times = [e["time_us"] for e in data["device_traces"][0]]
    assert all(times[i] - times[i - 1] >= 2 for i in starts), "a start must fall strictly between two events"
    begin = [times[i - 1] + 1 for i in starts]
    notes = list(data.get("external_annotations") or [])
    for b, e in zip(begin, begin[1:] + [times[-1]]):
        notes += [{"stage": "START", "name": STEP, "device": 0, "time_us": b},
                  {"stage": "END", "name": STEP, "device": 0, "time_us": e}]
    data["external_annotations"] = notes
    return write_pickle(path, data), list(starts)


def step_starts(name: str, count: int) -> list[int]:
    """`count` events spread over a timed trace, each 2 µs or more after the one before it."""
    times = [e["time_us"] for e in load(name)["device_traces"][0]]
    n = len(times)
    out = []
    for k in range(count):
        i = max(1, (k * n) // count + n // (2 * count))
        while times[i] - times[i - 1] < 2:
            i += 1
        out.append(i)
    return out
