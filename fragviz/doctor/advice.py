"""What to do about an OOM, per verdict, in sentences that say exactly what the numbers are.

`helps` maps a what-if setting to what the simulation found (True: it avoids the OOM, False: it still runs
out); a setting the simulation could not judge is absent. `in_force` says which settings were already on:
advice never asks for one of those.
"""
from __future__ import annotations

from fragviz.doctor.advice_outside import REDUCE, cap_advice, outside_advice, undetermined_advice
from fragviz.doctor.cause import CAP, EXHAUSTION, FRAGMENTATION, OUTSIDE, UNDETERMINED
from fragviz.doctor.facts import DEFRAG_MARGIN, OomFacts
from fragviz.doctor.inforce import InForce
from fragviz.doctor.records import WhatIfEntry
from fragviz.simulate.records import GETS_PAST
from fragviz.base.units import format_bytes as fb

EXPANDABLE, SPLIT = "expandable_segments:True", "max_split_size_mb:512"
LEGACY_ERAS = ("1.0", "1.5", "1.x")  # messages of PyTorch before 2.1, which had no expandable segments
STEADY = ("Keep tensor sizes steady (pad variable sequence lengths to a few buckets) so freed blocks fit the next "
          "requests. torch.cuda.empty_cache() does not help: the allocator already released every whole free "
          "segment before it gave up.")


def advice(verdict: str, f: OomFacts, what_ifs: list[WhatIfEntry], in_force: InForce) -> list[str]:
    helps = {w.alloc_conf: w.avoids_oom for w in what_ifs if w.avoids_oom is not None}
    out = {EXHAUSTION: _exhaustion, FRAGMENTATION: _fragmentation, OUTSIDE: outside_advice, CAP: cap_advice,
           UNDETERMINED: undetermined_advice}[verdict](f, helps, in_force)
    past = [w.alloc_conf for w in what_ifs if w.outcome == GETS_PAST]
    if past:
        out.append(f"Simulated on this trace, {' and '.join(past)} gets past this OOM; the recording ends there, so "
                   "whether the run runs out of memory later (the rest of the step, the next steps) was not simulated.")
    unknown = next((w.claim for w in what_ifs if w.outcome == "unknown"), None)
    if unknown:
        out.append(f"The simulation cannot judge the settings: {unknown}.")
    return out


def room_sentence(f: OomFacts) -> str:
    """Cached free + device free against the request, with the difference named."""
    cached, free, q = f.cached_free or 0, f.free or 0, f.requested or 0
    both = cached + free
    parts = f"{fb(cached)} cached but unallocated" + (f" + {fb(free)} free on the device = {fb(both)}" if free else "")
    if both - q > DEFRAG_MARGIN:
        return f"{parts}, {fb(both - q)} more than the {fb(q)} requested"
    if both >= q:
        return (f"{parts}, only {fb(both - q)} more than the {fb(q)} requested: less than the {fb(DEFRAG_MARGIN)} "
                "that the CUDA context and the driver's page rounding can take, so no allocator setting could "
                "reliably have found the memory")
    return f"{parts}, {fb(q - both)} short of the {fb(q)} requested: not even a defragmented cache could serve it"


def _exhaustion(f: OomFacts, helps: dict[str, bool], in_force: InForce) -> list[str]:
    if f.total is not None and f.requested > f.total:
        out = [f"The request alone ({fb(f.requested)}) is larger than the whole device ({fb(f.total)}): no setting "
               "can place it. Split the computation (chunk the batch, the sequence or the attention)."]
    else:
        out = [room_sentence(f) + "."] if f.cached_free is not None else []
        if f.allocated is not None:
            out.append(f"Live tensors hold {fb(f.allocated)}"
                       + (f" of the {fb(f.reserved)} reserved" if f.reserved is not None else "")
                       + f", and {fb(f.requested)} more was needed: the job needs more memory than the device gives it.")
    out.append(REDUCE)
    for conf, ok in helps.items():
        out.append(f"Simulated on this trace, {conf} avoids the OOM, but the figures leave no safe margin: it may "
                   "help, not reliably." if ok else
                   f"{conf} would not help: simulated on this trace, the run still runs out of memory.")
    return out


def _fragmentation(f: OomFacts, helps: dict[str, bool], in_force: InForce) -> list[str]:
    shown = f.largest_free_block is not None and (f.requested is None or f.largest_free_block < f.requested)
    largest = f" (the largest is {fb(f.largest_free_block)})" if shown else ""  # a later state's may be larger
    out = [room_sentence(f) + f"; yet no cached free block could serve the request{largest}: the cached memory "
           "is fragmented."]
    return out + _expandable_advice(f, helps, in_force) + _split_advice(helps, in_force) + [STEADY]


def _expandable_advice(f: OomFacts, helps: dict[str, bool], in_force: InForce) -> list[str]:
    if in_force.expandable_segments:
        return [f"expandable_segments:True is already in force ({in_force.source}), so turning it on is no remedy: "
                "live tensors scattered through the segments still split the free memory between them."]
    if helps.get(EXPANDABLE) is False:
        return ["expandable_segments:True would not help here: simulated on this trace, it still runs out of memory."]
    how = (f"Add expandable_segments:True to PYTORCH_CUDA_ALLOC_CONF (now {in_force.conf})" if in_force.conf
           else "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    when = " (PyTorch 2.1 and later)" if f.era in LEGACY_ERAS else ""
    unless = (" Skip this if it is on already (what fragviz was given does not say)."
              if in_force.expandable_segments is None else "")
    proof = " Simulated on this trace, it avoids the OOM." if helps.get(EXPANDABLE) else ""
    return [f"{how}{when}: one growing segment per stream replaces separate cudaMallocs, so freed memory merges "
            f"instead of staying in slivers.{proof}{unless}"]


def _split_advice(helps: dict[str, bool], in_force: InForce) -> list[str]:
    if in_force.split_known and in_force.max_split_size is not None:
        return [f"max_split_size_mb is already set to {in_force.max_split_size // 2**20} ({in_force.source})."]
    if helps.get(SPLIT) is False:
        return ["max_split_size_mb:512 would not help here: simulated on this trace, it still runs out of memory."]
    proof = " Simulated on this trace, max_split_size_mb:512 avoids the OOM." if helps.get(SPLIT) else ""
    return ["Or set max_split_size_mb (for example 512) so that small requests do not split large cached blocks."
            + proof]
