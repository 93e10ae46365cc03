"""`--fit MEMORY`: the largest knob value whose predicted run fits a device, searched twice.

The safe answer (`largest_fitting`) is searched with every allocation at the largest size the recordings allow
(the high end of its laws, fragviz.predict.doubt); the point answer (`largest_fitting_point`) under the chosen
laws. The safe answer is never above the point answer: a size the chosen laws say fails is never offered.
Where the recordings pin every law down, the two are the same.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from fragviz.allocator.config import AllocatorSettings
from fragviz.predict.forecast import Plan
from fragviz.predict.runs import PredictedRun, run_at, settings_text

MAX_FIT = 1 << 24  # the largest knob value a fit search tries
Progress = Callable[[str], None]
SizesAt = Callable[[int], "np.ndarray | None"]


@dataclass(frozen=True)
class Boundary:
    """One search's answer: the largest value that fits and the first that fails, with their runs."""

    largest: int | None  # None: not even 1 fits
    first_failing: int | None  # None: no value up to MAX_FIT fails
    run: PredictedRun | None  # the run at `largest`
    failing_run: PredictedRun | None  # the run at `first_failing`: where it runs out of memory


@dataclass(frozen=True)
class FitAnswer:
    """The largest knob value whose predicted run fits the device under one setting (`--fit SIZE`): safe (under
    every law the recordings allow) and under the chosen laws (`point`)."""

    alloc_conf: str | None
    device_memory_bytes: int
    largest: int | None  # the safe answer; None: not even 1 fits
    first_failing: int | None  # the first value that fails at the high end of the laws
    run: PredictedRun | None  # the safe search's run at `largest`
    failing_run: PredictedRun | None  # ... and at `first_failing`
    point: Boundary  # the search under the chosen laws

    def as_dict(self) -> dict[str, Any]:
        return {"alloc_conf": self.alloc_conf, "device_memory_bytes": self.device_memory_bytes,
                "largest_fitting": self.largest, "first_failing": self.first_failing,
                "at_largest": self.run.as_dict() if self.run else None,
                "at_first_failing": self.failing_run.as_dict() if self.failing_run else None,
                "largest_fitting_point": self.point.largest, "first_failing_point": self.point.first_failing}


def fit_search(p: Plan, conf: str | None, settings: AllocatorSettings, capacity: int,
               progress: Progress | None = None) -> FitAnswer:
    """The largest whole knob value that runs without an OOM on `capacity` bytes: under the chosen laws, then
    under the high end of every law (capped by the first)."""
    say = progress or (lambda _text: None)
    point = _boundary(p, conf, settings, capacity, lambda _n: None, say)
    safe = point
    if p.laws.ambiguous.any() and point.largest is not None:
        safe = _boundary(p, conf, settings, capacity, lambda n: p.bounds_at(n)[1],
                         lambda text: say(f"{text} (every law the recordings allow)"), point.largest)
        if safe.largest == point.largest:
            safe = point  # fits at the point's answer under every law: the point's first failure is the boundary
    return FitAnswer(conf, capacity, safe.largest, safe.first_failing, safe.run, safe.failing_run, point)


def _boundary(p: Plan, conf: str | None, settings: AllocatorSettings, capacity: int, sizes_at: SizesAt,
              say: Progress, cap: int | None = None) -> Boundary:
    """Doubling from the largest recording (or `cap`) until the run fails, then halving the interval (memory
    grows with the knob, so the answer is one boundary); never above `cap`, nor above MAX_FIT."""
    tried: dict[int, PredictedRun] = {}

    def fits(n: int) -> bool:
        if n not in tried:
            tried[n] = run_at(p, n, conf, settings, capacity, sizes_at(n))
            say(f"{settings_text(conf)}: {n} {'fits' if tried[n].oom is None else 'runs out of memory'}")
        return tried[n].oom is None

    top = MAX_FIT if cap is None else cap
    start = max(1, min(int(max(p.knobs)), top))
    if fits(start):
        good, bad = start, min(start * 2, top + 1)
        while bad <= top and fits(bad):
            good, bad = bad, min(bad * 2, top + 1)
        if bad > top:
            return Boundary(good, None, tried[good], None)
    else:
        if not fits(1):
            return Boundary(None, 1, None, tried[1])
        good, bad = 1, start
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if fits(mid) else (good, mid)
    return Boundary(good, bad, tried[good], tried[bad])
