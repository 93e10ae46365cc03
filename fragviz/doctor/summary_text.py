"""What the doctor can honestly tell from a memory_summary() table, alone or with a snapshot or an OOM message.

Every sentence says which figures it comes from. The table's cells are rounded down to the unit printed
(summary.py), and each "peak" is that metric's own maximum: two peaks need not be the same moment, so no
figure here subtracts one peak from another.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from fragviz.replay.analysis import Analysis
from fragviz.doctor.facts import DEFRAG_MARGIN
from fragviz.doctor.inforce import UNKNOWN, in_force_of_snapshot, in_force_of_text
from fragviz.doctor.records import Diagnosis
from fragviz.doctor.summary import MemorySummary
from fragviz.doctor.summary_checks import first_message, message_conflicts, snapshot_checks
from fragviz.base.units import format_bytes as fb

# Less memory stranded in split segments than this cannot decide an OOM: the CUDA context, page granularity
# and rounding eat tens of MiB (the margin the OOM verdicts use).
MARGIN = DEFRAG_MARGIN
# A stranded share of reserved memory at or above this is "large": packing it would give the job a tenth more room.
LARGE_SHARE = 0.10


@dataclass(frozen=True)
class KnownSettings:
    """Whether each setting the advice could name is known to be in force: True, False, or None where no input
    says (`max_split_size`: whether max_split_size_mb is set, whatever its value)."""

    expandable_segments: bool | None = None
    max_split_size: bool | None = None
    source: str = ""


@dataclass(frozen=True)
class SummaryDiagnosis:
    summary: MemorySummary
    verdict: str
    findings: tuple[str, ...]
    advice: tuple[str, ...]
    disagreements: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.summary.source, "summary": self.summary.as_dict(), "verdict": self.verdict,
                "findings": list(self.findings), "advice": list(self.advice),
                "disagreements": list(self.disagreements)}


def diagnose_summary(summary: MemorySummary, analysis: Analysis | None = None, message: str | None = None,
                     ooms: Sequence[Diagnosis] = (), text: str = "") -> SummaryDiagnosis:
    """The table's findings, with a snapshot (`analysis`) and/or an OOM `message` where given.

    `ooms` are the doctor's diagnoses of that snapshot's and message's OOMs (`diagnose`, `diagnose_message`):
    where their source agrees with the table, the verdict follows theirs (they know the failed request).
    `text` is the rest of the paste, read for a PYTORCH_CUDA_ALLOC_CONF the run set."""
    msg = first_message(message)
    msg_conflicts = message_conflicts(summary, msg) if msg is not None else []
    snap_conflicts, snap_findings = snapshot_checks(summary, analysis) if analysis is not None else ([], [])
    verdict = _verdict(summary)
    adopted = _adopted(summary, ooms, msg_conflicts, snap_conflicts)
    findings = _findings(summary) + snap_findings
    if adopted is None and (why := _why(summary, verdict)):
        findings.append(why)
    if adopted is not None:
        findings.append(f"The {adopted[1]}, which agrees with the table, knows the failed request: its verdict is "
                        f"{adopted[0]} (the table alone says {verdict}).")
        verdict = adopted[0]
    advice = _advice(verdict, summary, _in_force(summary, analysis, text))
    return SummaryDiagnosis(summary, verdict, tuple(findings), tuple(advice), tuple(msg_conflicts + snap_conflicts))


# ---- the verdict ---------------------------------------------------------------------------------------------

def _stranded(s: MemorySummary) -> tuple[bool, bool]:
    """(large, small): is the non-releasable memory large (now, or at its peak), or below MARGIN at every moment?"""
    now, peak = s.cell("inactive_split_bytes"), s.cell("inactive_split_bytes", "peak")
    res_now, res_peak = s.figure("reserved_bytes"), s.figure("reserved_bytes", "peak")
    large = any(n is not None and r and n.value >= MARGIN and n.value / r >= LARGE_SHARE
                for n, r in ((now, res_now), (peak, res_peak)))
    return large, peak is not None and peak.upper < MARGIN


def _verdict(s: MemorySummary) -> str:
    large, small = _stranded(s)
    if s.num_ooms is None:
        return "undetermined"
    if s.num_ooms > 0:
        return "fragmentation" if large else ("exhaustion" if small else "undetermined")
    if s.num_alloc_retries or large or s.cell("inactive_split_bytes") is None:
        return "no_oom"
    return "healthy"


def _why(s: MemorySummary, verdict: str) -> str | None:
    """What a verdict from the table alone rests on, and what it cannot know (the failed request's size)."""
    if verdict == "fragmentation":
        return ("Fragmentation, from the table alone: OOMs were raised while a large share of the reserved memory "
                "sat in free pieces of split segments. The table does not give the failed request: had it been "
                "larger than those pieces together plus the device's free memory, it was exhaustion (the OOM "
                "message tells).")
    peak = s.figure("inactive_split_bytes", "peak")
    if verdict == "exhaustion":
        return (f"Exhaustion: non-releasable memory peaked at {fb(peak)}, under {fb(MARGIN)}, so packing the cache "
                "could not have made room that matters: the OOMs came from memory in use, not memory stranded in "
                "the cache.")
    if verdict == "undetermined" and s.num_ooms:
        held = (f"non-releasable memory reached {fb(peak)}, too much to rule fragmentation out and too small a share "
                f"of reserved (under {LARGE_SHARE:.0%}) to call it") if peak is not None else "the paste has no Non-releasable row"
        return f"Undetermined: the table shows OOMs, but {held}; the failed request's size decides."
    return None


def _adopted(s: MemorySummary, ooms: Sequence[Diagnosis], msg_conflicts: list[str],
             snap_conflicts: list[str]) -> tuple[str, str] | None:
    """The verdict of the OOM evidence that agrees with the table: the message's first, else the snapshot's last."""
    from_message = [o for o in ooms if o.event is None and o.requested_bytes]  # figures to judge by
    if from_message and not msg_conflicts:
        return from_message[0].verdict, "OOM message"
    recorded = [o for o in ooms if o.event is not None and (s.device is None or o.device == s.device)]
    if recorded and not snap_conflicts:
        return recorded[-1].verdict, f"snapshot's OOM at event {recorded[-1].event}"
    return None


# ---- findings ------------------------------------------------------------------------------------------------

def _findings(s: MemorySummary) -> list[str]:
    out = [_header(s)]
    for sentence in (_usage(s), _cached_free(s), _rounding(s), _non_releasable(s), _oversize(s), _missing(s)):
        if sentence:
            out.append(sentence)
    return out


def _header(s: MemorySummary) -> str:
    device = f"Device {s.device}" if s.device is not None else "The table (no device ID in the paste)"
    if s.tables > 1:
        device = f"Table {s.position} of the {s.tables} in the text, device {s.device}" if s.device is not None else (
            f"Table {s.position} of the {s.tables} in the text (no device ID)")
    if s.num_ooms is None and s.num_alloc_retries is None:
        return (f"{device}: the paste has no \"CUDA OOMs | cudaMalloc retries\" line, so whether the allocator ran "
                "out of memory or retried is unknown.")
    parts = []
    if s.num_ooms is not None:
        parts.append(f"{s.num_ooms} OOM{'s' if s.num_ooms != 1 else ''} raised")
    if s.num_alloc_retries is not None:
        parts.append(f"{s.num_alloc_retries} cudaMalloc retr{'ies' if s.num_alloc_retries != 1 else 'y'} (each time "
                     "the device refused a new segment, the allocator released its whole free cached segments and "
                     "tried again, synchronising the device)" if s.num_alloc_retries else "0 cudaMalloc retries")
    return f"{device}: " + ", ".join(parts) + " since the counters started (process start or reset_accumulated_memory_stats())."


def _pair(s: MemorySummary, metric: str) -> str | None:
    now, peak = s.figure(metric), s.figure(metric, "peak")
    if now is None and peak is None:
        return None
    return " and ".join(p for p in ((f"{fb(now)} now" if now is not None else ""),
                                    (f"{fb(peak)} at its peak" if peak is not None else "")) if p)


def _usage(s: MemorySummary) -> str | None:
    parts = [(label, p) for label, metric in (("reserved from the device by PyTorch", "reserved_bytes"),
                                              ("allocated to tensors", "allocated_bytes"),
                                              ("requested by the program", "requested_bytes"))
             if (p := _pair(s, metric))]
    if not parts:
        return None
    return ("Memory " + "; ".join(f"{label}: {p}" for label, p in parts)
            + " (each peak is that figure's own maximum; the peaks need not be the same moment).")


def _cached_free(s: MemorySummary) -> str | None:
    reserved, allocated, active = s.figure("reserved_bytes"), s.figure("allocated_bytes"), s.figure("active_bytes")
    if reserved is None or allocated is None:
        return None
    out = f"Reserved but not allocated now: {fb(max(0, reserved - allocated))} ({fb(reserved)} - {fb(allocated)})"
    if active is not None and active > allocated:
        out += f", of which {fb(active - allocated)} is freed but waiting for other streams (active - allocated)"
    return out + "."


def _rounding(s: MemorySummary) -> str | None:
    allocated, requested = s.figure("allocated_bytes"), s.figure("requested_bytes")
    if allocated is None or requested is None or not allocated:
        return None
    gap = max(0, allocated - requested)
    return (f"Rounding: tensors hold {fb(allocated)} for {fb(requested)} requested now, {fb(gap)} "
            f"({gap / allocated:.1%} of allocated) lost to the allocator's block rounding.")


def _non_releasable(s: MemorySummary) -> str | None:
    now, peak = s.figure("inactive_split_bytes"), s.figure("inactive_split_bytes", "peak")
    res_now, res_peak = s.figure("reserved_bytes"), s.figure("reserved_bytes", "peak")
    if now is None and peak is None:
        return None
    parts = []
    if now is not None:
        parts.append(f"{fb(now)} now" + (f", {now / res_now:.1%} of the {fb(res_now)} reserved" if res_now else ""))
    if peak is not None:
        parts.append(f"{fb(peak)} at its peak" + (f", at least {peak / res_peak:.1%} of what was reserved then "
                                                   f"(its peak over the {fb(res_peak)} peak reserved)" if res_peak else ""))
    return ("Non-releasable memory (free pieces of segments that also hold live blocks: torch.cuda.empty_cache() "
            "cannot release them, and only requests that fit a piece can use them, the sign of fragmentation): "
            + "; ".join(parts) + ".")


def _oversize(s: MemorySummary) -> str | None:
    parts = [f"{label} " + ", ".join(f"{c.value} {when}" for when, c in zip(("now", "at peak", "in all"), (
        s.cell(metric), s.cell(metric, "peak"), s.cell(metric, "allocated"))) if c is not None)
        for label, metric in (("allocations", "oversize_allocations"), ("segments", "oversize_segments"))
        if s.cell(metric) is not None]
    if not parts:
        return None
    return ("Oversize (blocks of at least max_split_size_mb, counted only when it is set): " + "; ".join(parts)
            + (": so max_split_size_mb is in force." if _oversize_seen(s) else "."))


def _oversize_seen(s: MemorySummary) -> bool:
    return any(c is not None and c.value > 0 for m in (s.oversize_allocations, s.oversize_segments)
               if m is not None and m.all is not None for c in (m.all.current, m.all.peak, m.all.allocated))


def _missing(s: MemorySummary) -> str | None:
    lacking = [label for label, metric in (("Allocated memory", "allocated_bytes"), ("GPU reserved memory", "reserved_bytes"),
                                           ("Non-releasable memory", "inactive_split_bytes")) if getattr(s, metric) is None]
    old = s.unit_style == "KB" and s.requested_bytes is None
    if s.requested_bytes is None and not old:
        lacking.append("Requested memory")
    out = []
    if old:
        out.append("This is PyTorch's table from before 2.0 (its KB, MB and GB are 1024-based): it has no Requested "
                   "memory or Oversize rows.")
    if lacking:
        out.append(f"The paste lacks the {', '.join(lacking)} row(s): what depends on them is not said.")
    return " ".join(out) or None


# ---- settings in force and advice ----------------------------------------------------------------------------

def _in_force(s: MemorySummary, analysis: Analysis | None, text: str) -> KnownSettings:
    """What the snapshot's settings, else a PYTORCH_CUDA_ALLOC_CONF the paste states, say is in force; oversize
    allocations in the table mean max_split_size_mb is set."""
    known = in_force_of_snapshot(analysis) if analysis is not None else UNKNOWN
    if known is UNKNOWN:
        known = in_force_of_text(text)
    split = True if _oversize_seen(s) else (known.max_split_size is not None if known.split_known else None)
    source = known.source or ("the table's oversize figures" if split else "")
    return KnownSettings(known.expandable_segments, split, source)


def _advice(verdict: str, s: MemorySummary, force: KnownSettings) -> list[str]:
    large, _ = _stranded(s)
    if verdict == "fragmentation" or (verdict in ("no_oom", "undetermined") and large and s.num_alloc_retries):
        return _fragmentation_advice(force)
    if verdict == "exhaustion":
        return [_LESS_MEMORY]
    if verdict == "healthy":
        return ["Nothing to fix: no OOM, no cudaMalloc retry, and little memory stranded in split segments."]
    if verdict == "no_oom":
        return _no_oom_advice(s, large, force)
    out = []
    if s.num_ooms:
        out.append("Pass the OOM message as well (--message, or paste it with the table): its failed request tells "
                   "fragmentation from exhaustion, which the table alone cannot.")
    if s.num_ooms is None:
        out.append("Paste the whole table, with its \"CUDA OOMs | cudaMalloc retries\" line, to know more.")
    return out


def _no_oom_advice(s: MemorySummary, large: bool, force: KnownSettings) -> list[str]:
    if s.num_alloc_retries:
        return [f"No OOM, but {s.num_alloc_retries} cudaMalloc retr{'ies' if s.num_alloc_retries != 1 else 'y'}: "
                "the job runs at the edge of the device's memory, and each retry costs a device synchronisation. "
                + _LESS_MEMORY]
    if large:
        return ["Nothing failed, but a large share of the reserved memory is stranded in split segments; if the "
                "job runs short of memory later:"] + _fragmentation_advice(force)
    return ["No OOM and no cudaMalloc retry; the table lacks the Non-releasable row, so fragmentation is not judged."]


_LESS_MEMORY = ("To need less memory: reduce the batch size or sequence length, use activation checkpointing "
                "(torch.utils.checkpoint), mixed precision (bf16), or shard parameters and optimizer state (FSDP, ZeRO).")


def _fragmentation_advice(force: KnownSettings) -> list[str]:
    out = []
    if force.expandable_segments:
        out.append(f"expandable_segments:True is already in force ({force.source}): do not set it again; keep "
                   "tensor sizes steady instead, as below.")
    else:
        unknown = "" if force.expandable_segments is False else (
            " (unless it is already set: no input here shows the allocator settings)")
        out.append("Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" + unknown + ": segments then grow in place, "
                   "so freed memory merges instead of staying in pieces.")
    if force.max_split_size:
        out.append(f"max_split_size_mb is already in force ({force.source}).")
    elif not force.expandable_segments:
        out.append("Or set max_split_size_mb (for example 512) so that small requests do not split large cached "
                   "blocks" + ("" if force.max_split_size is False else ", unless it is set already") + ".")
    out.append("Keep tensor sizes steady (pad variable sequence lengths to a few buckets) so freed blocks fit the next "
               "requests. torch.cuda.empty_cache() does not release non-releasable memory: it frees whole free "
               "segments only.")
    return out


# ---- for a terminal ------------------------------------------------------------------------------------------

_ROWS = (("reserved", "reserved_bytes"), ("allocated", "allocated_bytes"), ("active", "active_bytes"),
         ("requested", "requested_bytes"), ("non-releasable", "inactive_split_bytes"))


def summary_text(d: SummaryDiagnosis) -> str:
    s = d.summary
    lines = [f"{s.source}: torch.cuda.memory_summary()" + (f" of device {s.device}" if s.device is not None else "")
             + f": {d.verdict.replace('_', ' ')}", f"  {'':<16}{'now':>12}{'peak':>12}"]
    for label, metric in _ROWS:
        now, peak = s.figure(metric), s.figure(metric, "peak")
        if now is not None or peak is not None:
            lines.append(f"  {label:<16}{_or_dash(now):>12}{_or_dash(peak):>12}")
    lines.extend(f"  {label}: {value}" for label, value in (("OOMs", s.num_ooms), ("cudaMalloc retries", s.num_alloc_retries))
                 if value is not None)
    for title, items in (("findings", d.findings), ("disagreements", d.disagreements), ("advice", d.advice)):
        if items:
            lines.append(f"{title}:")
            lines.extend(f"  - {item}" for item in items)
    return "\n".join(lines)


def _or_dash(n: int | None) -> str:
    return "-" if n is None else fb(n)
