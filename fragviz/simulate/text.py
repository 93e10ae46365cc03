"""Human summaries of simulation results."""
from __future__ import annotations

from typing import Any

from fragviz.analysis import Analysis
from fragviz.units import format_bytes


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({a / b:.1%})" if b else "0/0"


def follow_text(analysis: Analysis, result: dict[str, Any]) -> str:
    lines = [f"{analysis.snapshot.source}: follow mode (predict each recorded malloc, then continue from the truth)"]
    for d in result["devices"]:
        lines.append(f"device {d['device']}: alloc addresses {_pct(d['alloc_address_matches'], d['alloc_events'])}, "
                     f"device allocations {_pct(d['segment_allocs_matched'], d['segment_allocs_recorded'])} "
                     f"(predicted {d['segment_allocs_predicted']}), final state "
                     f"{'matches' if d['final_state_matches'] else 'DIFFERS'}")
        for m in d["mismatches"][:5]:
            lines.append(f"  event {m['event']} {m['action']}: recorded {m['recorded']}, predicted {m['predicted']}")
    return "\n".join(lines)


def _run_line(label: str, run: dict[str, Any]) -> str:
    capacity = run["settings"].get("device_memory_bytes")
    oom = f"{len(run['ooms'])} OOM(s)" if run["ooms"] else "no OOM"
    of = f" of {format_bytes(capacity)}" if capacity else ""
    return (f"  {label:<28} peak reserved {format_bytes(run['peak_reserved_bytes'])}{of}, peak allocated "
            f"{format_bytes(run['peak_allocated_bytes'])}, final fragmentation {run['final_fragmentation']:.1%}: {oom}")


def what_if_text(analysis: Analysis, conf: str, result: dict[str, Any]) -> str:
    lines = [f"{analysis.snapshot.source}: free-run of the recorded workload"]
    for d in result["devices"]:
        lines.append(f"device {d['device']}")
        lines.append(_run_line("recorded settings", d["recorded"]))
        lines.append(_run_line(conf, d))
    return "\n".join(lines)
