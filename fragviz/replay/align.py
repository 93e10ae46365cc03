"""Two traces on one axis: by event index, by time since each trace's first event, or by step markers.

An alignment maps a trace's states (state K follows the first K events) to positions on the shared axis
through anchors: pairs (state, position), states increasing, positions non-decreasing, the axis linear
between them. By event the position is the state itself; by time it is the seconds since the trace's first
event; by step the k-th marker (1-based) sits at position k, so step 2.5 is halfway between markers 2 and 3.
Pure numpy: no store, no Dash.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from fragviz.base.errors import FragvizError

AXES = ("event", "time", "step")
AXIS_TITLES = {"event": "event (state index)", "time": "seconds since the first event", "step": "step"}


class AlignmentRefused(FragvizError):
    """A trace that cannot be placed on the asked axis (no times, too few step markers)."""


@dataclass(frozen=True)
class Alignment:
    """A piecewise-linear map from a trace's states 0..last to positions on the shared axis.

    Past the end anchors the axis goes on at the slope of the nearest interval where `extrapolate`, else
    holds the end anchor's position."""

    states: np.ndarray  # int64, increasing
    positions: np.ndarray  # float64, non-decreasing
    last: int  # the trace's last state (its length)
    extrapolate: bool = False

    def position(self, states: Sequence[int] | np.ndarray) -> np.ndarray:
        """The shared-axis position of each state."""
        s = np.asarray(states, dtype=np.float64)
        out = np.interp(s, self.states, self.positions)
        if self.extrapolate and len(self.states) >= 2:
            lo_slope, hi_slope = self._end_slopes()
            out = np.where(s < self.states[0], self.positions[0] + (s - self.states[0]) * lo_slope, out)
            out = np.where(s > self.states[-1], self.positions[-1] + (s - self.states[-1]) * hi_slope, out)
        return out

    def state_at(self, x: float) -> int:
        """The last state whose position is at or before `x` (the state current there), within 0..last."""
        p, s = self.positions, self.states
        i = int(np.searchsorted(p, x, side="right")) - 1
        if i < 0:
            at = s[0] - (p[0] - x) / self._end_slopes()[0] if self.extrapolate and len(s) >= 2 else 0.0
        elif i == len(p) - 1:
            at = s[-1] + (x - p[-1]) / self._end_slopes()[1] if self.extrapolate and len(s) >= 2 else self.last
        else:  # p[i] <= x < p[i + 1]
            at = s[i] + (x - p[i]) / (p[i + 1] - p[i]) * (s[i + 1] - s[i])
        return int(min(max(np.floor(at + 1e-9), 0), self.last))

    def _end_slopes(self) -> tuple[float, float]:
        """Positions per state over the first and the last interval between anchors."""
        s, p = self.states, self.positions
        return float((p[1] - p[0]) / (s[1] - s[0])), float((p[-1] - p[-2]) / (s[-1] - s[-2]))


def by_event(last: int) -> Alignment:
    """Position = state index."""
    return Alignment(np.array([0, max(last, 0)], np.int64), np.array([0.0, float(max(last, 0))]), last)


def by_time(states: Sequence[int] | np.ndarray, time_us: Sequence[int] | np.ndarray | None, t0_us: int | None,
            last: int) -> Alignment:
    """Position = seconds between `t0_us` (the trace's first event) and the time stamped on each state; `states`
    and `time_us` are a timeline's points (every state, or the first of each bucket)."""
    if time_us is None or t0_us is None or not len(time_us):
        raise AlignmentRefused("its trace records no times (time_us): align by event or by step")
    seconds = (np.maximum.accumulate(np.asarray(time_us, np.int64)) - t0_us) / 1e6
    return Alignment(np.asarray(states, np.int64), seconds, last)


def by_markers(markers: Sequence[int], last: int, what: str = "step markers") -> Alignment:
    """Position k at the k-th marker (states, 1-based k); repeated states keep their first marker. `what` names
    the markers in a refusal."""
    ordered = sorted(int(m) for m in markers)
    states = np.unique(np.asarray(ordered, np.int64))
    if len(states) < 2:
        raise AlignmentRefused(f"it has {len(states)} step marker{'' if len(states) == 1 else 's'} ({what}); "
                               "2 are needed: align by event or by time")
    first = [ordered.index(s) for s in states.tolist()]
    return Alignment(states, np.asarray(first, np.float64) + 1.0, last, extrapolate=True)


def step_markers(snapshot_actions: Sequence[int], annotation_starts: Sequence[tuple[str, int]]
                 ) -> tuple[list[int], str]:
    """A trace's step markers and what they are: its `snapshot` actions where it has 2 or more, else the starts
    of its most frequent repeated annotation (a record_function name used more than once; ties: the name that
    starts first), else the `snapshot` actions it has (fewer than 2)."""
    if len(snapshot_actions) >= 2:
        return sorted(snapshot_actions), "`snapshot` actions"
    counts = Counter(name for name, _ in annotation_starts)
    repeated = [name for name, n in counts.items() if n >= 2]
    if not repeated:
        return sorted(snapshot_actions), "`snapshot` actions, and no record_function name used twice"
    best = max(repeated, key=counts.__getitem__)  # Counter keeps first-seen order, max keeps the first of ties
    return sorted(start for name, start in annotation_starts if name == best), f"starts of '{best}'"
