"""The compare page's memory gate: B judged against A as `fragviz gate B --baseline A` judges them, for the budgets
typed on the page (gr, ga, gg, gf, gd and gc in the URL), with the command line that reproduces the verdict.
The gate judges whole runs (every traced device, its peaks over the whole trace), not the states picked above."""
from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import dash
from dash import Input, Output, dash_table, dcc, html

from fragviz.base.errors import UsageError
from fragviz.gate.budgets import Budgets, budgets_from_text, gate_command
from fragviz.gate.judge import CANNOT_JUDGE, PASSED, GateResult
from fragviz.gate.report import headline
from fragviz.ui import ids
from fragviz.ui.context import AppContext
from fragviz.ui.data.gate import check_rows, figure_rows, gate_of, site_rows
from fragviz.ui.pages.common import card, query

# (id, URL key, label, placeholder, class), in the order of budgets_from_text's parameters
FIELDS = ((ids.COMPARE_GATE_PEAK_RESERVED, "gr", "max peak reserved", "e.g. 2GiB", "fv-gate-budget"),
          (ids.COMPARE_GATE_PEAK_ALLOCATED, "ga", "max peak allocated", "e.g. 1.5GiB", "fv-gate-budget"),
          (ids.COMPARE_GATE_GROWTH, "gg", "max growth", "e.g. 5%", "fv-gate-budget"),
          (ids.COMPARE_GATE_FRAGMENTATION, "gf", "max fragmentation", "e.g. 0.3", "fv-gate-budget"),
          (ids.COMPARE_GATE_DEVICE_MEMORY, "gd", "device memory", "e.g. 80GiB", "fv-gate-budget"),
          (ids.COMPARE_GATE_ALLOC_CONF, "gc", "alloc conf", "with a device memory", "fv-gate-conf"))
KEYS = tuple(field[1] for field in FIELDS)
INPUTS = tuple(Input(field[0], "value") for field in FIELDS)
WHOLE_RUNS = ("The gate judges whole runs, as in CI: every traced device, its peaks over the whole trace, not the "
              "events or devices picked above.")
CAPTION = "It runs against this dashboard's store: add --db STORE where that is not your default."
STATUS_CLASS = {PASSED: "fv-gate-passed", CANNOT_JUDGE: "fv-gate-cannot"}
HIDDEN = {"display": "none"}
TABLE = {"overflowX": "auto"}  # a table's box where it has rows: a long site scrolls inside it, not the page
SITES_TITLE = "Sites whose memory at the peak grew most"
NO_SITE_GREW = "No allocation site holds more memory at the peak in B than in A"
# a broken budget's "FAIL" in the bad colour of style.css (--bad)
FAIL_MARK = [{"if": {"filter_query": '{result} = "FAIL"', "column_id": "result"}, "color": "#D55E00",
              "fontWeight": "bold"}]


def cleaned(text: str | None) -> str | None:
    """A budget as typed: None where the box is blank."""
    text = (text or "").strip()
    return text or None


def url_keys(texts: Sequence[str | None]) -> dict[str, str | None]:
    """The budgets' URL query (gr=, ga=...): a blank one leaves its key out."""
    return dict(zip(KEYS, (cleaned(t) for t in texts)))


def budgets_of(texts: Sequence[str | None]) -> Budgets:
    """The budgets as typed, in FIELDS' order; a bad one raises UsageError naming it."""
    return budgets_from_text(*(cleaned(t) for t in texts))


def gate_card(search: str | None) -> html.Section:
    """The card, its budget boxes filled from the URL's query."""
    given = query(search)
    boxes = [html.Label([f"{label} ", dcc.Input(id=field_id, value=given.get(key), placeholder=hint, debounce=True,
                                                 className=width)])
             for field_id, key, label, hint, width in FIELDS]
    return card("Memory gate: B against A", html.P(WHOLE_RUNS, className="fv-sub"),
                html.Div(boxes, className="fv-controls"),
                html.Div(id=ids.COMPARE_GATE_VERDICT, role="status", **{"aria-live": "polite"}),
                html.Div(id=ids.COMPARE_GATE_FIGURES),
                _table(ids.COMPARE_GATE_CHECKS, (("result", "result"), ("budget", "budget"), ("value", "value"),
                                                 ("limit", "limit"), ("baseline (A)", "baseline"),
                                                 ("change", "change")), FAIL_MARK),
                html.H4(id=ids.COMPARE_GATE_SITES_TITLE),
                _table(ids.COMPARE_GATE_SITES, (("allocation site", "site"), ("A", "before"), ("B", "after"),
                                                ("growth", "growth"), ("first user frame", "frame"))),
                html.Div(id=ids.COMPARE_GATE_NOTES),
                html.Div(id=ids.COMPARE_GATE_REPRODUCE, style=HIDDEN, children=[
                    html.P(["The same verdict on the command line: ", html.Code(id=ids.COMPARE_GATE_COMMAND,
                                                                               className="fv-gate-command")]),
                    html.P(CAPTION, className="fv-hint")]),
                class_name="fv-gate")


def _table(table_id: str, columns: Sequence[tuple[str, str]], marks: list | None = None) -> dash_table.DataTable:
    return dash_table.DataTable(
        id=table_id, columns=[{"name": name, "id": key} for name, key in columns], data=[],
        style_table=HIDDEN, style_cell={"textAlign": "left", "whiteSpace": "normal"},
        style_data_conditional=marks or [])


def _verdict(result: GateResult) -> html.Div:
    status = STATUS_CLASS.get(result.status, "fv-gate-failed")
    return html.Div(html.Strong(headline(result)), className=f"fv-gate-verdict {status}")


def _figures(result: GateResult) -> html.Table | None:
    rows = figure_rows(result)
    if not rows:
        return None
    head = html.Thead(html.Tr([html.Th(h) for h in ("whole run", "A (baseline)", "B (candidate)")]))
    return html.Table([head, html.Tbody([html.Tr([html.Td(c) for c in row]) for row in rows])],
                      className="fv-table fv-gate-figures")


def _notes(result: GateResult) -> list[html.P]:
    return [html.P(["Note: ", n], className="fv-note") for n in result.notes]


class Shown(NamedTuple):
    """What the card shows, in the order of the callback's outputs; by default, no verdict."""

    verdict: Any
    figures: Any = None
    checks: Sequence[dict] = ()
    checks_style: dict = HIDDEN
    sites_title: str | None = None
    sites: Sequence[dict] = ()
    sites_style: dict = HIDDEN
    notes: Sequence[html.P] = ()
    reproduce_style: dict = HIDDEN
    command: str = ""


def _shown(result: GateResult, command: str) -> Shown:
    checks, sites = check_rows(result), site_rows(result)
    title = SITES_TITLE if sites else (None if result.status == CANNOT_JUDGE else NO_SITE_GREW)
    return Shown(_verdict(result), _figures(result), checks, TABLE if checks else HIDDEN, title, sites,
                 TABLE if sites else HIDDEN, _notes(result), {}, command)


def gated(ctx: AppContext, a: int | None, b: int | None, texts: Sequence[str | None]) -> Shown:
    """The verdict of B against A for the budgets typed, its tables and the command that reproduces it; or why
    there is none (two snapshots not picked, a budget not understood)."""
    if a is None or b is None:
        return Shown(html.P("Pick two snapshots to judge B against A."))
    try:
        budgets = budgets_of(texts)
    except UsageError as exc:
        return Shown(html.Div(["Budget not understood: ", str(exc)], className="fv-error", role="alert"))
    return _shown(gate_of(ctx.views, a, b, budgets), gate_command(str(b), str(a), budgets))


def register(app: dash.Dash, ctx: AppContext) -> None:
    @app.callback(Output(ids.COMPARE_GATE_VERDICT, "children"), Output(ids.COMPARE_GATE_FIGURES, "children"),
                  Output(ids.COMPARE_GATE_CHECKS, "data"), Output(ids.COMPARE_GATE_CHECKS, "style_table"),
                  Output(ids.COMPARE_GATE_SITES_TITLE, "children"), Output(ids.COMPARE_GATE_SITES, "data"),
                  Output(ids.COMPARE_GATE_SITES, "style_table"), Output(ids.COMPARE_GATE_NOTES, "children"),
                  Output(ids.COMPARE_GATE_REPRODUCE, "style"), Output(ids.COMPARE_GATE_COMMAND, "children"),
                  Input(ids.COMPARE_A, "value"), Input(ids.COMPARE_B, "value"), *INPUTS)
    def gate(a, b, *texts):
        return gated(ctx, a, b, texts)
