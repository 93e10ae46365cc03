"""The summary the store keeps of each snapshot (fragviz.store.records.Summary), worked out at ingest."""
from __future__ import annotations

from fragviz.replay.analysis import Analysis, reserved_peak, trace_totals
from fragviz.doctor.verdicts import diagnose
from fragviz.model.metrics import state_figures
from fragviz.store.records import DeviceSummary, Summary


def summary_of(analysis: Analysis) -> Summary:
    """Every device's final figures, peaks, fragmentation at the reserved peak, and OOM verdicts."""
    verdicts: dict[int, list[str]] = {}
    for oom in diagnose(analysis, simulate=False):  # without a message: the trace's OOMs, in trace order
        verdicts.setdefault(int(oom.device), []).append(oom.verdict)
    return Summary(tuple(_device(analysis, d, tuple(verdicts.get(d, ()))) for d in analysis.snapshot.devices()))


def _device(analysis: Analysis, device: int, verdicts: tuple[str, ...]) -> DeviceSummary:
    snap = analysis.snapshot
    trace = snap.trace_of(device)
    final = state_figures(snap.segments_of(device))
    totals = trace_totals(snap, device)
    peak = reserved_peak(analysis, device)
    return DeviceSummary(
        device=device, trace_events=len(trace), trace_actions=trace.action_counts(),
        reserved_bytes=final.reserved_bytes, allocated_bytes=final.allocated_bytes,
        requested_bytes=final.requested_bytes, free_bytes=final.free_bytes,
        largest_free_block=final.largest_free_block, fragmentation=final.fragmentation,
        non_releasable_bytes=final.non_releasable_bytes, free_scatter=final.free_scatter,
        segments=final.segments, blocks=final.blocks,
        peak_reserved_bytes=totals.peak_reserved, peak_requested_bytes=totals.peak_requested,
        peak_state=peak.state if peak else None, fragmentation_at_peak=peak.fragmentation if peak else None,
        non_releasable_at_peak=peak.non_releasable_bytes if peak else None, verdicts=verdicts)
