"""A pasted OOM message and a snapshot, read together only when they can be the same run and the same device.

The device is the message's `GPU N`; a message that names none (PyTorch before 1.0, a driver error) is matched
by its figures to the one device whose recorded OOM asked for what it asked for, or read with a snapshot of one
device. They are not read together when the snapshot reserves more than the message's GPU holds, when the
message names a GPU the snapshot does not hold or its figures match another device's recorded OOM (another
device's state: `device_refusal`), or when the device's recorded OOMs asked for something else (or, at the one
that did, reserved what the message does not say). The message's figures are printed with two decimals, so
figures count as equal within `message.TOLERANCE`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fragviz.allocator.rules import allocation_size
from fragviz.replay.analysis import Analysis
from fragviz.doctor.message import OomMessage, close
from fragviz.base.errors import FragvizError
from fragviz.model.metrics import state_figures
from fragviz.model import OOM
from fragviz.base.units import format_bytes as fb

__all__ = ["DeviceMismatch", "Together", "close", "read_together"]


class DeviceMismatch(FragvizError):
    """The message is about another device than any state the snapshot could lend it."""


@dataclass
class Together:
    """Whether the message can describe the snapshot's run, on which device, why not, and where they meet."""

    device: int | None = None  # the snapshot's device the message is about
    oom_event: int | None = None  # the snapshot's `oom` entry the message describes
    conflicts: list[str] = field(default_factory=list)
    how: str = ""  # how the device was told: the message's GPU, its figures, the snapshot's only device
    device_refusal: str | None = None  # the message is about another device's state than this snapshot's
    unmatched: str | None = None  # no device can be told (a message naming no GPU, several devices)
    ooms_elsewhere: dict[int, int] = field(default_factory=dict)  # other devices' recorded OOMs: device -> count

    @property
    def same_run(self) -> bool:
        return not self.conflicts


def read_together(analysis: Analysis, msg: OomMessage) -> Together:
    devices = sorted(analysis.replays)
    if msg.device is not None and msg.device not in analysis.replays:
        why = (f"the message is about GPU {msg.device}, and the snapshot holds only device(s) "
               f"{', '.join(map(str, devices))}")
        return Together(conflicts=[why], device_refusal=why)
    device, how = _device_of(analysis, msg, devices)
    if device is None:
        return Together(unmatched=how)
    out = Together(device, how=how, ooms_elsewhere={d: n for d, n in _oom_counts(analysis).items() if d != device})
    elsewhere = _matching_elsewhere(analysis, msg, device)
    if elsewhere is not None:
        out.device_refusal = elsewhere
        out.conflicts.append(elsewhere)
        return out
    _check_size(analysis, device, msg, out)
    _check_ooms(analysis, device, msg, out)
    return out


def _device_of(analysis: Analysis, msg: OomMessage, devices: list[int]) -> tuple[int | None, str]:
    if msg.device is not None:
        return msg.device, f"the message's GPU {msg.device}"
    matched = [d for d in devices if _matching_oom(analysis, d, msg) is not None]
    if len(matched) == 1:
        k = _matching_oom(analysis, matched[0], msg)
        return matched[0], f"the message names no GPU; its figures match device {matched[0]}'s recorded OOM (event {k})"
    if len(devices) == 1:
        return devices[0], "the snapshot's only device (the message names no GPU)"
    return None, (f"the message names no GPU, and the snapshot holds devices {', '.join(map(str, devices))}"
                  + (" whose recorded OOMs its figures match more than one of" if matched else
                     " with no recorded OOM its figures match"))


def _oom_counts(analysis: Analysis) -> dict[int, int]:
    return {d: int((r.trace.action == OOM).sum()) for d, r in sorted(analysis.replays.items())
            if (r.trace.action == OOM).any()}


def _matching_oom(analysis: Analysis, device: int, msg: OomMessage) -> int | None:
    """The first recorded OOM of the device that asked for what the message asked for."""
    if msg.requested is None:
        return None
    trace = analysis.replays[device].trace
    for k in (trace.action == OOM).nonzero()[0].tolist():
        size = int(trace.size[k])
        if close(msg.requested, size) or close(msg.requested, allocation_size(size)):
            return k
    return None


def _matching_elsewhere(analysis: Analysis, msg: OomMessage, device: int) -> str | None:
    """The message's GPU recorded no OOM like it, and another device did: its state is another device's."""
    if _matching_oom(analysis, device, msg) is not None:
        return None
    for other in sorted(analysis.replays):
        k = _matching_oom(analysis, other, msg) if other != device else None
        if k is not None:
            return (f"the message names GPU {device}, but what it asked for ({fb(msg.requested)}) is the OOM the "
                    f"snapshot records on device {other} (event {k}), and device {device} records no such OOM")
    return None


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
    k = _matching_oom(analysis, device, msg)
    if k is None:
        asked = ", ".join(fb(s) for s in sorted({int(trace.size[h]) for h in hits})[:5])
        out.conflicts.append(f"the message asks for {fb(msg.requested)}, and the snapshot's {len(hits)} recorded "
                             f"OOM(s) asked for {asked}")
        return
    reserved = int(replay.series["reserved"][k])
    if msg.reserved is not None and not close(msg.reserved, reserved):
        out.conflicts.append(f"at its OOM of the same size (event {k}) the snapshot had {fb(reserved)} reserved, "
                             f"and the message says {fb(msg.reserved)}")
        return
    out.oom_event = k
