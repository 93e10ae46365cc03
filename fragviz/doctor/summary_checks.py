"""Where a memory_summary() table and a snapshot or an OOM message cannot be the same run or moment.

A table counts from process start (or the last reset of its counters) up to when it was printed; a snapshot and
an OOM message are moments. What would contradict the table being printed later in the same process is said,
with what else could explain it (an earlier table, another run, a reset of the counters); where they can be the
same moment, the snapshot's free blocks are added to the table's figures.
"""
from __future__ import annotations

from fragviz.replay.analysis import Analysis, trace_totals
from fragviz.doctor.message import OomMessage, find_messages, parse_message
from fragviz.doctor.summary import MemorySummary
from fragviz.model.metrics import state_figures
from fragviz.model import OOM
from fragviz.base.units import MiB
from fragviz.base.units import format_bytes as fb

# A message prints two decimals of its unit: up to 0.005 GiB either way, and the message may be a moment later.
MESSAGE_SLACK = 12 * MiB


def first_message(message: str | None) -> OomMessage | None:
    for line in find_messages(message or ""):
        msg = parse_message(line)
        if msg is not None:
            return msg
    return None


def message_conflicts(s: MemorySummary, msg: OomMessage) -> list[str]:
    if s.device is not None and msg.device is not None and s.device != msg.device:
        return [f"The table is for device {s.device}, the OOM message for GPU {msg.device}: their figures are "
                "not combined."]
    out = []
    if s.num_ooms == 0:
        out.append("The table counts no OOM, yet the message reports one: the table was printed before that OOM, or "
                   "in another process or run (or after reset_accumulated_memory_stats()).")
    for what, metric, value in (("reserved", "reserved_bytes", msg.reserved), ("allocated", "allocated_bytes", msg.allocated)):
        peak = s.cell(metric, "peak")
        if value is not None and peak is not None and value - MESSAGE_SLACK > peak.upper:
            out.append(f"The message's {fb(value)} {what} is more than the table's peak {what} ({fb(peak.value)}): "
                       "the table was printed before the OOM, or in another process (or after reset_peak_memory_stats()).")
    peak = s.cell("reserved_bytes", "peak")
    if msg.total is not None and peak is not None and peak.value > msg.total + MESSAGE_SLACK:
        out.append(f"The table's peak reserved ({fb(peak.value)}) is more than the message's whole device "
                   f"({fb(msg.total)} total capacity): they are not the same device.")
    return out


def snapshot_checks(s: MemorySummary, analysis: Analysis) -> tuple[list[str], list[str]]:
    devices = sorted(analysis.replays)
    if not devices:
        return ["The snapshot holds no device to compare with the table."], []
    if s.device is not None and s.device not in analysis.replays:
        return [f"The table is for device {s.device}; the snapshot has device(s) {', '.join(map(str, devices))}: "
                "their figures are not combined."], []
    device = s.device if s.device is not None else devices[0]
    out = _snapshot_ooms(s, analysis, device) + _snapshot_peak(s, analysis, device)
    moment, findings = _same_moment(s, analysis, device)
    return out + moment, findings


def _snapshot_ooms(s: MemorySummary, analysis: Analysis, device: int) -> list[str]:
    recorded = int((analysis.replays[device].trace.action == OOM).sum())
    if s.num_ooms is None or recorded <= s.num_ooms:
        return []
    return [f"The snapshot records {recorded} OOM(s) on device {device}, the table counts {s.num_ooms}: the table was "
            "printed before them, or comes from another run (or after reset_accumulated_memory_stats())."]


def _snapshot_peak(s: MemorySummary, analysis: Analysis, device: int) -> list[str]:
    peak = s.cell("reserved_bytes", "peak")
    seen = trace_totals(analysis.snapshot, device).peak_reserved
    if peak is None or seen <= peak.upper:
        return []
    return [f"The snapshot reaches {fb(seen)} reserved on device {device}, more than the table's peak reserved "
            f"({fb(peak.value)}): the table was printed before that, or in another run (or after "
            "reset_peak_memory_stats())."]


def _same_moment(s: MemorySummary, analysis: Analysis, device: int) -> tuple[list[str], list[str]]:
    reserved = s.cell("reserved_bytes")
    if reserved is None:
        return [], []
    fig = state_figures(analysis.snapshot.segments_of(device))
    active = s.cell("active_bytes")
    same = reserved.value <= fig.reserved_bytes <= reserved.upper and (
        active is None or active.value <= fig.allocated_bytes <= active.upper)
    if not same:
        return [f"The snapshot ends with {fb(fig.reserved_bytes)} reserved on device {device}, the table shows "
                f"{fb(reserved.value)} now: not the same moment, so their figures are not combined."], []
    return [], [f"The snapshot's end state on device {device} matches the table's current figures ({fb(fig.reserved_bytes)} "
                f"reserved): its {fb(fig.free_bytes)} of free cached blocks lie in {fig.free_blocks} piece(s), the "
                f"largest {fb(fig.largest_free_block)}."]


def message_device(message: str | None) -> int | None:
    """The GPU the first OOM message in `message` names: which of several tables to read with it."""
    msg = first_message(message)
    return msg.device if msg is not None else None
