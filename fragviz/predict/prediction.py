"""A prediction at one size: the plan's workload written at the target and free-run under each setting asked
for, with its range, the laws by site, the warnings that say how sure it is, and (with three recordings or more)
the largest recording predicted from the others as a measured check."""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from fragviz.allocator.config import AllocatorSettings
from fragviz.base.units import format_bytes as fb
from fragviz.predict.doubt import Ambiguous, ambiguous, high_end_oom, warnings, with_range
from fragviz.predict.forecast import Plan, Unmatched, plan
from fragviz.predict.laws import CONSTANT, LAWS, LINEAR, POWER, QUADRATIC
from fragviz.predict.runs import PredictedRun, as_number, run_at
from fragviz.predict.workload import PredictionRefused
from fragviz.simulate.freerun import run_workload

FIRST_LAWS = (CONSTANT, LINEAR, QUADRATIC, POWER)  # always in `law_counts`, as they were before the others
LEFT_OUT_TRUSTED = 0.05


@dataclass(frozen=True)
class SiteLaws:
    """One site's allocations: their laws, counted, and their bytes in each recording and at the target."""

    site: str
    law: str  # the law of most of its bytes at the target
    counts: dict[str, int]
    recorded_bytes: tuple[int, ...]  # per recording, the matched allocations'
    predicted_bytes: int

    def as_dict(self, knobs: Sequence[float]) -> dict[str, Any]:
        return {"law": self.law, "allocations": sum(self.counts.values()), "by_law": self.counts,
                "recorded_bytes": {as_number(k): b for k, b in zip(knobs, self.recorded_bytes)},
                "predicted_bytes": self.predicted_bytes}


def site_laws(p: Plan, target: float) -> list[SiteLaws]:
    """Every site's laws, the site of most predicted bytes first (allocated bytes over the run, not live)."""
    sites = [s for s, m in zip(p.base.sites, p.matched.tolist()) if m]
    predicted = p.laws.at(target).tolist()
    laws = p.laws.law.tolist()
    counts: dict[str, Counter] = defaultdict(Counter)
    law_bytes: dict[str, Counter] = defaultdict(Counter)
    recorded: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(len(p.knobs), np.int64))
    total: Counter = Counter()
    for r, site in enumerate(sites):
        counts[site][laws[r]] += 1
        law_bytes[site][laws[r]] += predicted[r]
        recorded[site] += p.laws.sizes[r].astype(np.int64)
        total[site] += predicted[r]
    out = [SiteLaws(site, law_bytes[site].most_common(1)[0][0], {law: counts[site][law] for law in LAWS
                                                                 if counts[site][law]},
                    tuple(int(b) for b in recorded[site]), total[site]) for site in total]
    return sorted(out, key=lambda s: -s.predicted_bytes)


@dataclass(frozen=True)
class Prediction:
    """The program predicted at `target` from recordings at `knobs`: the runs under each setting (each with its
    range), the laws by site, what did not match, and how sure it is (`warnings`, `ambiguous`, `leave_one_out`)."""

    knob: str
    knobs: tuple[float, ...]
    target: float
    sources: tuple[str, ...]
    device: int
    matched_allocations: int
    template_allocations: int
    law_counts: dict[str, int]
    sites: tuple[SiteLaws, ...]
    unmatched: Unmatched
    runs: tuple[PredictedRun, ...]  # one per setting asked for, the first the headline
    warnings: tuple[str, ...] = ()
    ambiguous: Ambiguous = Ambiguous(0, 0.0, ())
    leave_one_out: LeftOut | None = None  # with three recordings or more

    def as_dict(self) -> dict[str, Any]:
        head = self.runs[0].as_dict()
        return {"peak_requested_bytes": head["peak_requested_bytes"],
                "peak_requested_range": head.get("peak_requested_range"),
                "peak_reserved_range": head.get("peak_reserved_range"), "warnings": list(self.warnings),
                "ambiguous": self.ambiguous.as_dict(),
                "leave_one_out": self.leave_one_out.as_dict() if self.leave_one_out else None,
                "peak_allocated_bytes": head["peak_allocated_bytes"],
                "peak_reserved_bytes": head["peak_reserved_bytes"], "fragmentation": head["fragmentation"],
                "oom": head["oom"], "laws": {s.site: s.as_dict(self.knobs) for s in self.sites},
                "knob": self.knob, "sizes": [as_number(k) for k in self.knobs], "to": as_number(self.target),
                "sources": list(self.sources), "device": self.device,
                "matched_allocations": self.matched_allocations, "template_allocations": self.template_allocations,
                "law_counts": self.law_counts, "unmatched": self.unmatched.as_dict(),
                "runs": [r.as_dict() for r in self.runs]}


def predict(p: Plan, target: float, settings: Sequence[tuple[str, AllocatorSettings]], capacity: int | None,
            knob: str = "size") -> Prediction:
    """The program at knob `target` under each of `settings` (label, settings) on a device of `capacity` bytes,
    each run with its range, and the warnings that say how sure it is."""
    runs = tuple(with_range(p, target, run_at(p, target, label, s, capacity), s) for label, s in settings)
    at_high = [high_end_oom(p, target, run, s) for run, (_, s) in zip(runs, settings)]
    laws = Counter(p.laws.law.tolist())
    left_out = leave_one_out(p, settings[0][1])
    notes = (p.notes(target) + warnings(p, target, runs, knob, at_high)
             + ([left_out.warning(knob)] if left_out and left_out.off else []))
    return Prediction(knob, p.knobs, float(target), tuple(w.source for w in p.workloads), p.base.device,
                      int(p.matched.sum()), len(p.matched), law_counts(laws),
                      tuple(site_laws(p, target)), p.unmatched, runs, tuple(notes), ambiguous(p, target), left_out)


def law_counts(counts: Counter) -> dict[str, int]:
    """Allocations by law: the four laws every prediction names (zero or not), then any other that occurs."""
    return {law: counts.get(law, 0) for law in LAWS if law in FIRST_LAWS or counts.get(law, 0)}


@dataclass(frozen=True)
class LeftOut:
    """The largest recording predicted from the others, and what it recorded (each free-run the same way): the
    measured error of the laws one step beyond the recordings they were fitted on."""

    size: float
    predicted_requested: int
    recorded_requested: int
    predicted_reserved: int
    recorded_reserved: int
    requested_range: tuple[int, int]  # the range of the prediction from the others
    fitted_on: int  # recordings the others are

    @property
    def error(self) -> float:
        return (self.predicted_requested - self.recorded_requested) / max(self.recorded_requested, 1)

    @property
    def held(self) -> bool:
        return self.requested_range[0] <= self.recorded_requested <= self.requested_range[1]

    @property
    def off(self) -> bool:
        """Whether the check casts doubt on the prediction: the range from the others missed the recording, or
        (the others three or more, fitted as the prediction is) the point is more than 5 % off."""
        return not self.held or (self.fitted_on >= 3 and abs(self.error) > LEFT_OUT_TRUSTED)

    def warning(self, knob: str) -> str:
        missed = "" if self.held else ", outside the range predicted from them"
        return (f"left out and predicted from the others, the recording at {knob} {as_number(self.size)} comes out "
                f"{self.error:+.1%} off its peak requested ({fb(self.predicted_requested)} against "
                f"{fb(self.recorded_requested)}{missed}): the prediction may be as far off at the target")

    def as_dict(self) -> dict[str, Any]:
        return {"size": as_number(self.size), "predicted_peak_requested_bytes": self.predicted_requested,
                "recorded_peak_requested_bytes": self.recorded_requested,
                "predicted_peak_reserved_bytes": self.predicted_reserved,
                "recorded_peak_reserved_bytes": self.recorded_reserved, "error": self.error,
                "predicted_peak_requested_range": list(self.requested_range), "held": self.held}


def leave_one_out(p: Plan, settings: AllocatorSettings) -> LeftOut | None:
    """With three recordings or more: the largest predicted from the others (None with two, or where the others
    alone cannot be matched)."""
    if len(p.knobs) < 3:
        return None
    order = sorted(range(len(p.knobs)), key=lambda c: p.knobs[c])
    last, rest = order[-1], order[:-1]
    try:
        sub = plan([p.workloads[c] for c in rest], [p.knobs[c] for c in rest], p.knobs[last], max_unmatched=1.0)
    except PredictionRefused:
        return None
    predicted = with_range(sub, p.knobs[last], run_at(sub, p.knobs[last], None, settings, None), settings)
    w = p.workloads[last]
    recorded = run_workload(iter(w.ops), w.events, [], settings, None, w.device).allocator.peaks
    return LeftOut(p.knobs[last], predicted.peak_requested_bytes, recorded.requested,
                   predicted.peak_reserved_bytes, recorded.reserved, predicted.peak_requested_range or (0, 0),
                   len(rest))
