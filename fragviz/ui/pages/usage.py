"""The snapshot page's views of what holds memory: live memory by kind (or site) and every allocation as a band.

The cards and the stack panel's words for a band; their callbacks are in usage_callbacks.py.
"""
from __future__ import annotations

from dash import dcc, html

from fragviz.ui import ids
from fragviz.ui.pages.common import card, fb
from fragviz.ui.figures.usage import empty_figure
from fragviz.usage.kinds import KIND_LABELS

GRAPH_CONFIG = {"displaylogo": False, "scrollZoom": True}
NO_TRACE = ("This device's snapshot has no trace, so there is no memory over time to draw: record one with "
            "torch.cuda.memory._record_memory_history() before the run.")


def cards(n: int) -> list:
    """The kind areas and the allocation bands, drawn by a callback once the page is up (so they never delay it)."""
    if n == 0:  # the components stay, hidden: the stack panel's callback reads the bands' clicks
        hidden = html.Div(style={"display": "none"}, children=[
            dcc.RadioItems(id=ids.MEMORY_BY_GROUP, value="kind", options=["kind", "site"]),
            html.Div(id=ids.KIND_NOTES),
            dcc.Graph(id=ids.MEMORY_BY), dcc.Graph(id=ids.ALLOC_BANDS), dcc.Store(id=ids.USAGE_RANGE),
            dcc.Store(id=ids.TIMELINE_FOLLOW), dcc.Store(id=ids.BAND_CLICK)])
        return [card("What holds memory over the trace", html.P(NO_TRACE, className="fv-hint"), hidden)]
    return [
        card("Live memory by kind",
             dcc.RadioItems(id=ids.MEMORY_BY_GROUP, value="kind", inline=True, className="fv-axis",
                            options=[{"label": " by kind ", "value": "kind"},
                                     {"label": " by allocation site", "value": "site"}]),
             html.P(["Kinds are read from each allocation's stack by rules that can be extended in fragviz.toml "
                     "(", html.Code("[kinds]"), ", see the README)."], className="fv-hint"),
             html.Div(id=ids.KIND_NOTES),
             dcc.Loading(dcc.Graph(id=ids.MEMORY_BY, config=GRAPH_CONFIG, figure=empty_figure("drawing…")))),
        card("Active memory by allocation",
             html.P("Every live allocation as a band, the longest-lived at the bottom, coloured by allocation "
                    "site. Hover a band for its size, lifetime and site; click it for its stack (in the panel "
                    "below); drag to zoom.", className="fv-hint"),
             dcc.Loading(dcc.Graph(id=ids.ALLOC_BANDS, config=GRAPH_CONFIG, figure=empty_figure("drawing…"))),
             dcc.Store(id=ids.USAGE_RANGE), dcc.Store(id=ids.TIMELINE_FOLLOW),
             dcc.Store(id=ids.BAND_CLICK)),
    ]


def kind_notes(notes: dict[str, str]) -> list:
    """The card's words on the kinds that no stack names: why that memory has no stack recorded, and why some of
    it is shown as parameters (inferred)."""
    return [html.P([html.B(f"{KIND_LABELS[kind]}: "), text], className="fv-note") for kind, text in notes.items()]


def allocation_panel(app_ctx, sid: int, device: int, row: int) -> tuple[html.Div, int]:
    """The head of the stack panel for a clicked band, and the allocation's stack."""
    record = app_ctx.views.usage.allocation(sid, device, row)
    head = html.Div([html.P(f"allocation of {fb(record['size'])} at {record['address']:#x}"),
                     html.Ul([html.Li(line) for line in record["facts"][1:]], className="fv-alloc-facts")])
    return head, record["stack"]
