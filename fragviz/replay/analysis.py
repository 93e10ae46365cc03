"""A snapshot analysed: every device replayed, and the warnings a user should read before trusting figures."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from fragviz.allocator.config import AllocatorSettings, settings_from_snapshot
import numpy as np

from fragviz.model.metrics import fragmentation, state_figures
from fragviz.model import NO_STACK, SEGMENT_MAP, Snapshot
from fragviz.replay.preview import (REQUESTED_ADDS, REQUESTED_SUBS, RESERVED_ADDS, RESERVED_SUBS,
                             running_total)
from fragviz.replay import DeviceReplay
from fragviz.replay.parallel import replay_devices

Progress = Callable[[int, int], None]  # (events done, events in all)


@dataclass
class Analysis:
    snapshot: Snapshot
    replays: dict[int, DeviceReplay]
    settings: AllocatorSettings
    warnings: list[str]


@dataclass(frozen=True)
class TraceTotals:
    start_requested: int
    peak_requested: int
    start_reserved: int
    peak_reserved: int
    warnings: tuple[str, ...]


def analyze(snapshot: Snapshot, progress: Progress | None = None, workers: int = 1) -> Analysis:
    """Replay every device of `snapshot` (in up to `workers` processes) and collect what does not add up."""
    settings = recorded_settings(snapshot)
    total = sum(len(t) for t in snapshot.traces.values()) or 1
    replays = replay_devices(snapshot, settings, progress, workers)
    warnings = list(snapshot.warnings)
    if not replays:
        warnings.append("the snapshot is empty: no segments and no trace events (it was taken before anything "
                        "was allocated on a CUDA device, or on a process that never used one)")
    for device, replay in replays.items():
        warnings.extend(replay.warnings)
        warnings.extend(trace_totals(snapshot, device).warnings)
        warnings.extend(capture_health(snapshot, replay))
    if progress is not None:
        progress(total, total)
    return Analysis(snapshot, replays, settings, warnings)


def recorded_settings(snapshot: Snapshot) -> AllocatorSettings:
    """The allocator settings the snapshot was taken under: its `allocator_settings` (PyTorch 2.4+); without
    them, expandable segments in its segments or trace show that one setting, and the rest are defaults."""
    settings = settings_from_snapshot(snapshot.allocator_settings)
    if snapshot.allocator_settings is None and _uses_expandable_segments(snapshot):
        settings = replace(settings, expandable_segments=True)
    return settings


def _uses_expandable_segments(snapshot: Snapshot) -> bool:
    return (any(s.is_expandable for s in snapshot.segments)
            or any(bool((t.action == SEGMENT_MAP).any()) for t in snapshot.traces.values()))


def trace_totals(snapshot: Snapshot, device: int) -> TraceTotals:
    """Requested and reserved bytes at the start of the trace and at their peak while walking it."""
    trace = snapshot.trace_of(device)
    final = state_figures(snapshot.segments_of(device))
    requested, req_warn = running_total(trace.action, trace.size, REQUESTED_ADDS, REQUESTED_SUBS,
                                        final.requested_bytes)
    reserved, res_warn = running_total(trace.action, trace.size, RESERVED_ADDS, RESERVED_SUBS, final.reserved_bytes)
    warnings = []
    if req_warn:
        warnings.append(f"device {device}: the trace frees {req_warn} more requested bytes than the final state "
                        "and its allocs explain; start_requested_bytes is reported as 0")
    if res_warn:
        warnings.append(f"device {device}: the trace releases {res_warn} more segment bytes than the final "
                        "segments and its segment allocs explain; start_reserved_bytes is reported as 0")
    return TraceTotals(int(requested[0]), int(requested.max()), int(reserved[0]), int(reserved.max()),
                       tuple(warnings))


@dataclass(frozen=True)
class PeakFigures:
    """The figures of the first state of most reserved bytes in a device's replayed trace window."""
    state: int
    reserved_bytes: int
    allocated_bytes: int
    non_releasable_bytes: int
    largest_free_block: int

    @property
    def fragmentation(self) -> float:
        return fragmentation(self.non_releasable_bytes, self.reserved_bytes)

    def as_dict(self) -> dict[str, int | float]:
        return {"state": self.state, "reserved_bytes": self.reserved_bytes, "allocated_bytes": self.allocated_bytes,
                "non_releasable_bytes": self.non_releasable_bytes, "fragmentation": self.fragmentation,
                "largest_free_block": self.largest_free_block}


def reserved_peak(analysis: Analysis, device: int) -> PeakFigures | None:
    """The first state of most reserved bytes in the replayed window (state 0 for a device without trace events;
    None where the replay kept no series)."""
    series = analysis.replays[device].series
    if not len(series.get("reserved", ())):
        return None
    state = int(np.argmax(series["reserved"]))
    return PeakFigures(state, int(series["reserved"][state]), int(series["allocated"][state]),
                       int(series["non_releasable"][state]), int(series["largest_gap"][state]))


def capture_health(snapshot: Snapshot, replay: DeviceReplay) -> list[str]:
    """What the way the snapshot was captured hides: a missing or truncated trace, missing stacks."""
    device, n = replay.device, len(replay.trace)
    out = []
    if n == 0:
        out.append(f"device {device}: no trace was recorded (memory history was off): only the final state is known")
    elif replay.pre_trace_blocks or replay.pre_trace_segments:
        out.append(f"device {device}: the trace covers only the last {n} events: {replay.pre_trace_blocks} blocks "
                   f"and {replay.pre_trace_segments} segments predate its first event (ring buffer full, or "
                   "history enabled mid-run)")
    segs = snapshot.segments_of(device)
    live = [b for s in segs for b in s.blocks if b.state.is_active]
    if live and all(b.stack == NO_STACK for b in live) and (n == 0 or (replay.trace.stack == NO_STACK).all()):
        out.append(f"device {device}: no stacks were recorded, so allocation sites are unknown "
                   "(record history with context='all')")
    return out
