"""The doctor page: /doctor[?snapshot=ID]. Paste a torch.cuda.memory_summary() table and/or an OOM message;
with a stored snapshot, its own OOM diagnoses are read with them."""
from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from fragviz.doctor import Diagnosis, diagnose_message, diagnose_message_with
from fragviz.doctor.message import find_messages
from fragviz.doctor.summary import SummaryFormatError, parse_summary
from fragviz.doctor.summary_checks import message_device
from fragviz.doctor.summary_text import SummaryDiagnosis, diagnose_summary
from fragviz.base.errors import FragvizError, public_message
from fragviz.ui import ids
from fragviz.ui.context import AppContext
from fragviz.ui.pages.common import card, error_page, error_panel, fb, header, query_int, verdict_card

PATH = "/doctor"
SOURCE = "the paste"
_ROWS = (("reserved", "reserved_bytes"), ("allocated", "allocated_bytes"), ("active", "active_bytes"),
         ("requested", "requested_bytes"), ("non-releasable", "inactive_split_bytes"))
_VERDICTS = {"fragmentation": "Fragmentation", "exhaustion": "Exhaustion", "undetermined": "Undetermined",
             "no_oom": "No OOM", "healthy": "Healthy", "outside_pytorch": "Memory outside PyTorch",
             "capacity_cap": "A capacity cap"}


def layout(ctx: AppContext, pathname: str, search: str | None = None) -> html.Div:
    sid = query_int(search, "snapshot")
    intro: list[Any] = [html.H2("Doctor"), html.P(
        "Paste what PyTorch printed: a torch.cuda.memory_summary() table (from a log is fine), an OOM message, or "
        "both. The doctor says what the figures show and what would help.", className="fv-sub")]
    if sid is not None:
        try:
            row = ctx.reader.snapshot_row(sid)
        except FragvizError as exc:
            return error_page(public_message(exc, ctx.reader.records.path))
        intro.append(html.P(["Read with snapshot ", dcc.Link(row.name.rsplit("/", 1)[-1], href=f"/snapshots/{sid}"),
                             " and its own OOMs."], className="fv-sub"))
    return html.Div([header(), html.Main(className="fv-main", children=[
        *intro,
        card("Paste", dcc.Textarea(id=ids.DOCTOR_PASTE, className="fv-paste", spellCheck=False,
                                   placeholder="|  PyTorch CUDA memory summary, device ID 0  | ...\n"
                                               "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ..."),
             html.Button("Diagnose", id=ids.DOCTOR_RUN, n_clicks=0, className="fv-primary"),
             dcc.Store(id=ids.DOCTOR_SNAPSHOT, data=sid)),
        html.Div(id=ids.DOCTOR_RESULT, className="fv-doctor-result", **{"aria-live": "polite"}),
    ])])


def diagnose_paste(ctx: AppContext, text: str, sid: int | None) -> html.Div:
    """The findings for a paste (and the snapshot `sid`), or the one-line reason there are none."""
    if not text.strip():
        return error_panel("paste a torch.cuda.memory_summary() table and/or a CUDA out-of-memory message")
    message = "\n".join(find_messages(text)) or None
    try:
        summary = parse_summary(text, SOURCE, message_device(message))
    except SummaryFormatError as exc:
        if message is None or "no torch.cuda.memory_summary() table" not in str(exc):
            return error_panel(str(exc))
        summary = None
    analysis = ctx.views.analysis(sid) if sid is not None else None
    ooms = ctx.views.doctor(sid) if sid is not None else []
    if message:  # with a snapshot, only where both can be one run (else the message alone, saying why)
        ooms = ooms + (diagnose_message_with(analysis, message) if analysis is not None else diagnose_message(message))
    if summary is None:
        if not ooms:
            return error_panel(f"{SOURCE}: no torch.cuda.memory_summary() table and no CUDA out-of-memory message "
                               "fragviz can read")
        return html.Div([_ooms(ooms)])
    result = diagnose_summary(summary, analysis, message, ooms, text)
    return html.Div([_summary(result), _ooms(ooms)])


def _summary(d: SummaryDiagnosis) -> html.Section:
    s = d.summary
    title = "memory_summary()" + (f" of device {s.device}" if s.device is not None else "")
    return card(f"{title}: {_VERDICTS.get(d.verdict, d.verdict)}",
                _figures_table(d),
                _list("Findings", d.findings, "fv-findings"),
                _list("Where the inputs disagree", d.disagreements, "fv-warnings"),
                _list("What to do", d.advice, "fv-advice"),
                class_name=f"fv-verdict fv-{d.verdict}")


def _figures_table(d: SummaryDiagnosis) -> html.Table:
    s = d.summary
    rows = [html.Tr([html.Th(label), html.Td(_size(s.figure(m))), html.Td(_size(s.figure(m, "peak")))],
                    **{"data-figure": m}) for label, m in _ROWS if s.figure(m) is not None or s.figure(m, "peak") is not None]
    counts = [("OOMs", s.num_ooms, "num_ooms"), ("cudaMalloc retries", s.num_alloc_retries, "num_alloc_retries"),
              ("oversize allocations (in all)", s.figure("oversize_allocations", "allocated"), "oversize_allocations")]
    rows += [html.Tr([html.Th(label), html.Td(str(v), colSpan=2)], **{"data-figure": key})
             for label, v, key in counts if v is not None]
    return html.Table(className="fv-table fv-doctor-figures", children=[
        html.Thead(html.Tr([html.Th("figure"), html.Th("now"), html.Th("peak")])), html.Tbody(rows)])


def _size(n: int | None) -> str:
    return "–" if n is None else fb(n)


def _list(title: str, items: tuple[str, ...], class_name: str) -> html.Div:
    if not items:
        return html.Div()
    return html.Div(className=class_name, children=[html.H4(title), html.Ul([html.Li(i) for i in items])])


def _ooms(ooms: list[Diagnosis]) -> html.Div:
    if not ooms:
        return html.Div()
    out = []
    for o in ooms:
        where = f" at event {o.event} of device {o.device}" if o.event is not None else " (the message)"
        out.append(verdict_card(o, f"OOM{where}: {_VERDICTS.get(o.verdict, o.verdict)}"))
    return card("Out-of-memory errors", *out)


def register(app: dash.Dash, ctx: AppContext) -> None:
    @app.callback(Output(ids.DOCTOR_RESULT, "children"), Input(ids.DOCTOR_RUN, "n_clicks"),
                  State(ids.DOCTOR_PASTE, "value"), State(ids.DOCTOR_SNAPSHOT, "data"), prevent_initial_call=True)
    def run(_, text, sid):
        try:
            return diagnose_paste(ctx, text or "", sid)
        except FragvizError as exc:
            return error_panel(str(exc))
