"""Level-of-detail series: per-event figures summarised as min and max per bucket, so that a timeline of
millions of events draws from a few thousand points and no peak disappears.

Levels have buckets of 16, 64, 256, ... events (powers of 4); a query takes the finest level that gives at
most the points asked for, or the raw series when the range is short enough.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

LEVEL_BASE = 16
LEVEL_FACTOR = 4
FIGURES = ("allocated", "requested", "reserved", "free", "non_releasable", "fragmentation", "free_scatter")


@dataclass(frozen=True, eq=False)
class Timeline:
    """Figures over a range of states, as a timeline draws them: every state (`bucket` 1), or the min and max of
    each bucket of `bucket` states. `start` is the first state of each point; `mins` and `maxs` hold each figure's
    series by its name (FIGURES, or a what-if's "reserved" and "fragmentation"); `time_us` the time of each point's
    first state and `t0_us` the trace's first time, where the trace has times."""

    bucket: int
    start: np.ndarray
    mins: Mapping[str, np.ndarray]
    maxs: Mapping[str, np.ndarray]
    time_us: np.ndarray | None = None
    t0_us: int | None = None

    @classmethod
    def from_columns(cls, bucket: int, columns: Mapping[str, np.ndarray], t0_us: int | None = None) -> Timeline:
        """From `summarise`'s columns (`start`, `<figure>_min`, `<figure>_max`, `time_us_min` where timed)."""
        names = [k[:-4] for k in columns if k.endswith("_max") and k != "time_us_max"]
        return cls(bucket, columns["start"], {n: columns[n + "_min"] for n in names},
                   {n: columns[n + "_max"] for n in names}, columns.get("time_us_min"), t0_us)

    def columns(self) -> dict[str, Any]:
        """The timeline as `summarise`'s columns (and `bucket`, `t0_us`), to compare two of them whole."""
        out: dict[str, Any] = {"bucket": self.bucket, "start": self.start}
        for name in self.maxs:
            out[name + "_min"], out[name + "_max"] = self.mins[name], self.maxs[name]
        if self.time_us is not None:
            out["time_us_min"], out["t0_us"] = self.time_us, self.t0_us
        return out


def per_event(series: dict[str, np.ndarray], time_us: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The figures a timeline draws after every event (state K follows event K - 1), from a replay's series.

    With the trace's `time_us`, state K is stamped with the time of event K - 1 (state 0 with event 0's).
    """
    reserved = series["reserved"]
    free = reserved - series["allocated"]
    stuck = series["non_releasable"]
    with np.errstate(divide="ignore", invalid="ignore"):
        scatter = np.where(free > 0, 1.0 - series["largest_gap"] / np.maximum(free, 1), 0.0)
        frag = np.where(reserved > 0, stuck / np.maximum(reserved, 1), 0.0)
    out = {"allocated": series["allocated"], "requested": series["requested"], "reserved": reserved,
           "free": free, "non_releasable": stuck, "fragmentation": np.clip(frag, 0.0, 1.0),
           "free_scatter": np.clip(scatter, 0.0, 1.0)}
    if time_us is not None and len(time_us) and (time_us >= 0).all():
        out["time_us"] = np.concatenate([time_us[:1], time_us])
    return out


def bucket_sizes(n: int) -> list[int]:
    sizes, b = [], LEVEL_BASE
    while n // b >= 2:
        sizes.append(b)
        b *= LEVEL_FACTOR
    return sizes


def summarise(figures: dict[str, np.ndarray], bucket: int) -> dict[str, np.ndarray]:
    """min and max of every figure per bucket of `bucket` consecutive states (the last bucket may be short)."""
    n = len(next(iter(figures.values())))
    full = n // bucket * bucket
    out: dict[str, np.ndarray] = {"start": np.arange(0, n, bucket, dtype=np.int64)}
    for name, values in figures.items():
        head = values[:full].reshape(-1, bucket)
        mins, maxs = head.min(axis=1), head.max(axis=1)
        if full < n:
            mins = np.append(mins, values[full:].min())
            maxs = np.append(maxs, values[full:].max())
        out[name + "_min"], out[name + "_max"] = mins, maxs
    return out


def choose_bucket(lo: int, hi: int, max_points: int, available: list[int]) -> int:
    """The finest bucket size (1: raw) that shows [lo, hi] in at most max_points points."""
    span = max(1, hi - lo + 1)
    if span <= max_points:
        return 1
    for b in sorted(available):
        if span // b <= max_points:
            return b
    return max(available) if available else 1
