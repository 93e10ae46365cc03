"""One recording's workload, read for a prediction: the program's requests in order (free-run's ops), with every
allocation's size and the site it came from, written so that two recordings of one program compare.

Blocks live when the trace starts (the model's weights, where the history was switched on after they were made)
are allocations too: they open the workload, in address order. The allocator's cache at the start (free
segments) is not: a prediction starts from an empty device.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from fragviz.base.errors import FragvizError
from fragviz.model import OOM, BlockState, Frame, Segment
from fragviz.replay.analysis import Analysis
from fragviz.simulate.freerun import Op, workload
from fragviz.simulate.whatif import recorded_capacity, refusal
from fragviz.usage.sites import NO_STACK_SITE, site_label

BEFORE_TRACE = "(live before the trace began)"


class PredictionRefused(FragvizError):
    """Recordings a prediction cannot honestly be made from: the message says why."""


@dataclass
class RecordedWorkload:
    """A recording's requests (`ops`), and per allocation (in order): its index among `ops`, size, site and the
    key two recordings are matched on (`symbols`: the stack's frames, directories left out)."""

    source: str
    device: int
    events: int
    ops: list[Op]
    alloc_at: np.ndarray  # int64: index into ops of each allocation
    sizes: np.ndarray  # int64: requested bytes
    symbols: list[tuple]
    sites: list[str]  # what a person reads: the allocation's site (fragviz.usage.sites)
    live_at_start: int = 0  # allocations live when the trace began (its first `live_at_start` ones)
    fingerprint: str = ""  # the trace's addresses, sizes and times: two runs never share them, a file and its copy do


def recorded_workload(analysis: Analysis, device: int) -> RecordedWorkload:
    """The device's workload, or PredictionRefused when there is none or when the run ran out of memory (a run cut
    short by an OOM holds only part of the program)."""
    source = analysis.snapshot.source
    if device not in analysis.replays:
        raise PredictionRefused(f"{source}: no device {device} (it has {_devices(analysis)})")
    reason = refusal(analysis, device)
    if reason is not None:
        raise PredictionRefused(f"{source}: {reason}")
    replay = analysis.replays[device]
    trace = replay.trace
    ooms = (trace.action == OOM).nonzero()[0]
    if len(ooms):
        raise PredictionRefused(f"{source}: the run ran out of memory at event {int(ooms[0])}, so the recording "
                                "holds only part of the program: record a run that completes")
    frames_of = analysis.snapshot.stack_frames
    symbol_of = _Symbols(frames_of)
    ops = _live_at_start(replay.segments_at(0), symbol_of)
    before = len(ops)
    capacity = recorded_capacity(analysis, device)
    ops.extend(op for op in workload(trace, replay.series["reserved"].tolist(), capacity) if op.kind != "oom_request")
    alloc_at = np.asarray([i for i, op in enumerate(ops) if op.kind == "alloc"], np.int64)
    sizes = np.asarray([ops[i].size for i in alloc_at.tolist()], np.int64)
    symbols = [symbol_of(ops[i].stack, i < before) for i in alloc_at.tolist()]
    sites = [symbol_of.site(ops[i].stack, i < before) for i in alloc_at.tolist()]
    return RecordedWorkload(source, device, len(trace), ops, alloc_at, sizes, symbols, sites, before,
                            _fingerprint(trace))


def _fingerprint(trace) -> str:
    digest = hashlib.sha256(np.ascontiguousarray(trace.addr).tobytes())
    digest.update(np.ascontiguousarray(trace.size).tobytes())
    digest.update(np.ascontiguousarray(trace.time_us).tobytes())
    return digest.hexdigest()


def _live_at_start(segments: Sequence[Segment], symbol_of: "_Symbols") -> list[Op]:
    """The blocks allocated when the trace began, as allocations opening the workload. Nothing records the order
    they were made in, so they go by site, then size, then address: the order two recordings share where the sizes
    follow one law. Blocks already freed by the program (pending on another stream) are left out: on their way
    out, they would otherwise stay for the whole prediction."""
    live = [(symbol_of(b.stack, True), b.requested_size or b.size, b.address, seg.stream, b.stack)
            for seg in segments for b in seg.blocks if b.state is BlockState.ACTIVE_ALLOCATED]
    live.sort(key=lambda x: (repr(x[0]), x[1], x[2]))
    return [Op("alloc", 0, (address, 0), size, stream, stack) for _, size, address, stream, stack in live]


def traced_device(analysis: Analysis, wanted: int | None) -> int:
    """The device to predict: the one asked for, else the only traced one (else the first)."""
    if wanted is not None:
        return wanted
    traced = [d for d, r in analysis.replays.items() if len(r.trace)]
    return traced[0] if traced else (min(analysis.replays) if analysis.replays else 0)


def _devices(analysis: Analysis) -> str:
    return ", ".join(str(d) for d in sorted(analysis.replays)) or "none"


class _Symbols:
    """A stack as the key of its allocations: its frames without directories (two checkouts of one program
    match), interned per stack."""

    def __init__(self, frames_of) -> None:
        self._frames_of = frames_of
        self._known: dict[int, tuple] = {}
        self._sites: dict[int, str] = {}

    def __call__(self, stack: int, before: bool) -> tuple:
        key = self._known.get(stack)
        if key is None:
            frames: Sequence[Frame] = self._frames_of(stack) if stack >= 0 else ()
            key = self._known[stack] = tuple((os.path.basename(f.filename), f.line, f.name) for f in frames)
        return (BEFORE_TRACE, key) if before else key

    def site(self, stack: int, before: bool) -> str:
        text = self._sites.get(stack)
        if text is None:
            text = self._sites[stack] = site_label(self._frames_of(stack)) if stack >= 0 else NO_STACK_SITE
        return f"{BEFORE_TRACE} {text}" if before else text
