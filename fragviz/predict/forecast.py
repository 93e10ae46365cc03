"""A bigger run predicted from smaller ones: the recordings matched, each allocation's law fitted, the program's
workload written at the target size and free-run through the allocator model.

The predicted workload is the recording nearest the target (the template), every matched allocation resized by
its law; an allocation the other recordings do not have keeps its recorded size (and is reported). What the
prediction cannot carry over is said: the unmatched bytes, and a refusal where they are more than
`max_unmatched` of all the bytes the recordings allocated.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from fragviz.allocator.config import AllocatorSettings
from fragviz.predict.laws import Laws, fit_laws
from fragviz.predict.causes import growing_counts, refuse_repeats, too_different
from fragviz.predict.match import align
from fragviz.predict.runs import as_number
from fragviz.predict.workload import PredictionRefused, RecordedWorkload, recorded_workload, traced_device
from fragviz.replay.analysis import Analysis
from fragviz.simulate.freerun import Op

MAX_UNMATCHED = 0.10  # the share of all recorded bytes a prediction may leave unmatched
SITES_LISTED = 10


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

    def site_of(self, key: Any) -> str:
        """The site of the allocation an op's `key` names in the program written at a target."""
        for k, i in enumerate(self.base.alloc_at.tolist()):
            if self.base.ops[i].key == key:
                return self.base.sites[k]
        return "(unknown site)"

    def notes(self, target: float) -> list[str]:
        """What a person must know of how the workload at `target` was written (a stepped plan's count)."""
        return []

    def bounds_at(self, target: float) -> tuple[np.ndarray, np.ndarray]:
        """Every template allocation's lowest and highest bytes at `target` under the laws its recordings allow
        (as recorded where unmatched)."""
        low, high = self.base.sizes.copy(), self.base.sizes.copy()
        low[self.matched], high[self.matched] = self.laws.bounds_at(target)
        return low, high

    def ops_at(self, target: float, sizes: np.ndarray | None = None) -> Iterator[Op]:
        """The predicted program's requests at `target`, in the template's order; `sizes`: every allocation's
        bytes (default: under the chosen laws)."""
        sizes = (self.sizes_at(target) if sizes is None else sizes).tolist()
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
    refuse_repeats(workloads, knobs)
    total = sum(int(w.sizes.sum()) for w in workloads) or 1
    columns, found, lost = match_to_template(workloads, [np.arange(len(w.sizes)) for w in workloads], t, True)
    unmatched = unmatched_of(workloads, knobs, lost, total)
    if unmatched.share > min(max_unmatched, MAX_UNMATCHED) and growing_counts(workloads, knobs, [s.site for s in
                                                                                     unmatched.sites]):
        from fragviz.predict.stepped import stepped_plan  # it builds on Plan: imported here, not at the top
        stepped = stepped_plan(workloads, knobs, t, max_unmatched)
        if stepped is not None:
            return stepped
    if unmatched.share > max_unmatched:
        raise PredictionRefused(too_different(workloads, knobs, unmatched, max_unmatched))
    sites = [s for s, m in zip(base.sites, found.tolist()) if m]
    return Plan(tuple(workloads), knobs, t, found, fit_laws(knobs, columns[found], _site_ids(sites)), unmatched)


def match_to_template(workloads: Sequence[RecordedWorkload], indices: Sequence[np.ndarray], template: int,
                      give_up: bool = False) -> tuple[np.ndarray, np.ndarray, dict[int, np.ndarray]]:
    """The allocations `indices` picks in each recording matched with the template's: their sizes (one row per
    template allocation picked, one column per recording), which of those every recording matched, and per
    recording a mask over all its allocations of those picked and left unmatched. `give_up`: a match stops early
    where half the allocations went unmatched (the limit is on bytes, judged by the caller; past that the search
    would only cost time)."""
    base, mine = workloads[template], indices[template]
    base_symbols = [base.symbols[i] for i in mine.tolist()]
    columns = np.zeros((len(mine), len(workloads)), np.int64)
    columns[:, template] = base.sizes[mine]
    found = np.ones(len(mine), bool)
    lost: dict[int, np.ndarray] = {}
    for c, (w, idx) in enumerate(zip(workloads, indices)):
        if c == template:
            continue
        limit = (len(idx) + len(mine)) // 2 if give_up else None
        pairs = align([w.symbols[i] for i in idx.tolist()], base_symbols, give_up_after=limit)
        here = np.zeros(len(mine), bool)
        here[pairs[:, 1]] = True
        columns[pairs[:, 1], c] = w.sizes[idx[pairs[:, 0]]]
        found &= here
        mask = np.zeros(len(w.sizes), bool)
        mask[idx] = True
        mask[idx[pairs[:, 0]]] = False
        lost[c] = mask
    mask = np.zeros(len(base.sizes), bool)
    mask[mine[~found]] = True
    lost[template] = mask
    return columns, found, lost


def _site_ids(sites: Sequence[str]) -> list[int]:
    ids: dict[str, int] = {}
    return [ids.setdefault(s, len(ids)) for s in sites]


def plan_recordings(analyses: Sequence[Analysis], knobs: Sequence[float], target: float | None = None,
                    device: int | None = None, max_unmatched: float = MAX_UNMATCHED) -> Plan:
    """`plan` on analysed recordings, each read on `device` (None: its traced device)."""
    return plan([recorded_workload(a, traced_device(a, device)) for a in analyses], knobs, target, max_unmatched)


def settings_for(p: Plan, analyses: Sequence[Analysis],
                 confs: Sequence[tuple[str, AllocatorSettings]]) -> list[tuple[str | None, AllocatorSettings]]:
    """The settings to simulate under: those asked for, else those recorded with the run predicted from (None)."""
    return list(confs) or [(None, analyses[p.template].settings)]


def unmatched_of(workloads: Sequence[RecordedWorkload], knobs: tuple[float, ...], lost: dict[int, np.ndarray],
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
