"""How sure a prediction is: the range of its peaks under every law the recordings allow, and warnings that say
where the doubt comes from and what would remove it.

Each allocation's lowest and highest size at the target (fragviz.predict.laws) make two more workloads; each is
free-run like the prediction, and the range is the lowest and highest peak of the three runs. A peak grows with
the sizes under it, so the truth lies in the range wherever it lies between the laws.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from fragviz.allocator.config import AllocatorSettings
from fragviz.base.units import format_bytes as fb
from fragviz.predict.causes import partial_traces
from fragviz.predict.runs import PredictedRun, as_number, run_at, settings_text

if TYPE_CHECKING:
    from fragviz.predict.forecast import Plan

WIDE = 0.10  # a range whose high end is more than this share above its low end is called wide
SITES_NAMED = 3


@dataclass(frozen=True)
class Ambiguous:
    """The allocations whose recordings allow more than one law: how many, their share of the bytes at the
    target (allocated over the run, at the high end), and the sites with the most of the spread."""

    allocations: int
    share: float
    sites: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"allocations": self.allocations, "share": self.share, "sites": list(self.sites)}


def with_range(p: Plan, target: float, run: PredictedRun, settings: AllocatorSettings) -> PredictedRun:
    """`run` with its peaks' range: the prediction free-run again with every allocation at its lowest and at its
    highest size, on an unlimited device (a device's limit would cut the peaks it is to tell: a run that ran out
    of memory is run again without one for its own peaks)."""
    point = run if run.oom is None else run_at(p, target, run.alloc_conf, settings, None)  # peaks past the OOM
    if not p.laws.ambiguous.any():
        return replace(run, peak_requested_range=(point.peak_requested_bytes, point.peak_requested_bytes),
                       peak_reserved_range=(point.peak_reserved_bytes, point.peak_reserved_bytes))
    low, high = p.bounds_at(target)
    runs = [point, run_at(p, target, run.alloc_conf, settings, None, low),
            run_at(p, target, run.alloc_conf, settings, None, high)]
    req = [r.peak_requested_bytes for r in runs]
    res = [r.peak_reserved_bytes for r in runs]
    return replace(run, peak_requested_range=(min(req), max(req)), peak_reserved_range=(min(res), max(res)))


def high_end_oom(p: Plan, target: float, run: PredictedRun, settings: AllocatorSettings) -> PredictedRun | None:
    """The run at the high end of the laws on the run's device, where the prediction fits it but the high end's
    peak reserved does not: whether it runs out of memory there (None: it fits, or nothing to ask)."""
    if run.fits is not True or run.peak_reserved_range is None or run.device_memory_bytes is None:
        return None
    if run.peak_reserved_range[1] <= run.device_memory_bytes:
        return None
    high = run_at(p, target, run.alloc_conf, settings, run.device_memory_bytes, p.bounds_at(target)[1])
    return high if high.oom is not None else None


def ambiguous(p: Plan, target: float) -> Ambiguous:
    rows = p.laws.ambiguous
    if not rows.any():
        return Ambiguous(0, 0.0, ())
    low, high = p.laws.bounds_at(target)
    width = (high - low).astype(np.float64)
    sites = [s for s, m in zip(p.base.sites, p.matched.tolist()) if m]
    by_site: dict[str, float] = {}
    for r in np.nonzero(rows)[0].tolist():
        by_site[sites[r]] = by_site.get(sites[r], 0.0) + width[r]
    named = sorted(by_site, key=lambda s: -by_site[s])[:SITES_NAMED]
    total = float(high.sum()) or 1.0
    return Ambiguous(int(rows.sum()), float(high[rows].sum()) / total, tuple(named))


def suggested_size(knobs: Sequence[float], target: float) -> float:
    """The knob value of the recording that would narrow the range most for its cost: between the largest
    recording and the target (by ratio), or, for a target among the recordings, beside the largest."""
    top = max(knobs)
    size = math.sqrt(top * target) if target > top else top * 2
    whole = all(float(k).is_integer() for k in knobs)
    size = float(max(round(size), int(top) + 1)) if whole else size
    return size if size not in knobs else top * 2


def warnings(p: Plan, target: float, runs: Sequence[PredictedRun], knob: str,
             oom_at_high: Sequence[PredictedRun | None] = ()) -> list[str]:
    """What a person must know before trusting the point: laws the recordings cannot tell apart, sizes that
    depend on the data, a wide range, and a device that only the chosen laws fit."""
    out = []
    amb = ambiguous(p, target)
    more = f"a recording at {knob} {as_number(suggested_size(p.knobs, target))} would narrow it"
    if amb.allocations:
        count = "two recordings cannot tell apart" if len(p.knobs) == 2 else "the recordings leave open"
        out.append(f"{count} the laws of {amb.allocations} allocations ({amb.share:.0%} of the bytes at "
                   f"{knob} {as_number(target)}), most at {', '.join(amb.sites)}: the range spans them; {more}")
    out.extend(_data_dependent(p))
    out.extend(partial_traces(p.workloads))
    for run in runs:
        low, high = run.peak_reserved_range or (run.peak_reserved_bytes, run.peak_reserved_bytes)
        if high > (1 + WIDE) * low:
            out.append(f"under {settings_text(run.alloc_conf)}: the range is wide, peak reserved {fb(low)} to "
                       f"{fb(high)}; {more}")
    for high_run in oom_at_high:
        if high_run is not None and high_run.oom is not None:
            out.append(f"under {settings_text(high_run.alloc_conf)}: fits {fb(high_run.device_memory_bytes)} "
                       f"under the chosen laws, but not under every law the recordings allow: at the high end "
                       f"{fb(high_run.oom.requested_bytes)} requested at {high_run.oom.site} runs out of memory")
    return out


def _data_dependent(p: Plan) -> list[str]:
    spread = p.laws.spread
    if spread is None:
        return []
    sites = [s for s, m in zip(p.base.sites, p.matched.tolist()) if m]
    seen: dict[str, tuple[float, float, int]] = {}
    for r in np.nonzero(~np.isnan(spread[0]))[0].tolist():
        lo, hi, n = seen.get(sites[r], (spread[0][r], spread[1][r], 0))
        seen[sites[r]] = (lo, hi, n + 1)
    return [f"the sizes at {site} depend on the data ({n} allocations whose sizes grow as the knob to the power "
            f"{lo:.2f} to {hi:.2f}): predicted by their median, the range spans them"
            for site, (lo, hi, n) in list(seen.items())[:SITES_NAMED]]
