"""The doctor's what-ifs: the settings its advice would suggest, simulated on the trace, each entry next to
the recording, and a "cannot answer" entry with the reason where the simulation cannot tell.

A setting already in force is not simulated (it is the recording); the changes are made on top of the
recorded settings, as a user adding one option to PYTORCH_CUDA_ALLOC_CONF would.
"""
from __future__ import annotations

from dataclasses import replace

from fragviz.allocator.config import AllocatorSettings
from fragviz.replay.analysis import Analysis
from fragviz.doctor.advice import EXPANDABLE, SPLIT
from fragviz.doctor.inforce import InForce
from fragviz.doctor.records import BaselinePeaks, RecordedPeaks, WhatIfEntry
from fragviz.simulate.whatif import CANNOT_ANSWER, GETS_PAST, UNKNOWN, DeviceWhatIf, refusal, simulate_device
from fragviz.base.units import MiB
from fragviz.base.units import format_bytes as fb
NOT_RECORDED = ("the snapshot's trace does not record this OOM, so a simulation of the trace cannot say whether a "
                "setting would avoid it")


def runs_for(settings: AllocatorSettings, in_force: InForce) -> list[tuple[str, AllocatorSettings]]:
    """The what-if settings: each suggestion added to the recorded settings, unless it is in force already."""
    runs = []
    if not in_force.expandable_segments and not settings.expandable_segments:
        runs.append((EXPANDABLE, replace(settings, expandable_segments=True, conf=_joined(settings.conf, EXPANDABLE))))
    if settings.max_split_size is None and not (in_force.split_known and in_force.max_split_size is not None):
        runs.append((SPLIT, replace(settings, max_split_size=512 * MiB, conf=_joined(settings.conf, SPLIT))))
    return runs


def _joined(conf: str, option: str) -> str:
    return f"{conf},{option}" if conf else option


def what_if_entries(analysis: Analysis, device: int, in_force: InForce) -> list[WhatIfEntry]:
    """One entry per suggested setting for the OOMs of `device`."""
    runs = runs_for(analysis.settings, in_force)
    return [entry(r) for r in simulate_device(analysis, device, runs)] if runs else []


def cannot_answer(analysis: Analysis, device: int, in_force: InForce) -> list[WhatIfEntry]:
    """Entries for an OOM the trace does not hold: nothing the simulation can say about it."""
    reason = refusal(analysis, device) or NOT_RECORDED
    return [entry(DeviceWhatIf(device, label, reason)) for label, _ in runs_for(analysis.settings, in_force)]


def entry(r: DeviceWhatIf) -> WhatIfEntry:
    if r.status == CANNOT_ANSWER:
        return WhatIfEntry(r.label, CANNOT_ANSWER, CANNOT_ANSWER, None, f"{r.label}: cannot answer: {r.reason}",
                           reason=r.reason)
    given, baseline, rec = r.given, r.baseline, r.recorded
    return WhatIfEntry(
        r.label, r.status, r.outcome, r.avoids_oom, summary(r), claim=r.claim, device_memory_bytes=r.memory.bytes,
        peak_reserved_bytes=given.peak_reserved_bytes, ooms=given.oom_count,
        recorded=RecordedPeaks(rec.peak_reserved_bytes, rec.peak_requested_bytes, len(rec.ooms)),
        baseline=BaselinePeaks(baseline.peak_reserved_bytes, baseline.oom_count), start_notes=r.start.notes)


def summary(r: DeviceWhatIf) -> str:
    known = r.memory.bytes is not None
    of = f" of {fb(r.memory.bytes)}" if known else ""
    none = "no OOM up to the end of the recording" if r.outcome == GETS_PAST else "no OOM"
    ooms = (f"{r.given.oom_count} OOM(s)" if r.given.oom_count else none) if known else "OOMs not simulated"
    rec = r.recorded
    base = r.baseline
    return (f"with {r.label} peak reserved would have been {fb(r.given.peak_reserved_bytes)}{of}: {ooms} "
            f"(recorded: peak reserved {fb(rec.peak_reserved_bytes)}, {len(rec.ooms)} OOM(s); simulated "
            f"under the recorded settings: {fb(base.peak_reserved_bytes)}, {base.oom_count} OOM(s)); "
            + ("cannot tell: " if r.outcome == UNKNOWN else "so ") + r.claim)
