"""The doctor's findings as text for a terminal."""
from __future__ import annotations

from typing import Any

from fragviz.base.units import format_bytes

_TITLES = {"exhaustion": "true exhaustion", "fragmentation": "fragmentation",
           "outside_pytorch": "memory outside PyTorch", "capacity_cap": "a capacity cap",
           "undetermined": "undetermined (the figures read do not tell the cause)"}
_FIGURES = (("requested_bytes", "requested"), ("reserved_bytes", "reserved by PyTorch"),
            ("allocated_bytes", "allocated to tensors"),
            ("largest_free_block", "the largest request the cache could serve"),
            ("device_free_bytes", "device free"), ("device_total_bytes", "device total"),
            ("allowed_bytes", "allowed by the memory fraction"))


def doctor_text(source: str, ooms: list[dict[str, Any]]) -> str:
    if not ooms:
        return (f"{source}: no out-of-memory error recorded (no `oom` trace entry). Pass the error text with "
                "--message to diagnose one.")
    lines = []
    for n, o in enumerate(ooms, 1):
        lines.extend(oom_lines(n, o))
    return "\n".join(lines)


def oom_lines(n: int, o: dict[str, Any]) -> list[str]:
    where = f" at event {o['event']} of device {o['device']}" if o.get("event") is not None else ""
    lines = [f"OOM {n}{where}: {_TITLES[o['verdict']]}"]
    figures = [f"{label} {format_bytes(o[key])}" for key, label in _FIGURES if o.get(key) is not None]
    if figures and o["requested_bytes"]:
        lines.append("  " + "; ".join(figures))
    if o.get("fragmentation") is not None:
        lines.append(f"  fragmentation {o['fragmentation']:.1%} of reserved: {format_bytes(o['non_releasable_bytes'])} "
                     "free but non-releasable (stuck between live blocks; empty_cache() could not give it back)")
    lines.extend(f"  warning: {w}" for w in o.get("warnings", []))
    lines.extend(f"  note: {note}" for note in o.get("notes", []))
    lines.extend(f"  - {a}" for a in o["advice"])
    for w in o["what_if"]:
        lines.append(f"  what if: {w['summary']}")
    starts = {note for w in o["what_if"] for note in w.get("start_notes", [])}
    lines.extend(f"  what if, note: {note}" for note in sorted(starts))
    return lines
