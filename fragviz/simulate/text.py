"""Human summaries of simulation results."""
from __future__ import annotations

from fragviz.replay.analysis import Analysis
from fragviz.simulate.records import (CANNOT_ANSWER, GETS_PAST, UNKNOWN, CertainOom, DeviceMemory, DeviceWhatIf,
                                      FollowResult, OomAt, Reservation, RunFigures, WhatIfResult)
from fragviz.base.units import format_bytes

_MEMORY_SOURCES = {"given": "as given", "the first recorded OOM": "reserved + device free at the first recorded OOM"}


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({a / b:.1%})" if b else "0/0"


def follow_text(analysis: Analysis, result: FollowResult) -> str:
    lines = [f"{analysis.snapshot.source}: follow mode (predict each recorded malloc, then continue from the truth)"]
    for d in result.devices:
        if not d.alloc_events:
            lines.append(f"device {d.device}: the trace holds no alloc event: nothing to follow")
            continue
        if d.certain_oom:
            lines.append(f"device {d.device}: {certain_oom_sentence(d.certain_oom)}")
        lines.append(f"device {d.device}: alloc addresses {_pct(d.alloc_address_matches, d.alloc_events)}, "
                     f"device allocations {_pct(d.segment_allocs_matched, d.segment_allocs_recorded)} "
                     f"(predicted {d.segment_allocs_predicted}), final state "
                     f"{'matches' if d.final_state_matches else 'DIFFERS'}")
        lines.extend(_reservation_line(r) for r in d.reservations)
        for m in d.mismatches[:5]:
            lines.append(f"  event {m.event} {m.action}: recorded {m.recorded}, predicted {m.predicted}")
    return "\n".join(lines)


def _reservation_line(r: Reservation) -> str:
    extent = "extent unknown" if r.limit_bytes is None else f"up to {format_bytes(r.limit_bytes)}"
    return f"  expandable reservation: {r.pool} pool, stream {r.stream:#x}, at {r.base:#x} ({extent})"


def ooms_text(ooms: tuple[OomAt, ...], known: bool = True, until_recording_ends: bool = False) -> str:
    """"no OOM" only where the device size is known; otherwise that OOMs were not simulated.
    `until_recording_ends`: the recording ends at its failure, so "no OOM" holds only that far."""
    if ooms:
        first = ooms[0]
        return f"{len(ooms)} OOM(s), the first at event {first.event} ({format_bytes(first.requested_bytes)} requested)"
    if not known:
        return "OOMs not simulated (device size unknown)"
    return "no OOM up to the end of the recording" if until_recording_ends else "no OOM"


def run_line(label: str, run: RunFigures, known: bool = True, width: int = 34,
             until_recording_ends: bool = False) -> str:
    capacity = run.device_memory_bytes
    of = f" of {format_bytes(capacity)}" if capacity else ""
    return (f"  {label:<{width}} peak reserved {format_bytes(run.peak_reserved_bytes)}{of}, peak requested "
            f"{format_bytes(run.peak_requested_bytes)}, peak allocated {format_bytes(run.peak_allocated_bytes)}, "
            f"fragmentation {_at_peak(run)}final {run.final_fragmentation:.1%}: "
            f"{ooms_text(run.ooms, known, until_recording_ends)}")


def _at_peak(run: RunFigures) -> str:
    return "" if run.peak_fragmentation is None else f"at peak reserved {run.peak_fragmentation:.1%}, "


def memory_line(memory: DeviceMemory) -> str:
    if memory.bytes is None:
        return "device size unknown (pass --device-memory SIZE to ask about OOMs)"
    return f"device size {format_bytes(memory.bytes)} ({_MEMORY_SOURCES.get(memory.source, memory.source)})"


def certain_oom_sentence(c: CertainOom) -> str:
    return (f"an OOM is certain: the request at event {c.event} ({format_bytes(c.request_bytes)}) alone is "
            f"larger than the device's {format_bytes(c.device_memory_bytes)}, whatever the allocator settings")


def device_what_if_lines(d: DeviceWhatIf) -> list[str]:
    """One device's what-if: a refusal, or the recording and the simulations side by side, then the claim (and,
    where a single request exceeds the device, that an OOM is certain)."""
    if d.status == CANNOT_ANSWER:
        return [f"device {d.device}: cannot simulate: {d.reason}"]
    known = d.memory.bytes is not None
    given = f"simulated, {d.label}"
    width = max(len(given), len("simulated, recorded settings"))
    lines = [f"device {d.device}: {memory_line(d.memory)}",
             run_line("recorded", d.recorded, width=width),
             run_line("simulated, recorded settings", d.baseline, known, width, d.outcome == GETS_PAST),
             run_line(given, d.given, known, width, d.outcome == GETS_PAST)]
    lines.append(("  cannot tell: " if d.outcome == UNKNOWN else "  => ") + d.claim)
    if d.certain_oom:
        lines.append("  => " + certain_oom_sentence(d.certain_oom))
    lines.extend(_changed_kind_line(k) for k in d.changed_kinds)
    lines.extend(f"  note: {n}" for n in d.change_notes + d.start.notes)
    return lines


def _changed_kind_line(k: dict) -> str:
    """A kind a code what-if changed: its allocations made during the trace, and their bytes, before and after."""
    return (f"  changed {k['kind']}: {k['allocations_before']} allocations, {format_bytes(k['bytes_before'])} "
            f"-> {k['allocations_after']} allocations, {format_bytes(k['bytes_after'])} (made during the trace)")


def what_if_text(analysis: Analysis, conf: str | None, result: WhatIfResult, changes: str = "") -> str:
    """`changes`: the code what-ifs' label (simulate.reshape), where the workload was changed."""
    settings = "the recorded settings" if conf is None else (conf or "the default settings")
    workload = f"the workload with {changes}" if changes else "the recorded workload"
    lines = [f"{analysis.snapshot.source}: free-run of {workload} under {settings}"]
    for d in result.devices:
        lines.extend(device_what_if_lines(d))
    return "\n".join(lines)
