"""A bigger run predicted from smaller ones: the recordings matched, each allocation's law fitted, the program's
workload written at the target size and free-run through the allocator model.

The predicted workload is the recording nearest the target (the template), every matched allocation resized by
its law; an allocation the other recordings do not have keeps its recorded size (and is reported). What the
prediction cannot carry over is said: the unmatched bytes, and a refusal where they are more than
`max_unmatched` of all the bytes the recordings allocated.
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from fragviz.allocator.config import AllocatorSettings
from fragviz.base.units import format_bytes as fb
from fragviz.predict.laws import LAWS, Laws, fit_laws
from fragviz.predict.match import align
from fragviz.predict.workload import PredictionRefused, RecordedWorkload, recorded_workload, traced_device
from fragviz.replay.analysis import Analysis
from fragviz.simulate.freerun import Op, run_workload

MAX_UNMATCHED = 0.10  # the share of all recorded bytes a prediction may leave unmatched
SITES_LISTED = 10
MAX_FIT = 1 << 24  # the largest knob value a fit search tries
Progress = Callable[[str], None]


@dataclass(frozen=True)
class UnmatchedSite:
    site: str
    knob: float  # the recording's knob value
    allocations: int
    bytes: int

    def as_dict(self) -> dict[str, Any]:
        return {"site": self.site, "size": as_number(self.knob), "allocations": self.allocations, "bytes": self.bytes}


@dataclass(frozen=True)
class Unmatched:
    """The allocations of any recording that the others do not have."""

    allocations: int
    bytes: int
    share: float  # of every byte the recordings allocated
    sites: tuple[UnmatchedSite, ...]  # the largest, at most SITES_LISTED

    def as_dict(self) -> dict[str, Any]:
        return {"allocations": self.allocations, "bytes": self.bytes, "share": self.share,
                "sites": [s.as_dict() for s in self.sites]}


@dataclass
class Plan:
    """Recordings matched and their laws fitted: what every prediction at any target starts from."""

    workloads: tuple[RecordedWorkload, ...]
    knobs: tuple[float, ...]
    template: int  # the recording whose workload is resized
    matched: np.ndarray  # bool, per template allocation: matched in every recording
    laws: Laws  # one row per matched template allocation, in order
    unmatched: Unmatched

    @property
    def base(self) -> RecordedWorkload:
        return self.workloads[self.template]

    def sizes_at(self, target: float) -> np.ndarray:
        """Every template allocation's bytes at knob `target`: its law's, or as recorded where unmatched."""
        sizes = self.base.sizes.copy()
        sizes[self.matched] = self.laws.at(target)
        return sizes

    def ops_at(self, target: float) -> Iterator[Op]:
        """The predicted program's requests at `target`, in the template's order."""
        sizes = self.sizes_at(target).tolist()
        k = 0
        for op in self.base.ops:
            if op.kind == "alloc":
                yield Op("alloc", op.event, op.key, sizes[k], op.stream, op.stack)
                k += 1
            else:
                yield op


def plan(workloads: Sequence[RecordedWorkload], knobs: Sequence[float], target: float | None = None,
         max_unmatched: float = MAX_UNMATCHED) -> Plan:
    """Match every recording against the one nearest `target` (the largest, without one) and fit the laws; or
    PredictionRefused when more than `max_unmatched` of the bytes do not match."""
    knobs = tuple(float(k) for k in knobs)
    if target is not None:
        t = min(range(len(knobs)), key=lambda c: (abs(math.log(target / knobs[c])), -knobs[c]))
    else:
        t = max(range(len(knobs)), key=lambda c: knobs[c])
    base = workloads[t]
    total = sum(int(w.sizes.sum()) for w in workloads) or 1
    columns = np.zeros((len(base.sizes), len(knobs)), np.int64)
    columns[:, t] = base.sizes
    found = np.ones(len(base.sizes), bool)
    lost: dict[int, np.ndarray] = {}
    for c, w in enumerate(workloads):
        if c == t:
            continue
        # the limit is on bytes, judged below; the match only stops early where half the allocations went
        # unmatched (the search would only cost time there)
        pairs = align(w.symbols, base.symbols, give_up_after=(len(w.sizes) + len(base.sizes)) // 2)
        here = np.zeros(len(base.sizes), bool)
        here[pairs[:, 1]] = True
        columns[pairs[:, 1], c] = w.sizes[pairs[:, 0]]
        found &= here
        mine = np.ones(len(w.sizes), bool)
        mine[pairs[:, 0]] = False
        lost[c] = mine
    lost[t] = ~found
    unmatched = _unmatched(workloads, knobs, lost, total)
    if unmatched.share > max_unmatched:
        raise PredictionRefused(_too_different(workloads, unmatched, max_unmatched))
    return Plan(tuple(workloads), knobs, t, found, fit_laws(knobs, columns[found]), unmatched)


def plan_recordings(analyses: Sequence[Analysis], knobs: Sequence[float], target: float | None = None,
                    device: int | None = None, max_unmatched: float = MAX_UNMATCHED) -> Plan:
    """`plan` on analysed recordings, each read on `device` (None: its traced device)."""
    return plan([recorded_workload(a, traced_device(a, device)) for a in analyses], knobs, target, max_unmatched)


def settings_for(p: Plan, analyses: Sequence[Analysis],
                 confs: Sequence[tuple[str, AllocatorSettings]]) -> list[tuple[str | None, AllocatorSettings]]:
    """The settings to simulate under: those asked for, else those recorded with the run predicted from (None)."""
    return list(confs) or [(None, analyses[p.template].settings)]


def _unmatched(workloads: Sequence[RecordedWorkload], knobs: tuple[float, ...], lost: dict[int, np.ndarray],
               total: int) -> Unmatched:
    by_site: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    count = nbytes = 0
    for c, mask in lost.items():
        w = workloads[c]
        for k in np.nonzero(mask)[0].tolist():
            entry = by_site[(w.sites[k], c)]
            entry[0] += 1
            entry[1] += int(w.sizes[k])
        count += int(mask.sum())
        nbytes += int(w.sizes[mask].sum())
    sites = sorted(by_site.items(), key=lambda kv: -kv[1][1])[:SITES_LISTED]
    return Unmatched(count, nbytes, nbytes / total,
                     tuple(UnmatchedSite(site, knobs[c], n, b) for (site, c), (n, b) in sites))


def _too_different(workloads: Sequence[RecordedWorkload], unmatched: Unmatched, limit: float) -> str:
    where = "; ".join(f"{fb(s.bytes)} at {s.site} (size {as_number(s.knob)})" for s in unmatched.sites[:3])
    names = ", ".join(w.source for w in workloads)
    return (f"{names}: cannot predict: {unmatched.share:.1%} of the recorded bytes ({fb(unmatched.bytes)} in "
            f"{unmatched.allocations} allocations) do not match between the recordings, more than the "
            f"{limit:.0%} allowed: they do not look like one program at two sizes (largest: {where})")


@dataclass(frozen=True)
class OomWhere:
    """Where a predicted run runs out of memory: the request, its site, and the allocator then."""

    event: int  # in the template recording
    site: str
    requested_bytes: int
    reserved_bytes: int
    largest_free_block: int
    device_memory_bytes: int

    def as_dict(self) -> dict[str, Any]:
        return {"event": self.event, "site": self.site, "requested_bytes": self.requested_bytes,
                "reserved_bytes": self.reserved_bytes, "largest_free_block": self.largest_free_block,
                "device_memory_bytes": self.device_memory_bytes}


@dataclass(frozen=True)
class PredictedRun:
    """The predicted workload free-run under one setting on a device of `device_memory_bytes` (None: unlimited)."""

    alloc_conf: str | None  # None: the settings recorded with the run predicted from
    device_memory_bytes: int | None
    peak_requested_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    fragmentation: float  # at the reserved peak, at its fullest
    oom: OomWhere | None
    oom_count: int

    @property
    def fits(self) -> bool | None:
        """Whether it fits the device; None where the device's size is unknown."""
        return None if self.device_memory_bytes is None else self.oom is None

    def as_dict(self) -> dict[str, Any]:
        oom: Any = None if self.device_memory_bytes is None else (self.oom.as_dict() if self.oom else False)
        return {"alloc_conf": self.alloc_conf, "device_memory_bytes": self.device_memory_bytes,
                "peak_requested_bytes": self.peak_requested_bytes, "peak_allocated_bytes": self.peak_allocated_bytes,
                "peak_reserved_bytes": self.peak_reserved_bytes, "fragmentation": self.fragmentation, "oom": oom,
                "oom_count": self.oom_count}


def run_at(p: Plan, target: float, conf: str | None, settings: AllocatorSettings, capacity: int | None) -> PredictedRun:
    """The program at knob `target`, free-run under `settings` on a device of `capacity` bytes."""
    base = p.base
    result = run_workload(p.ops_at(target), base.events, [], settings, capacity, base.device)
    a, peak = result.allocator, result.peak
    oom = None
    if result.ooms:
        first = result.ooms[0]
        oom = OomWhere(first.event, _site_at(base, first.key), first.requested_bytes, first.reserved_bytes,
                       first.largest_free_block, capacity or 0)
    return PredictedRun(conf, capacity, a.peaks.requested, a.peaks.active, a.peaks.reserved,
                        peak.fragmentation if peak else 0.0, oom, result.oom_count)


def _site_at(base: RecordedWorkload, key: Any) -> str:
    for k, i in enumerate(base.alloc_at.tolist()):
        if base.ops[i].key == key:
            return base.sites[k]
    return "(unknown site)"


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

    def as_dict(self) -> dict[str, Any]:
        head = self.runs[0].as_dict()
        return {"peak_requested_bytes": head["peak_requested_bytes"],
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
    """The program at knob `target` under each of `settings` (label, settings) on a device of `capacity` bytes."""
    runs = tuple(run_at(p, target, label, s, capacity) for label, s in settings)
    laws = Counter(p.laws.law.tolist())
    return Prediction(knob, p.knobs, float(target), tuple(w.source for w in p.workloads), p.base.device,
                      int(p.matched.sum()), len(p.matched), {law: laws.get(law, 0) for law in LAWS},
                      tuple(site_laws(p, target)), p.unmatched, runs)


@dataclass(frozen=True)
class FitAnswer:
    """The largest knob value whose predicted run fits the device under one setting (`--fit SIZE`)."""

    alloc_conf: str | None
    device_memory_bytes: int
    largest: int | None  # None: not even 1 fits
    first_failing: int | None  # None: no value up to MAX_FIT fails
    run: PredictedRun | None  # the run at `largest`
    failing_run: PredictedRun | None  # the run at `first_failing`: where it runs out of memory

    def as_dict(self) -> dict[str, Any]:
        return {"alloc_conf": self.alloc_conf, "device_memory_bytes": self.device_memory_bytes,
                "largest_fitting": self.largest, "first_failing": self.first_failing,
                "at_largest": self.run.as_dict() if self.run else None,
                "at_first_failing": self.failing_run.as_dict() if self.failing_run else None}


def fit_search(p: Plan, conf: str | None, settings: AllocatorSettings, capacity: int,
               progress: Progress | None = None) -> FitAnswer:
    """The largest whole knob value that runs without an OOM on `capacity` bytes, searched by doubling from the
    largest recording, then halving the interval (memory grows with the knob, so the answer is one boundary)."""
    say = progress or (lambda _text: None)
    tried: dict[int, PredictedRun] = {}

    def fits(n: int) -> bool:
        if n not in tried:
            tried[n] = run_at(p, n, conf, settings, capacity)
            say(f"{settings_text(conf)}: {n} {'fits' if tried[n].oom is None else 'runs out of memory'}")
        return tried[n].oom is None

    start = max(1, int(max(p.knobs)))
    if fits(start):
        good, bad = start, start * 2
        while bad <= MAX_FIT and fits(bad):
            good, bad = bad, bad * 2
        if bad > MAX_FIT:
            return FitAnswer(conf, capacity, good, None, tried[good], None)
    else:
        if not fits(1):
            return FitAnswer(conf, capacity, None, 1, None, tried[1])
        good, bad = 1, start
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if fits(mid) else (good, mid)
    return FitAnswer(conf, capacity, good, bad, tried[good], tried[bad])


def settings_text(conf: str | None) -> str:
    return "the recorded settings" if conf is None else (conf or "the default settings")


def as_number(x: float) -> float | int:
    return int(x) if float(x).is_integer() else float(x)
