"""Predictions and fit searches for a terminal."""
from __future__ import annotations

from typing import Sequence

from fragviz.base.units import format_bytes as fb
from fragviz.predict.fitting import FitAnswer
from fragviz.predict.forecast import Unmatched
from fragviz.predict.prediction import Prediction
from fragviz.predict.runs import PredictedRun, as_number, settings_text

SITES_SHOWN = 8


def knob_text(knob: str, value: float) -> str:
    return f"{knob} {as_number(value)}"


def prediction_text(p: Prediction) -> str:
    at = ", ".join(str(as_number(k)) for k in p.knobs)
    lines = [f"predicted at {knob_text(p.knob, p.target)} from the runs at {p.knob} {at} "
             f"({', '.join(p.sources)}), device {p.device}",
             f"  matched {p.matched_allocations} of {p.template_allocations} allocations; laws: "
             + ", ".join(f"{n} {law}" for law, n in p.law_counts.items() if n)]
    lines.extend(unmatched_lines(p.unmatched))
    for run in p.runs:
        lines.extend(run_lines(run))
    lines.extend(f"  warning: {w}" for w in p.warnings)
    if p.leave_one_out and not p.leave_one_out.off:
        lo = p.leave_one_out
        lines.append(f"  checked: the recording at {knob_text(p.knob, lo.size)}, left out and predicted from the "
                     f"others, comes out {lo.error:+.1%} off its peak requested")
    lines.append("  sites by predicted bytes (allocated over the run):")
    for s in p.sites[:SITES_SHOWN]:
        recorded = " → ".join(fb(b) for b in s.recorded_bytes)
        lines.append(f"    {s.site}: {s.law} ({recorded} → {fb(s.predicted_bytes)})")
    return "\n".join(lines)


def unmatched_lines(u: Unmatched) -> list[str]:
    if not u.allocations:
        return ["  every allocation matched between the recordings"]
    lines = [f"  unmatched: {u.allocations} allocations, {fb(u.bytes)} ({u.share:.1%} of the recorded bytes); "
             "those of the run predicted from keep their recorded size"]
    lines.extend(f"    {fb(s.bytes)} in {s.allocations} at {s.site} (only in the run at {as_number(s.knob)})"
                 for s in u.sites[:3])
    return lines


def run_lines(run: PredictedRun) -> list[str]:
    settings = settings_text(run.alloc_conf)
    cut = run.oom is not None
    lines = [f"  under {settings}: peak requested {fb(run.peak_requested_bytes)}"
             f"{range_text(run.peak_requested_range, cut)}, peak allocated {fb(run.peak_allocated_bytes)}, peak "
             f"reserved {fb(run.peak_reserved_bytes)}{range_text(run.peak_reserved_range, cut)}, fragmentation at the "
             f"peak {run.fragmentation:.1%}"]
    if run.device_memory_bytes is None:
        lines.append("    device size not given (--device-memory SIZE): whether it runs out of memory is not asked")
    else:
        lines.append("    " + fits_sentence(run))
    return lines


def range_text(bounds: tuple[int, int] | None, cut: bool = False) -> str:
    """" (range LOW to HIGH)" where the laws the recordings allow spread the figure, nothing where they agree; for
    a run `cut` by its OOM, whose peaks are those up to it, the range on a device without a limit."""
    if bounds is None or (bounds[0] == bounds[1] and not cut):
        return ""
    span = fb(bounds[0]) if bounds[0] == bounds[1] else f"{fb(bounds[0])} to {fb(bounds[1])}"
    return f" (up to the OOM; without the device's limit: {span})" if cut else f" (range {span})"


def fits_sentence(run: PredictedRun) -> str:
    """Whether a run with a known device size fits it, or where it runs out of memory (terminal and page)."""
    if run.oom is None:
        return f"fits a device of {fb(run.device_memory_bytes)}: no OOM"
    o = run.oom
    return (f"runs out of memory on {fb(run.device_memory_bytes)}: {fb(o.requested_bytes)} requested at {o.site} "
            f"(event {o.event} of the run predicted from), with {fb(o.reserved_bytes)} reserved and the largest "
            f"free block {fb(o.largest_free_block)}")


def fit_text(knob: str, answers: Sequence[FitAnswer], p: Prediction | None = None) -> str:
    lines = []
    for a in answers:
        settings = settings_text(a.alloc_conf)
        if a.largest != a.point.largest:
            lines.append(_two_answers(knob, settings, a))
        elif a.largest is None:
            lines.append(f"under {settings}: not even {knob} 1 fits {fb(a.device_memory_bytes)}")
        elif a.first_failing is None:
            lines.append(f"under {settings}: every {knob} up to {a.largest} fits {fb(a.device_memory_bytes)}")
        else:
            lines.append(f"under {settings}: the largest {knob} that fits {fb(a.device_memory_bytes)} is {a.largest} "
                         f"(peak reserved {fb(a.run.peak_reserved_bytes)}); "
                         f"{_fails_at(a.first_failing, a.failing_run)}")
    return "\n".join(lines)


def _two_answers(knob: str, settings: str, a: FitAnswer) -> str:
    """The safe answer and the point's, where the laws the recordings allow part them."""
    safe = (f"no {knob} fits under every law the recordings allow" if a.largest is None else
            f"the largest {knob} that fits {fb(a.device_memory_bytes)} under every law the recordings allow is "
            f"{a.largest}")
    point = a.point
    chosen = (f"under the chosen laws every {knob} up to {point.largest} fits" if point.first_failing is None else
              f"under the chosen laws it is {point.largest} ({_fails_at(point.first_failing, point.failing_run)})")
    return (f"under {settings}: {safe}; {chosen}. Take the first, or record the program nearer "
            f"{point.largest} to tell")


def _fails_at(size: int | None, run: PredictedRun | None) -> str:
    if run is None or run.oom is None:
        return f"at {size} it runs out of memory"
    return f"at {size} it runs out of memory: {fb(run.oom.requested_bytes)} at {run.oom.site}"
