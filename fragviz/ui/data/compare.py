"""What the compare page's aligned timelines draw, read through the store's reader: each side's timeline (at the
level of detail the reader serves), its alignment on the shared axis, and the states at a position on it.
No Dash here; the maths is fragviz.replay.align's."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

from fragviz.model.lod import Timeline
from fragviz.replay.align import Alignment, AlignmentRefused, by_event, by_markers, by_time, step_markers
from fragviz.base.errors import FragvizError
from fragviz.ui.data.views import Views

MARKER_LIMIT = 10**9  # every `snapshot` action: a thinned list would number the steps wrongly


@dataclass(frozen=True)
class AlignedSide:
    """One side of the comparison on the shared axis: its timeline points and where they sit."""

    label: str
    sid: int
    device: int
    axis: str
    timeline: Timeline
    alignment: Alignment
    markers: str  # what the step markers are ("" unless aligned by step)

    @property
    def x(self) -> np.ndarray:
        return self.alignment.position(self.timeline.start)


class CompareViews:
    """The compare page's reads of one store, with caches (stored snapshots do not change): one per app, in its
    AppContext."""

    def __init__(self, views: Views) -> None:
        self.views = views
        self.peak = lru_cache(maxsize=64)(views.peak_event)

    def peak_or_none(self, sid: int | None, device: int | None) -> int | None:
        """The state of most allocated bytes of a side, None where the side names no stored device."""
        if sid is None or device is None:
            return None
        try:
            return self.peak(sid, device)
        except FragvizError:
            return None

    def side(self, label: str, sid: int, device: int, axis: str) -> AlignedSide:
        """A side's timeline and alignment; AlignmentRefused says why a side cannot go on this axis."""
        reader = self.views.reader
        tl = reader.timeline(sid, device)
        last = reader.trace_length(sid, device)
        if axis == "time":
            return AlignedSide(label, sid, device, axis, tl,
                               by_time(tl.start, tl.time_us, tl.t0_us, last), "")
        if axis == "step":
            spans = self.views.annotation_spans(sid, device)
            markers, what = step_markers(self.views.markers(sid, device, MARKER_LIMIT)["snapshot"],
                                         [(s.name, s.start_event) for s in spans])
            return AlignedSide(label, sid, device, axis, tl, by_markers(markers, last, what), what)
        return AlignedSide(label, sid, device, axis, tl, by_event(last), "")

    def shared_axis(self, sides: Sequence[tuple[int, int]]) -> str:
        """The first axis, of step, time and event, on which every (snapshot, device) side can be placed: step
        markers where all record them, else their times, else events (any trace has those)."""
        for axis in ("step", "time"):
            try:
                for sid, device in sides:
                    self.side("", sid, device, axis)
            except AlignmentRefused:
                continue
            return axis
        return "event"

    def state_at(self, side: AlignedSide, x: float) -> int:
        """The state current at shared-axis position `x`; by time on a summarised timeline, looked up again
        among the states of the bucket the summary puts it in."""
        state = side.alignment.state_at(x)
        bucket = side.timeline.bucket
        if side.axis != "time" or bucket == 1:
            return state
        lo = state - state % bucket
        hi = min(lo + bucket, side.alignment.last)
        fine = self.views.reader.timeline(side.sid, side.device, lo, hi, max_points=bucket + 1)
        exact = by_time(fine.start, fine.time_us, side.timeline.t0_us, hi)
        return max(exact.state_at(x), lo)
