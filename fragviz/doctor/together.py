"""A pasted OOM message and a snapshot, read together only when they can be the same run.

They cannot be when the snapshot reserves more than the message's GPU holds, when the message names a GPU the
snapshot does not hold, or when the snapshot records OOMs and none asked for what the message asked for (or,
at the one that did, reserved what the message says). The message's figures are printed with two decimals,
so figures count as equal within `TOLERANCE` of the larger.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fragviz.allocator.rules import allocation_size
from fragviz.analysis import Analysis
from fragviz.doctor.message import OomMessage
from fragviz.metrics import state_figures
from fragviz.model import OOM
from fragviz.units import format_bytes as fb

TOLERANCE = 0.006  # "22.25 GiB" stands for anything within 0.005 GiB of it: 0.5 % of a figure of 1.00 or more


@dataclass
class Together:
    """Whether the message can describe the snapshot's run, why not, and where they meet."""

    device: int | None = None  # the snapshot's device the message is about
    oom_event: int | None = None  # the snapshot's `oom` entry the message describes
    conflicts: list[str] = field(default_factory=list)

    @property
    def same_run(self) -> bool:
        return not self.conflicts


def close(a: int, b: int) -> bool:
    return abs(a - b) <= TOLERANCE * max(a, b) + 1024


def read_together(analysis: Analysis, msg: OomMessage) -> Together:
    devices = list(analysis.replays)
    if msg.device is not None and devices and msg.device not in devices:
        return Together(None, None, [f"the message is about GPU {msg.device}, and the snapshot holds only device(s) "
                                     f"{', '.join(map(str, devices))}"])
    device = msg.device if msg.device in analysis.replays else (devices[0] if len(devices) == 1 else None)
    if device is None:
        return Together()
    out = Together(device)
    _check_size(analysis, device, msg, out)
    _check_ooms(analysis, device, msg, out)
    return out


def _check_size(analysis: Analysis, device: int, msg: OomMessage, out: Together) -> None:
    if msg.total is None:
        return
    replay = analysis.replays[device]
    final = state_figures(analysis.snapshot.segments_of(device)).reserved_bytes
    peak = max(final, int(np.max(replay.series["reserved"])) if len(replay.series["reserved"]) else 0)
    if peak > msg.total and not close(peak, msg.total):
        out.conflicts.append(f"the snapshot reserves up to {fb(peak)} on device {device}, more than the "
                             f"{fb(msg.total)} the message's GPU has in all")


def _check_ooms(analysis: Analysis, device: int, msg: OomMessage, out: Together) -> None:
    replay = analysis.replays[device]
    trace = replay.trace
    hits = (trace.action == OOM).nonzero()[0].tolist()
    if not hits or msg.requested is None:
        return
    sizes = [int(trace.size[k]) for k in hits]
    found = [k for k, s in zip(hits, sizes) if close(msg.requested, s) or close(msg.requested, allocation_size(s))]
    if not found:
        asked = ", ".join(fb(s) for s in sorted(set(sizes))[:5])
        out.conflicts.append(f"the message asks for {fb(msg.requested)}, and the snapshot's {len(hits)} recorded "
                             f"OOM(s) asked for {asked}")
        return
    k = found[0]
    reserved = int(replay.series["reserved"][k])
    if msg.reserved is not None and not close(msg.reserved, reserved):
        out.conflicts.append(f"at its OOM of the same size (event {k}) the snapshot had {fb(reserved)} reserved, "
                             f"and the message says {fb(msg.reserved)}")
        return
    out.oom_event = k
