"""The figures a memory gate judges, per device: peak reserved, peak allocated, fragmentation at the reserved
peak, and the allocation sites holding memory at that peak. A `MemorySummary` is what `fragviz gate
--write-summary` and the pytest plugin write as a baseline: small JSON, no trace.

Every figure is the replay's own (`fragviz report` gives the same): the peaks are the maxima of the replayed
series over the traced window, the fragmentation is non-releasable / reserved at the reserved peak at its fullest
(`fullest_peak`), and the sites are `fragviz.usage.sites` labels of the live blocks in that state.

Sites are matched between two runs by a key that survives an edit elsewhere in the file and a different checkout
directory: the site frame's last two path components and its function, without the line (`site_key`).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from fragviz.base.errors import FragvizError
from fragviz.model import Frame
from fragviz.model.metrics import fragmentation
from fragviz.replay.analysis import Analysis
from fragviz.snapshot.frames import is_user_frame
from fragviz.usage.sites import NO_STACK_SITE, site_frame, site_label

SUMMARY_KIND = "fragviz-memory-summary"
SUMMARY_VERSION = 1
SITES_KEPT = 50  # sites per device in a summary: the growth of a site past these is not told apart
MAX_SUMMARY_BYTES = 4 * 1024 * 1024  # a summary is a few KiB; a larger "summary" is not one


class SummaryError(FragvizError):
    """A file given as a memory summary that is not one."""


@dataclass(frozen=True)
class SiteBytes:
    """Live bytes of one allocation site at the reserved peak."""

    key: str  # what matches the site across two runs (site_key)
    site: str  # "filename:line function", as the dashboard labels it
    frame: str | None  # the innermost user frame (Python outside torch), None when the stack has none
    bytes: int

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "site": self.site, "frame": self.frame, "bytes": self.bytes}


@dataclass(frozen=True)
class DeviceFigures:
    device: int
    trace_events: int
    peak_reserved_bytes: int
    peak_allocated_bytes: int
    fragmentation: float  # at peak_state
    peak_state: int  # the reserved peak at its fullest (events applied): fullest_peak
    whole_run: bool  # False when the trace starts mid-run: the peaks are the traced window's
    sites: tuple[SiteBytes, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "trace_events": self.trace_events,
                "peak_reserved_bytes": self.peak_reserved_bytes, "peak_allocated_bytes": self.peak_allocated_bytes,
                "fragmentation": self.fragmentation, "peak_state": self.peak_state, "whole_run": self.whole_run,
                "sites": [s.as_dict() for s in self.sites]}


@dataclass(frozen=True)
class MemorySummary:
    """A run's memory figures, device by device; `simulated` when the trace was served by fragviz's model on a CPU."""

    source: str
    devices: tuple[DeviceFigures, ...]
    simulated: bool
    warnings: tuple[str, ...] = ()

    def device(self, index: int) -> DeviceFigures | None:
        return next((d for d in self.devices if d.device == index), None)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": SUMMARY_KIND, "version": SUMMARY_VERSION, "source": self.source, "simulated": self.simulated,
                "devices": [d.as_dict() for d in self.devices], "warnings": list(self.warnings)}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=1) + "\n"


# -- from a replay ---------------------------------------------------------------------------------------------

def summarize(analysis: Analysis, source: str | None = None) -> MemorySummary:
    """The gate's figures of every device with a trace; a device without one has no peak to judge (absent)."""
    snap = analysis.snapshot
    devices = tuple(device_figures(analysis, d) for d in snap.devices() if len(snap.trace_of(d)))
    simulated = bool(snap.provenance and snap.provenance.get("origin") == "simulated")
    return MemorySummary(source or snap.source, devices, simulated, tuple(_untraced(analysis)))


def _untraced(analysis: Analysis) -> list[str]:
    snap = analysis.snapshot
    return [f"device {d} has no trace (memory history was off): its peaks are unknown, so it is not judged"
            for d in snap.devices() if not len(snap.trace_of(d))]


def device_figures(analysis: Analysis, device: int) -> DeviceFigures:
    replay = analysis.replays[device]
    series = replay.series
    peak = fullest_peak(series["reserved"], series["allocated"])
    reserved = int(series["reserved"][peak])
    segments = replay.segments_at(peak)
    sites = sites_of(segments, analysis.snapshot.stack_frames)
    return DeviceFigures(
        device=device, trace_events=len(replay.trace), peak_reserved_bytes=reserved,
        peak_allocated_bytes=int(series["allocated"].max()),
        fragmentation=fragmentation(int(series["non_releasable"][peak]), reserved), peak_state=peak,
        whole_run=not (replay.pre_trace_blocks or replay.pre_trace_segments), sites=sites)


def fullest_peak(reserved: np.ndarray, allocated: np.ndarray) -> int:
    """The reserved peak at its fullest: of the states with most reserved bytes, the first with most allocated bytes.
    The first state of most reserved bytes is right after a segment_alloc, before the alloc that needed the segment:
    that allocation (a leak's, often) would be missing from the peak's sites."""
    plateau = np.flatnonzero(reserved == reserved.max())
    return int(plateau[int(np.argmax(allocated[plateau]))])


def sites_of(segments: Sequence, frames_of, limit: int = SITES_KEPT) -> tuple[SiteBytes, ...]:
    """Live bytes by site key in a state (active blocks, pending frees included), most bytes first."""
    by_stack: dict[int, int] = {}
    for seg in segments:
        for b in seg.blocks:
            if b.state.is_active:
                by_stack[b.stack] = by_stack.get(b.stack, 0) + b.size
    merged: dict[str, dict[tuple[str, str | None], int]] = {}  # key -> {(site, user frame): bytes}
    for stack, size in by_stack.items():
        frames = frames_of(stack) if stack >= 0 else []
        labels = merged.setdefault(site_key(frames), {})
        label = (site_label(frames), user_frame(frames))
        labels[label] = labels.get(label, 0) + size
    totals = {key: sum(labels.values()) for key, labels in merged.items()}
    ranked = sorted(totals, key=lambda key: (-totals[key], key))[:limit]
    out = []
    for key in ranked:  # the label (and user frame) of the key's largest share of bytes names it
        (site, frame), _ = max(merged[key].items(), key=lambda kv: (kv[1], kv[0][0]))
        out.append(SiteBytes(key, site, frame, totals[key]))
    return tuple(out)


def site_key(frames: Sequence[Frame]) -> str:
    """The site frame's last two path components and function: the same site in two checkouts, or after lines
    moved above it, has the same key."""
    if not frames:
        return NO_STACK_SITE
    chosen = site_frame(frames)
    if chosen is None:
        return site_label(frames)
    parts = chosen.filename.replace("\\", "/").split("/")
    return f"{'/'.join(parts[-2:])} {chosen.name}"


def user_frame(frames: Sequence[Frame]) -> str | None:
    """The innermost user frame, "filename:line function"."""
    found = next((f for f in frames if is_user_frame(f)), None)
    return None if found is None else f"{found.filename}:{found.line} {found.name}"


# -- from JSON ---------------------------------------------------------------------------------------------------

def is_summary_file(path: str) -> bool:
    """A JSON file that says it is a memory summary (its first bytes are '{' and it names its kind)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and SUMMARY_KIND.encode() in head


def read_summary(path: str) -> MemorySummary:
    """A summary file, checked field by field: a clear error names the file and what is wrong. It is read as every
    small input is (fragviz.base.files.read_small): a regular file of at most MAX_SUMMARY_BYTES; a FIFO, a device
    (a link to /dev/zero) or a directory is refused in one line, unread and without waiting."""
    from fragviz.base.errors import InputError
    from fragviz.base.files import read_small

    try:
        data = json.loads(read_small(path, MAX_SUMMARY_BYTES, "memory summary").decode("utf-8"))
    except InputError as exc:
        raise SummaryError(str(exc)) from None
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError; RecursionError: nested too deep
        raise SummaryError(f"{path}: not a memory summary: invalid JSON ({str(exc).splitlines()[0]})") from None
    return summary_from_dict(data, path)  # named by its own path: the run it summarises is in "source"


def summary_from_dict(data: Any, where: str) -> MemorySummary:
    if not isinstance(data, dict) or data.get("kind") != SUMMARY_KIND:
        raise SummaryError(f"{where}: not a memory summary (no \"kind\": \"{SUMMARY_KIND}\")")
    if data.get("version") != SUMMARY_VERSION:
        raise SummaryError(f"{where}: memory summary version {data.get('version')!r} is not one this fragviz reads "
                           f"({SUMMARY_VERSION})")
    devices = _field(data, "devices", list, where)
    return MemorySummary(where, tuple(_device(d, f"{where}: devices[{i}]")
                                                               for i, d in enumerate(devices)),
                         bool(data.get("simulated", False)), tuple(str(w) for w in data.get("warnings", ())))


def _device(d: Any, where: str) -> DeviceFigures:
    if not isinstance(d, dict):
        raise SummaryError(f"{where}: not an object")
    sites = tuple(_site(s, f"{where}.sites[{i}]") for i, s in enumerate(_field(d, "sites", list, where)))
    frag = _field(d, "fragmentation", (int, float), where)
    if not 0 <= frag <= 1:
        raise SummaryError(f"{where}: fragmentation {frag} is not a ratio between 0 and 1")
    return DeviceFigures(_count(d, "device", where), _count(d, "trace_events", where),
                         _count(d, "peak_reserved_bytes", where), _count(d, "peak_allocated_bytes", where),
                         float(frag), _count(d, "peak_state", where), bool(d.get("whole_run", True)), sites)


def _site(s: Any, where: str) -> SiteBytes:
    if not isinstance(s, dict):
        raise SummaryError(f"{where}: not an object")
    frame = s.get("frame")
    return SiteBytes(str(_field(s, "key", str, where)), str(_field(s, "site", str, where)),
                     None if frame is None else str(frame), _count(s, "bytes", where))


def _field(d: dict, name: str, kind, where: str) -> Any:
    value = d.get(name)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise SummaryError(f"{where}: \"{name}\" is missing or not a {_kind_name(kind)}")
    return value


def _count(d: dict, name: str, where: str) -> int:
    value = _field(d, name, int, where)
    if value < 0:
        raise SummaryError(f"{where}: \"{name}\" is negative ({value})")
    return value


def _kind_name(kind) -> str:
    names = {list: "list", str: "string", int: "whole number"}
    return names.get(kind, "number")
