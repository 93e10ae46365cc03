"""The snapshot page's views of what holds memory: live memory by kind (or site) and every allocation as a band,
the stack panel's words for a band, and their callbacks.

Both views share the page's event (a line at the selected event) and its zoom: a drag on the timeline, the
bands or the kind areas redraws all three over that range, refined to exact states when it is short enough.
"""
from __future__ import annotations

import dash
from dash import ClientsideFunction, Input, Output, State, ctx as dash_ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from fragviz.base.errors import FragvizError
from fragviz.ui import ids
from fragviz.ui.context import AppContext
from fragviz.ui.figures.usage import bands_figure, empty_figure, groups_figure
from fragviz.ui.pages.common import card, fb
from fragviz.ui.pages.snapshot.view import View, draw_timeline, view_of
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


def allocation_panel(ctx: AppContext, sid: int, device: int, row: int) -> tuple[html.Div, int]:
    """The head of the stack panel for a clicked band, and the allocation's stack."""
    record = ctx.views.usage.allocation(sid, device, row)
    head = html.Div([html.P(f"allocation of {fb(record['size'])} at {record['address']:#x}"),
                     html.Ul([html.Li(line) for line in record["facts"][1:]], className="fv-alloc-facts")])
    return head, record["stack"]


def usage_views(ctx: AppContext, view: View, by: str, view_range: dict | None) -> tuple:
    """The bands, the kind (or site) areas and the kind notes over the range (the whole trace without one)."""
    lo, hi = (min(view_range["lo"], view.n), min(view_range["hi"], view.n)) if view_range else (0, None)
    try:
        bands, groups = ctx.views.usage.view(view.sid, view.device, by, lo, hi)
        notes = kind_notes(ctx.views.usage.kind_notes(view.sid, view.device))
    except FragvizError as exc:
        return empty_figure(str(exc)), empty_figure(str(exc)), []
    x_range = [lo, hi + 1] if view_range else None
    return bands_figure(bands, x_range), groups_figure(groups, x_range), notes


def followed_zoom(ctx: AppContext, view: View, view_range: dict, axis: str | None):
    """The timeline over a range dragged on the bands or the kind areas (or the whole trace, for a reset)."""
    if view_range.get("all"):
        return draw_timeline(ctx, view.sid, view.device, axis=axis)
    lo = min(view_range["lo"], view.n)
    return draw_timeline(ctx, view.sid, view.device, lo, max(lo + 1, min(view_range["hi"], view.n) + 1),
                         axis)


def register(app: dash.Dash, ctx: AppContext) -> None:
    # The range all three views show, in events, from whichever graph was dragged (fragviz.usageRange in
    # assets/usage.js; by time, the timeline figure's meta turns the seconds dragged into events)
    app.clientside_callback(ClientsideFunction("fragviz", "usageRange"), Output(ids.USAGE_RANGE, "data"),
                            Output(ids.TIMELINE_FOLLOW, "data"),
                            Input(ids.TIMELINE, "relayoutData"), Input(ids.ALLOC_BANDS, "relayoutData"),
                            Input(ids.MEMORY_BY, "relayoutData"), State(ids.TIMELINE_AXIS, "value"),
                            State(ids.TIMELINE, "figure"), prevent_initial_call=True)

    @app.callback(Output(ids.ALLOC_BANDS, "figure"), Output(ids.MEMORY_BY, "figure"),
                  Output(ids.KIND_NOTES, "children"), Input(ids.USAGE_RANGE, "data"),
                  Input(ids.MEMORY_BY_GROUP, "value"), Input(ids.STATE_DRAWN, "data"),
                  State(ids.SNAPSHOT_URL, "pathname"), State(ids.SNAPSHOT_URL, "search"))
    def draw_usage(view_range, by, drawn, pathname, search):
        # drawn once the device's first state is (assets/state_view.js): the state comes first
        if not drawn:
            raise PreventUpdate
        view = view_of(ctx, pathname, search)
        if dash_ctx.triggered_id == ids.STATE_DRAWN or (view_range and view_range.get("all")):
            view_range = None  # a new device starts over its whole trace, as does a reset of the zoom
        return usage_views(ctx, view._replace(device=drawn["device"]), by or "kind", view_range)

    @app.callback(Output(ids.TIMELINE, "figure", allow_duplicate=True), Input(ids.TIMELINE_FOLLOW, "data"),
                  State(ids.TIMELINE_AXIS, "value"), State(ids.SNAPSHOT_URL, "pathname"),
                  State(ids.SNAPSHOT_URL, "search"), prevent_initial_call=True)
    def follow_zoom(view_range, axis, pathname, search):
        # The timeline refines itself on its own drags; it follows the drags on the other two
        if not view_range:
            return no_update
        return followed_zoom(ctx, view_of(ctx, pathname, search), view_range, axis)

    # The selected event's line on both views, placed in the browser (fragviz.usageEventLine in assets/usage.js)
    app.clientside_callback(ClientsideFunction("fragviz", "usageEventLine"), Output(ids.ALLOC_BANDS, "className"),
                            Input(ids.SELECTED_EVENT, "data"), Input(ids.ALLOC_BANDS, "figure"),
                            Input(ids.MEMORY_BY, "figure"))
