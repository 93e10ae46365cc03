"""The compare page's memory gate: snapshot B judged against snapshot A as `fragviz gate B --baseline A` judges
them, read through the store (the cached analyses of Views), and the verdict shaped into the rows the page's
tables show. No Dash here; the figures, the checks and their wording are fragviz.gate's."""
from __future__ import annotations

from typing import Callable

from fragviz.base.errors import FragvizError, public_message
from fragviz.base.units import format_bytes
from fragviz.gate.budgets import Budgets
from fragviz.gate.figures import DeviceFigures, MemorySummary, summarize
from fragviz.gate.judge import GateResult, cannot_judge, device_fits, judge
from fragviz.gate.report import TITLES, change_text, value_text
from fragviz.ui.data.views import Views

# (label, figure of a device): what the budgets judge, as the figures table shows them
FIGURES: tuple[tuple[str, Callable[[DeviceFigures], str]], ...] = (
    ("Peak reserved", lambda d: format_bytes(d.peak_reserved_bytes)),
    ("Peak allocated", lambda d: format_bytes(d.peak_allocated_bytes)),
    ("Fragmentation at peak", lambda d: f"{d.fragmentation:.1%}"))


def gate_of(views: Views, a: int, b: int, budgets: Budgets) -> GateResult:
    """`fragviz gate B --baseline A` with `budgets`, on the stored snapshots `b` (the candidate) and `a` (the
    baseline): whole runs, every traced device, its peaks over the whole trace. A snapshot that cannot be read
    makes a gate that cannot judge, saying why without the store's path."""
    try:
        analysis_b = views.analysis(b)
        candidate = summarize(analysis_b, str(b))
        baseline = summarize(views.analysis(a), str(a))
        fits = None
        if budgets.device_memory is not None:
            fits = device_fits(analysis_b, budgets.device_memory, budgets.alloc_conf)
    except FragvizError as exc:
        return cannot_judge(public_message(exc, views.reader.records.path), budgets)
    return judge(candidate, baseline, budgets, fits)


def check_rows(result: GateResult) -> list[dict[str, str]]:
    """A row per check, worded as `fragviz gate` prints it (its device named where the runs have several)."""
    many = len({c.device for c in result.checks}) > 1
    return [{"result": "pass" if c.passed else "FAIL",
             "budget": TITLES.get(c.name, c.name) + (f" (cuda:{c.device})" if many else ""),
             "value": value_text(c, c.value), "limit": value_text(c, c.limit),
             "baseline": value_text(c, c.baseline), "change": change_text(c)} for c in result.checks]


def site_rows(result: GateResult) -> list[dict[str, str]]:
    """The sites whose live bytes at the reserved peak grew most, before (A) and after (B)."""
    many = len({s.device for s in result.sites}) > 1
    return [{"site": s.site + (f" (cuda:{s.device})" if many else ""),
             "before": "-" if s.before_bytes is None else format_bytes(s.before_bytes),
             "after": format_bytes(s.after_bytes), "growth": "+" + format_bytes(s.growth),
             "frame": s.frame or "-"} for s in result.sites]


def figure_rows(result: GateResult) -> list[tuple[str, str, str]]:
    """(figure, A's, B's) of every traced device of either run: what the budgets are checked on."""
    a, b = result.baseline, result.candidate
    devices = sorted({d.device for s in (a, b) if s is not None for d in s.devices})
    rows = []
    for device in devices:
        on = f" (cuda:{device})" if len(devices) > 1 else ""
        for label, figure in FIGURES:
            rows.append((label + on, _figure(a, device, figure), _figure(b, device, figure)))
    return rows


def _figure(summary: MemorySummary | None, device: int, figure: Callable[[DeviceFigures], str]) -> str:
    found = summary.device(device) if summary is not None else None
    return "-" if found is None else figure(found)
