"""The report: per-device figures (a Report record, the `fragviz report --json` object), and a short human
summary."""
from __future__ import annotations

import numpy as np

from fragviz.replay.analysis import Analysis, reserved_peak, trace_totals
from fragviz.base.errors import UsageError
from fragviz.doctor.records import DeviceReport, Report
from fragviz.model.metrics import PendingFrees, PoolFigures, StateFigures, pending_frees, pool_figures, state_figures
from fragviz.model import Segment, Snapshot
from fragviz.replay import EXACT_FIGURES, SIZES_NOTE
from fragviz.base.units import format_bytes
from fragviz.usage.kinds import kind_totals
from fragviz.usage.sites import top_sites
from fragviz.usage.stackless import device_kinds


def report_of(analysis: Analysis, at: int | None = None, device: int | None = None) -> Report:
    """The report of every device (or of `device`); with `at`, state figures are those after the first `at` events
    of each device."""
    snap = analysis.snapshot
    return Report(snap.source, snap.format, tuple(analysis.warnings),
                  tuple(device_report(analysis, d, at) for d in selected_devices(snap, device)))


def selected_devices(snapshot: Snapshot, device: int | None) -> list[int]:
    devices = snapshot.devices()
    if device is None:
        return devices
    if device not in devices:
        listed = ", ".join(map(str, devices)) or "none"
        raise UsageError(f"{snapshot.source}: no device {device} (devices with data: {listed})")
    return [device]


def state_at(analysis: Analysis, device: int, at: int | None) -> tuple[list[Segment], StateFigures]:
    """Segments and figures of a device after `at` events (the recorded final state when at is None or the end)."""
    snap = analysis.snapshot
    n = len(snap.trace_of(device))
    if at is not None and not 0 <= at <= n:
        raise UsageError(f"{snap.source}: event {at} is out of range for device {device} (its trace has {n} "
                         f"events: use 0 to {n})")
    if at is None or at == n:
        segments = snap.segments_of(device)
    else:
        segments = analysis.replays[device].segments_at(at)
    return segments, state_figures(segments)


def device_report(analysis: Analysis, device: int, at: int | None) -> DeviceReport:
    snap = analysis.snapshot
    trace = snap.trace_of(device)
    segments, fig = state_at(analysis, device, at)
    totals = trace_totals(snap, device)
    pending = pending_frees(segments)
    kinds, stackless = device_kinds(snap, analysis.replays[device].lifetimes())
    peak = peak_requested_state(analysis, device)
    peak_figures = reserved_peak(analysis, device) if len(trace) else None
    kinds_now, kinds_peak = kind_totals(segments, kinds), kind_totals(state_at(analysis, device, peak)[0], kinds)
    return DeviceReport(
        device=device, reserved_bytes=fig.reserved_bytes, allocated_bytes=fig.allocated_bytes,
        requested_bytes=fig.requested_bytes, free_bytes=fig.free_bytes, free_blocks=fig.free_blocks,
        largest_free_block=fig.largest_free_block, non_releasable_bytes=fig.non_releasable_bytes,
        fragmentation=fig.fragmentation, free_scatter=fig.free_scatter, at_peak=peak_figures,
        segments=fig.segments, blocks=fig.blocks, allocations=fig.allocations,
        trace_events=len(trace), trace_actions=trace.action_counts(),
        start_requested_bytes=totals.start_requested, peak_requested_bytes=totals.peak_requested,
        start_reserved_bytes=totals.start_reserved, peak_reserved_bytes=totals.peak_reserved,
        pools=tuple(pool_figures(segments)), pending_free_bytes=pending.bytes, pending_free_blocks=pending.blocks,
        kinds=kinds_now, kinds_at_peak=kinds_peak, kind_notes=stackless.notes(kinds_now, kinds_peak),
        peak_requested_state=peak)


def peak_requested_state(analysis: Analysis, device: int) -> int:
    """The state (events applied) of most requested bytes in the trace window, the first if several."""
    n = len(analysis.snapshot.trace_of(device))
    if n == 0:
        return 0
    return int(np.argmax(analysis.replays[device].series["requested"]))


def _private_largest(fig: StateFigures, pools: list[PoolFigures]) -> list[str]:
    general = next((p for p in pools if not p.is_private), None)
    room = general.largest_free_block if general else 0
    if not any(p.is_private for p in pools) or fig.largest_free_block <= room:
        return []
    return [f"  the largest gap lies in a private pool: a general request fits in at most {format_bytes(room)} "
            "without a new segment"]


def pool_lines(pools: list[PoolFigures]) -> list[str]:
    """The pools apart, when a private pool exists: the general pool's free memory is what general requests
    can use; a private pool's only serves requests made inside its CUDA graph or torch.cuda.MemPool."""
    if not any(p.is_private for p in pools):
        return []
    return [f"  {line}" for p in pools for line in pool_line(p).split("\n")]


def pool_line(p: PoolFigures) -> str:
    name = f"pool ({p.pool[0]}, {p.pool[1]})"
    plural = "s" if p.segments != 1 else ""
    head = f"{name:<13}{format_bytes(p.reserved_bytes):>11}  in {p.segments} segment{plural}, "
    if p.free_bytes == 0:
        head += "fully allocated"
    else:
        head += (f"{format_bytes(p.allocated_bytes)} allocated, {format_bytes(p.free_bytes)} free in {p.free_blocks} "
                 f"gaps; largest gap {format_bytes(p.largest_free_block)}; non-releasable "
                 f"{format_bytes(p.non_releasable_bytes)} (fragmentation {p.fragmentation:.1%})")
    if p.is_private:
        what = "a private pool (CUDA graph or torch.cuda.MemPool); general requests cannot use its free memory"
    else:
        what = "the general pool: its free memory and largest gap are what a general request can use"
    return f"{head}\n{'':<13}{what}"


def pending_lines(pending: PendingFrees, pools: list[PoolFigures]) -> list[str]:
    if not pending.blocks:
        return []
    where = ""
    if any(p.is_private for p in pools):
        where = " in " + ", ".join(f"pool ({p.pool[0]}, {p.pool[1]})" for p in pools if p.pending_free_blocks)
    return [f"  pending free {pending.blocks} block{'s' if pending.blocks != 1 else ''} "
            f"({format_bytes(pending.bytes)}){where} freed but waiting for other streams (active_pending_free): "
            "they return to the cache when those streams' work completes"]


def _kind_lines(analysis: Analysis, device: int, segments: list[Segment], when: str) -> list[str]:
    snap = analysis.snapshot
    kinds, stackless = device_kinds(snap, analysis.replays[device].lifetimes())
    shown = [kind_totals(segments, kinds)]
    out = [f"  by kind      {_kinds_text(shown[0])} ({when})"]
    if len(snap.trace_of(device)):
        peak = peak_requested_state(analysis, device)
        shown.append(kind_totals(state_at(analysis, device, peak)[0], kinds))
        out.append(f"  at the peak  {_kinds_text(shown[1])} (state after {peak} events, most requested bytes)")
    out.extend(f"    {kind}: {note}" for kind, note in stackless.notes(*shown).items())
    return out


def _kinds_text(totals: dict[str, int]) -> str:
    shown = [f"{kind} {format_bytes(size)}" for kind, size in sorted(totals.items(), key=lambda kv: -kv[1]) if size]
    return ", ".join(shown) or "nothing live"


def report_text(analysis: Analysis, at: int | None = None, device: int | None = None) -> str:
    snap = analysis.snapshot
    fmt = snap.format
    enc = f"{fmt.encoding}" + (f" protocol {fmt.pickle_protocol}" if fmt.pickle_protocol is not None else "")
    enc += ", gzip" if fmt.compression else ""
    lines = [f"{snap.source}: snapshot format {fmt.generation} ({fmt.torch_estimate}; {enc})"]
    for d in selected_devices(snap, device):
        lines.extend(_device_text(analysis, d, at))
    if analysis.warnings:
        lines.append("warnings:")
        lines.extend(f"  ! {w}" for w in analysis.warnings)
    return "\n".join(lines)


def _device_text(analysis: Analysis, device: int, at: int | None) -> list[str]:
    snap = analysis.snapshot
    segments, fig = state_at(analysis, device, at)
    trace = snap.trace_of(device)
    totals = trace_totals(snap, device)
    when = "final state" if at is None or at == len(trace) else f"state after {at} of {len(trace)} events"
    pools = pool_figures(segments)
    pending = pending_frees(segments)
    every = " (all pools)" if any(p.is_private for p in pools) else ""
    lines = [
        f"device {device} ({when})",
        f"  reserved     {format_bytes(fig.reserved_bytes):>11}  in {fig.segments} segments{every}",
        f"  allocated    {format_bytes(fig.allocated_bytes):>11}  in {fig.allocations} blocks "
        f"(requested {format_bytes(fig.requested_bytes)}{'; pending frees included' if pending.blocks else ''})",
        f"  cached free  {format_bytes(fig.free_bytes):>11}  in {fig.free_blocks} gaps; the largest request the cache "
        f"can serve now {format_bytes(fig.largest_free_block)}; free scatter {fig.free_scatter:.1%}{every}",
        f"  fragmentation {fig.fragmentation:>6.1%}      non-releasable {format_bytes(fig.non_releasable_bytes)} of "
        f"{format_bytes(fig.reserved_bytes)} reserved: free memory empty_cache() could not give back{every}",
    ]
    lines.extend(_private_largest(fig, pools))
    lines.extend(pool_lines(pools))
    lines.extend(pending_lines(pending, pools))
    if len(trace):
        actions = ", ".join(f"{a} {c}" for a, c in trace.action_counts().items())
        lines.append(f"  trace        {len(trace)} events ({actions})")
        lines.append(f"  peak         requested {format_bytes(totals.peak_requested)}, reserved "
                     f"{format_bytes(totals.peak_reserved)}")
        peak = reserved_peak(analysis, device)
        if peak is not None:
            lines.append(f"  at the reserved peak (state {peak.state})  fragmentation {peak.fragmentation:.1%}, "
                         f"non-releasable {format_bytes(peak.non_releasable_bytes)}, largest request the cache "
                         f"can serve {format_bytes(peak.largest_free_block)}")
    if when != "final state":
        lines.append(f"  exact: {', '.join(EXACT_FIGURES)}; inferred: the rest ({SIZES_NOTE})")
    lines.extend(_kind_lines(analysis, device, segments, when))
    sites = top_sites(segments, snap.stack_frames, limit=5)
    if sites:
        lines.append("  top allocation sites by live bytes:")
        lines.extend(f"    {format_bytes(s.bytes):>11}  {s.blocks:>5} blocks  {s.site}" for s in sites)
    return lines
