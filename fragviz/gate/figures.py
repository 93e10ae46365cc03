"""The figures a memory gate judges, per device: peak reserved, peak allocated, fragmentation at the reserved
peak, and the allocation sites holding memory at that peak. A `MemorySummary` is what `fragviz gate
--write-summary` and the pytest plugin write as a baseline: small JSON, no trace.

Every figure is the replay's own (`fragviz report` gives the same): the peaks are the maxima of the replayed
series over the traced window, the fragmentation is non-releasable / reserved at the reserved peak at its fullest
(`fullest_peak`), and the sites are `fragviz.usage.sites` labels of the live blocks in that state.

A site is the exact line of its allocations' site frame, with the code of that line, so that a candidate's sites are
matched to its baseline's across line shifts, comprehensions and lambdas (`fragviz.gate.sites`). A summary of version
1 (fragviz before lines were sites) held a site per file and function: it is still read, and compared function by
function (`sites_by_function`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from fragviz.base.errors import FragvizError
from fragviz.base.units import cut
from fragviz.gate.sites import SiteBytes, sites_of
from fragviz.model.metrics import fragmentation
from fragviz.replay.analysis import Analysis

SUMMARY_KIND = "fragviz-memory-summary"
PLACEMENTS = ("cuda tensors", "every tensor")  # fragviz.allocator.recorder's CUDA_TENSORS, EVERY_TENSOR
SUMMARY_VERSION = 2  # 2: a site is a line, with its code; 1: a file and function (read, compared by function)
READ_VERSIONS = (1, 2)
MAX_SUMMARY_BYTES = 4 * 1024 * 1024  # a summary is a few KiB; a larger "summary" is not one


class SummaryError(FragvizError):
    """A file given as a memory summary that is not one."""


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
    sites_by_function: bool = False  # read from a summary of version 1: a site is a file and function, not a line
    # simulated: which tensors were counted, "cuda tensors" (those the code placed on CUDA) or "every tensor" (code
    # that named no CUDA; also every simulated recording older than the distinction); None on a GPU
    placement: str | None = None

    def device(self, index: int) -> DeviceFigures | None:
        return next((d for d in self.devices if d.device == index), None)

    def as_dict(self) -> dict[str, Any]:
        version = 1 if self.sites_by_function else SUMMARY_VERSION
        return {"kind": SUMMARY_KIND, "version": version, "source": self.source, "simulated": self.simulated,
                "placement": self.placement, "devices": [d.as_dict() for d in self.devices],
                "warnings": list(self.warnings)}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=1) + "\n"


# -- from a replay ---------------------------------------------------------------------------------------------

def summarize(analysis: Analysis, source: str | None = None) -> MemorySummary:
    """The gate's figures of every device with a trace; a device without one has no peak to judge (absent)."""
    snap = analysis.snapshot
    devices = tuple(device_figures(analysis, d) for d in snap.devices() if len(snap.trace_of(d)))
    simulated = bool(snap.provenance and snap.provenance.get("origin") == "simulated")
    placement = _placement(simulated, snap.provenance.get("placement") if simulated else None)
    return MemorySummary(source or snap.source, devices, simulated, tuple(_untraced(analysis)), placement=placement)


def _placement(simulated: bool, given: Any) -> str | None:
    """What a simulated recording counted; one that does not say is older than the distinction: every tensor."""
    if not simulated:
        return None
    return given if given in PLACEMENTS else PLACEMENTS[1]


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
    version = data.get("version")
    if isinstance(version, bool) or version not in READ_VERSIONS:
        raise SummaryError(f"{where}: memory summary version {version!r} is not one this fragviz reads "
                           f"({', '.join(map(str, READ_VERSIONS))}): write it again with this fragviz")
    devices = _field(data, "devices", list, where)
    simulated = bool(data.get("simulated", False))
    placement = data.get("placement")
    if placement is not None and placement not in PLACEMENTS:
        raise SummaryError(f"{where}: placement {cut(str(placement), 40)!r} is none of {', '.join(PLACEMENTS)}")
    return MemorySummary(where, tuple(_device(d, f"{where}: devices[{i}]")
                                                               for i, d in enumerate(devices)),
                         simulated, tuple(str(w) for w in data.get("warnings", ())),
                         sites_by_function=version == 1, placement=_placement(simulated, placement))


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
                     None if frame is None else str(frame), _count(s, "bytes", where),
                     _optional(s, "line", int, where), _optional(s, "code", str, where))


def _optional(d: dict, name: str, kind, where: str) -> Any:
    """A field that may be absent or null (a site's line and code: a summary of version 1 has neither)."""
    if d.get(name) is None:
        return None
    return _count(d, name, where) if kind is int else _field(d, name, kind, where)


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
