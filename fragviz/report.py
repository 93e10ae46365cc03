"""The report: per-device figures as the `fragviz report --json` object, and a short human summary."""
from __future__ import annotations

from collections import defaultdict
from typing import Any

from fragviz.analysis import Analysis, trace_totals
from fragviz.errors import UsageError
from fragviz.metrics import StateFigures, state_figures
from fragviz.model import NO_STACK, Frame, Segment, Snapshot
from fragviz.replay import EXACT_FIGURES, SIZES_NOTE
from fragviz.snapshot.frames import is_internal, is_user_frame
from fragviz.units import format_bytes


def report_dict(analysis: Analysis, at: int | None = None, device: int | None = None) -> dict[str, Any]:
    """The report object; with `at`, state figures are those after the first `at` events of each device."""
    snap = analysis.snapshot
    return {
        "source": snap.source,
        "format": snap.format.as_dict(),
        "warnings": list(analysis.warnings),
        "devices": [device_report(analysis, d, at) for d in selected_devices(snap, device)],
    }


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


def device_report(analysis: Analysis, device: int, at: int | None) -> dict[str, Any]:
    snap = analysis.snapshot
    trace = snap.trace_of(device)
    _, fig = state_at(analysis, device, at)
    totals = trace_totals(snap, device)
    return {
        "device": device,
        "reserved_bytes": fig.reserved_bytes, "allocated_bytes": fig.allocated_bytes,
        "requested_bytes": fig.requested_bytes, "free_bytes": fig.free_bytes, "free_blocks": fig.free_blocks,
        "largest_free_block": fig.largest_free_block, "fragmentation": fig.fragmentation,
        "segments": fig.segments, "blocks": fig.blocks, "allocations": fig.allocations,
        "trace_events": len(trace), "trace_actions": trace.action_counts(),
        "start_requested_bytes": totals.start_requested, "peak_requested_bytes": totals.peak_requested,
        "start_reserved_bytes": totals.start_reserved, "peak_reserved_bytes": totals.peak_reserved,
    }


def top_sites(snapshot: Snapshot, segments: list[Segment], limit: int = 5) -> list[tuple[str, int, int]]:
    """(site, live bytes, blocks) of the allocation sites holding the most live bytes, largest first."""
    bytes_by: dict[str, int] = defaultdict(int)
    count_by: dict[str, int] = defaultdict(int)
    for seg in segments:
        for b in seg.blocks:
            if b.state.is_active:
                site = site_label(snapshot.stack_frames(b.stack)) if b.stack != NO_STACK else "(no stack recorded)"
                bytes_by[site] += b.size
                count_by[site] += 1
    ranked = sorted(bytes_by.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    return [(site, size, count_by[site]) for site, size in ranked]


def site_label(frames: list[Frame]) -> str:
    """The frame a user would look at: the innermost user frame, else Python frame, else non-internal frame."""
    chosen = next((f for f in frames if is_user_frame(f)), None)
    chosen = chosen or next((f for f in frames if f.filename.endswith(".py") and not is_internal(f)), None)
    chosen = chosen or next((f for f in frames if not is_internal(f)), None)
    if chosen is None:
        return "(only internal frames)"
    return f"{chosen.filename}:{chosen.line} {chosen.name}"


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
    lines = [
        f"device {device} ({when})",
        f"  reserved     {format_bytes(fig.reserved_bytes):>11}  in {fig.segments} segments",
        f"  allocated    {format_bytes(fig.allocated_bytes):>11}  in {fig.allocations} blocks "
        f"(requested {format_bytes(fig.requested_bytes)})",
        f"  cached free  {format_bytes(fig.free_bytes):>11}  in {fig.free_blocks} gaps; largest gap "
        f"{format_bytes(fig.largest_free_block)}; fragmentation {fig.fragmentation:.1%}",
    ]
    if len(trace):
        actions = ", ".join(f"{a} {c}" for a, c in trace.action_counts().items())
        lines.append(f"  trace        {len(trace)} events ({actions})")
        lines.append(f"  peak         requested {format_bytes(totals.peak_requested)}, reserved "
                     f"{format_bytes(totals.peak_reserved)}")
    if when != "final state":
        lines.append(f"  exact: {', '.join(EXACT_FIGURES)}; inferred: the rest ({SIZES_NOTE})")
    sites = top_sites(snap, segments)
    if sites:
        lines.append("  top allocation sites by live bytes:")
        lines.extend(f"    {format_bytes(size):>11}  {n:>5} blocks  {site}" for site, size, n in sites)
    return lines
