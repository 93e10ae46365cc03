"""The figures a what-if draws, recorded while a free-run runs: reserved bytes and fragmentation (non-releasable
/ reserved bytes, fragviz.model.metrics) after each workload event, kept as min and max per bucket of events (as
`fragviz.model.lod` does for recorded runs), so a run of millions of events yields a few thousand points and no peak
disappears.

State K follows event K - 1, as in the recorded timeline: state 0 is the start of the trace.
"""
from __future__ import annotations

import numpy as np

from fragviz.allocator.sim import DeviceAllocator
from fragviz.model.lod import Timeline
from fragviz.model.metrics import fragmentation

FIGURES = ("reserved", "fragmentation")


class RunSeries:
    """Min and max of the figures per bucket of `bucket` states, for a trace of `events` events."""

    def __init__(self, events: int, max_points: int) -> None:
        self.bucket = max(1, -(-(events + 1) // max(1, max_points)))
        self._start: list[int] = []
        self._lo: dict[str, list[float]] = {f: [] for f in FIGURES}
        self._hi: dict[str, list[float]] = {f: [] for f in FIGURES}
        self._current = -1

    def observe(self, state: int, alloc: DeviceAllocator) -> None:
        """Record the allocator's figures as state `state` (after event `state` - 1)."""
        reserved = alloc.reserved  # over every pool, as the recorded timeline has it
        values = {"reserved": reserved, "fragmentation": fragmentation(alloc.non_releasable_bytes(), reserved)}
        index = state // self.bucket
        if index != self._current:
            self._current = index
            self._start.append(state)
            for f in FIGURES:
                self._lo[f].append(values[f])
                self._hi[f].append(values[f])
            return
        for f in FIGURES:
            self._lo[f][-1] = min(self._lo[f][-1], values[f])
            self._hi[f][-1] = max(self._hi[f][-1], values[f])

    def timeline(self) -> Timeline:
        """The figures per bucket; `start` is the first state of each bucket that holds one."""
        kinds = {f: np.int64 if f == "reserved" else np.float64 for f in FIGURES}
        return Timeline(self.bucket, np.asarray(self._start, np.int64),
                        {f: np.asarray(self._lo[f], kinds[f]) for f in FIGURES},
                        {f: np.asarray(self._hi[f], kinds[f]) for f in FIGURES})
