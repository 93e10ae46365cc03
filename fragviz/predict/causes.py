"""Why recordings cannot be predicted from, said with the cause where it can be told: the same recording given
twice, allocations whose number changes with the knob (a cache grown each token, an epoch of N / batch steps),
or a trace that starts part-way through the run."""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Sequence


from fragviz.base.units import format_bytes as fb
from fragviz.predict.runs import as_number
from fragviz.predict.workload import PredictionRefused, RecordedWorkload

if TYPE_CHECKING:
    from fragviz.predict.forecast import Unmatched

CAUSES_SHOWN = 2


def refuse_repeats(workloads: Sequence[RecordedWorkload], knobs: Sequence[float]) -> None:
    """PredictionRefused where one recording is given at two sizes: the same trace (addresses and times, which two
    runs never share), whatever the file's name. Every law would come out constant."""
    for i, a in enumerate(workloads):
        for j in range(i + 1, len(workloads)):
            b = workloads[j]
            if a.fingerprint and a.fingerprint == b.fingerprint and a.events == b.events:
                raise PredictionRefused(
                    f"{a.source}, {b.source}: cannot predict: the recordings given at sizes {as_number(knobs[i])} "
                    f"and {as_number(knobs[j])} are one recording (the same trace, event for event): record the "
                    "program at two sizes of the knob")


def too_different(workloads: Sequence[RecordedWorkload], knobs: Sequence[float], unmatched: Unmatched,
                  limit: float) -> str:
    """The refusal of recordings that do not match: the share unmatched, the largest sites, and the causes that
    can be told."""
    where = "; ".join(f"{fb(s.bytes)} at {s.site} (size {as_number(s.knob)})" for s in unmatched.sites[:3])
    names = ", ".join(w.source for w in workloads)
    text = (f"{names}: cannot predict: {unmatched.share:.1%} of the recorded bytes ({fb(unmatched.bytes)} in "
            f"{unmatched.allocations} allocations) do not match between the recordings, more than the "
            f"{limit:.0%} allowed: they do not look like one program at two sizes (largest: {where})")
    causes = growing_counts(workloads, knobs, [s.site for s in unmatched.sites]) + partial_traces(workloads)
    return text + "".join(f". {cause[0].upper()}{cause[1:]}" for cause in causes)


def growing_counts(workloads: Sequence[RecordedWorkload], knobs: Sequence[float], sites: Sequence[str]) -> list[str]:
    """Sentences for the unmatched sites whose number of allocations changes with the knob."""
    counts = [Counter(w.sites) for w in workloads]
    out: list[str] = []
    for site in dict.fromkeys(sites):
        per = [c.get(site, 0) for c in counts]
        if len(set(per)) > 1 and min(per) > 0:
            steps = ", ".join(f"{n} at {as_number(k)}" for n, k in zip(per, knobs))
            out.append(f"The number of allocations at {site} changes with the knob ({steps}): a cache grown each "
                       "step, or steps that depend on the knob (an epoch of N / batch). fragviz predicts programs "
                       "whose allocations keep their number: record a fixed number of steps (or tokens) at each size")
        if len(out) == CAUSES_SHOWN:
            break
    return out


def partial_traces(workloads: Sequence[RecordedWorkload]) -> list[str]:
    """Sentences for recordings whose trace starts part-way through the run: blocks live before its first event
    (PyTorch's max_entries cut the start, or the history was switched on after the weights were made)."""
    out = []
    for w in workloads:
        if w.live_at_start:
            start = int(w.sizes[:w.live_at_start].sum())
            out.append(f"the trace of {w.source} starts part-way through the run: {w.live_at_start} allocations "
                       f"({fb(start)}) predate its first event, so their order, and any peak before it, are unknown "
                       "(the history was switched on late, or PyTorch kept only the last max_entries events): "
                       "record from the start with a larger max_entries")
    return out[:CAUSES_SHOWN]
