"""The doctor's findings as text for a terminal."""
from __future__ import annotations

from typing import Callable

from fragviz.base.units import format_bytes
from fragviz.doctor.records import Diagnosis

_TITLES = {"exhaustion": "true exhaustion", "fragmentation": "fragmentation",
           "outside_pytorch": "memory outside PyTorch", "capacity_cap": "a capacity cap",
           "undetermined": "undetermined (the figures read do not tell the cause)"}
_FIGURES: tuple[tuple[Callable[[Diagnosis], int | None], str], ...] = (
    (lambda o: o.requested_bytes, "requested"), (lambda o: o.reserved_bytes, "reserved by PyTorch"),
    (lambda o: o.allocated_bytes, "allocated to tensors"),
    (lambda o: o.largest_free_block, "the largest request the cache could serve"),
    (lambda o: o.device_free_bytes, "device free"), (lambda o: o.device_total_bytes, "device total"),
    (lambda o: o.allowed_bytes, "allowed by the memory fraction"))


def doctor_text(source: str, ooms: list[Diagnosis]) -> str:
    if not ooms:
        return (f"{source}: no out-of-memory error recorded (no `oom` trace entry). Pass the error text with "
                "--message to diagnose one.")
    lines = []
    for n, o in enumerate(ooms, 1):
        lines.extend(oom_lines(n, o))
    return "\n".join(lines)


def oom_lines(n: int, o: Diagnosis) -> list[str]:
    where = f" at event {o.event} of device {o.device}" if o.event is not None else ""
    lines = [f"OOM {n}{where}: {_TITLES[o.verdict]}"]
    figures = [f"{label} {format_bytes(value(o))}" for value, label in _FIGURES if value(o) is not None]
    if figures and o.requested_bytes:
        lines.append("  " + "; ".join(figures))
    if o.fragmentation is not None:
        lines.append(f"  fragmentation {o.fragmentation:.1%} of reserved: {format_bytes(o.non_releasable_bytes)} "
                     "free but non-releasable (stuck between live blocks; empty_cache() could not give it back)")
    lines.extend(f"  warning: {w}" for w in o.warnings)
    lines.extend(f"  note: {note}" for note in o.notes)
    lines.extend(f"  - {a}" for a in o.advice)
    for w in o.what_if:
        lines.append(f"  what if: {w.summary}")
    starts = {note for w in o.what_if for note in w.start_notes}
    lines.extend(f"  what if, note: {note}" for note in sorted(starts))
    return lines
