"""The first picture of a snapshot, before its replay: requested and reserved bytes over time.

Both are sums the trace states outright (an alloc adds its request, a completed free takes it away; a segment
event adds or takes its size), so once the trace is parsed they are a cumulative sum away, anchored at the
final state, in a fraction of the replay's time. Allocated bytes (rounded block sizes), gaps and
fragmentation need the replay and fill in when it completes. What the preview shows is an envelope: each
of its points is the highest value in its stretch of events, so no peak is lost to the sampling.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fragviz.model.metrics import state_figures
from fragviz.model import (ALLOC, FREE_COMPLETED, SEGMENT_ALLOC, SEGMENT_FREE, SEGMENT_MAP, SEGMENT_UNMAP, Segment,
                           Snapshot)

POINTS = 600  # points per series: a page's width of detail


@dataclass(frozen=True)
class DevicePreview:
    device: int
    events: int
    event: list[int]  # the last event of each point's stretch (states after that many events)
    requested: list[int]  # the highest requested bytes in the stretch
    reserved: list[int]

    def as_dict(self) -> dict:
        return {"device": self.device, "events": self.events, "event": self.event, "requested": self.requested,
                "reserved": self.reserved}


def totals_over_time(action: np.ndarray, size: np.ndarray, final: list[Segment]) -> tuple[np.ndarray, np.ndarray]:
    """Requested and reserved bytes after each event of a device's trace (its action codes and sizes; index 0:
    before the first event), anchored at its final segments (a total the trace cannot explain starts at 0)."""
    figures = state_figures(final)
    return (running_total(action, size, REQUESTED_ADDS, REQUESTED_SUBS, figures.requested_bytes)[0],
            running_total(action, size, RESERVED_ADDS, RESERVED_SUBS, figures.reserved_bytes)[0])


REQUESTED_ADDS, REQUESTED_SUBS = (ALLOC,), (FREE_COMPLETED,)
RESERVED_ADDS, RESERVED_SUBS = (SEGMENT_ALLOC, SEGMENT_MAP), (SEGMENT_FREE, SEGMENT_UNMAP)


def running_total(action: np.ndarray, size: np.ndarray, adds: tuple[int, ...], subs: tuple[int, ...],
                  final: int) -> tuple[np.ndarray, int]:
    """A total after each event (index 0: before the first), where `adds` actions add their size and `subs`
    take it away, ending at `final`; and the shortfall: how far below 0 the start would be (it is put at 0)."""
    delta = np.where(np.isin(action, adds), size, 0) - np.where(np.isin(action, subs), size, 0)
    out = np.empty(len(action) + 1, np.int64)
    start = final - int(delta.sum())
    out[0] = max(0, start)
    np.cumsum(delta, out=out[1:])
    out[1:] += out[0]
    return out, max(0, -start)


def device_preview(device: int, action: np.ndarray, size: np.ndarray, final: list[Segment],
                   points: int = POINTS) -> DevicePreview:
    requested, reserved = totals_over_time(action, size, final)
    n = len(requested)
    starts = np.unique(np.linspace(0, n, min(points, n) + 1).astype(np.int64)[:-1])
    ends = np.append(starts[1:], n) - 1
    return DevicePreview(device, n - 1, ends.tolist(), np.maximum.reduceat(requested, starts).tolist(),
                         np.maximum.reduceat(reserved, starts).tolist())


def columns_preview(segments: tuple[Segment, ...], columns: dict[int, tuple[np.ndarray, np.ndarray]],
                    points: int = POINTS) -> list[DevicePreview]:
    """Every device's preview from its action codes and sizes (as the parser tells them early) and the final
    segments, in device order: the devices with a segment or a non-empty trace, as Snapshot.devices() has them."""
    empty = np.zeros(0, np.int64)
    devices = sorted({s.device for s in segments} | {d for d, (a, _) in columns.items() if len(a)})
    return [device_preview(d, *columns.get(d, (empty, empty)), [s for s in segments if s.device == d], points)
            for d in devices]


def snapshot_preview(snapshot: Snapshot, points: int = POINTS) -> list[DevicePreview]:
    """Every device's preview from a parsed snapshot."""
    return columns_preview(snapshot.segments, {d: (t.action, t.size) for d, t in snapshot.traces.items()}, points)
