"""The snapshot page's timeline card: memory over the trace by event or by time. A drag refines it to the range
dragged, the axis switch redraws it, and the selected event's line moves in the browser
(fragviz.timelineEventLine in assets/clientside.js); where the device has no trace, a note says why."""
from __future__ import annotations

import dash
from dash import ClientsideFunction, Input, Output, State, dcc, html, no_update

from fragviz.ui import ids
from fragviz.ui.context import AppContext
from fragviz.ui.pages.common import card
from fragviz.ui.pages.snapshot.view import View, draw_timeline, events_at_seconds, view_of

GRAPH_CONFIG = {"displaylogo": False, "scrollZoom": True}
RECORD_HINT = ("torch.cuda.memory._record_memory_history(max_entries=100000, context='all', stacks='all') before "
               "the code runs, then torch.cuda.memory._dump_snapshot('snapshot.pickle')")


def timeline_card(ctx: AppContext, view: View, fmt) -> html.Section:
    """The timeline; where the device has no trace, a note that says so in its place (the graph and the axis
    switch stay, hidden: the page's callbacks read them)."""
    note = no_trace_note(view.n, "segments_list" in fmt.features)
    return card("Memory over the trace", html.Div(note, id=ids.TIMELINE_NOTE), html.Div(
        id=ids.TIMELINE_BOX, style=timeline_box_style(view.n), children=[
            dcc.RadioItems(id=ids.TIMELINE_AXIS, value="event", inline=True, className="fv-axis",
                           options=[{"label": " by event ", "value": "event"},
                                    {"label": " by time", "value": "time", "disabled": "time_us" not in fmt.features}]),
            dcc.Graph(id=ids.TIMELINE, figure=draw_timeline(ctx, view.sid, view.device),
                      config=GRAPH_CONFIG)]))


def timeline_box_style(n: int) -> dict:
    """The timeline and its axis switch stay in the page without a trace (callbacks read them), hidden."""
    return {"display": "none"} if n == 0 else {}


def no_trace_note(n: int, segments_list: bool) -> html.P | None:
    """Why the timeline is empty (no trace) or all but empty (one event); None where it has a history."""
    if n == 0 and segments_list:
        return html.P("This file is a list of segments (torch.cuda.memory_snapshot()): it has no trace, so there "
                      "is no memory over time to draw; only the state when it was taken is shown. For a timeline, "
                      f"record with {RECORD_HINT}.", className="fv-note")
    if n == 0:
        return html.P("This snapshot has no trace: it was recorded without torch.cuda.memory._record_memory_history, "
                      "or with enabled='state' (stacks of live blocks, no history of events). There is no memory over "
                      "time to draw; only the final state is shown. For a timeline, record with "
                      f"{RECORD_HINT}.", className="fv-note")
    if n == 1:
        return html.P("This snapshot's trace holds a single event: it was most likely recorded with enabled='state' "
                      "or max_entries=1, which keep only the last event. Events 0 and 1 are the states before and "
                      "after it.", className="fv-note")
    return None


def refined(ctx: AppContext, view: View, relayout: dict | None, axis: str | None):
    """The timeline over the range a drag chose (by time, turned into events), or over the whole trace again
    after a reset; no_update for any other relayout (Plotly reports one after most redraws)."""
    if not relayout:
        return no_update
    if "xaxis.range[0]" in relayout:
        ends = [relayout["xaxis.range[0]"], relayout["xaxis.range[1]"]]
        if axis == "time":
            ends = events_at_seconds(ctx, view.sid, view.device, ends)
        lo, hi = int(max(0, ends[0])), int(min(view.n, ends[1]) + 1)
        return draw_timeline(ctx, view.sid, view.device, lo, max(lo + 1, hi), axis)
    if relayout.get("xaxis.autorange"):
        return draw_timeline(ctx, view.sid, view.device, axis=axis)
    return no_update


def register(app: dash.Dash, ctx: AppContext) -> None:
    # The axis switch is a callback of its own: a relayout fired while it is in flight (Plotly reports one
    # after most redraws) would otherwise supersede its request, and the page would drop the new axis.
    @app.callback(Output(ids.TIMELINE, "figure", allow_duplicate=True), Input(ids.TIMELINE_AXIS, "value"),
                  State(ids.SNAPSHOT_URL, "search"), State(ids.SNAPSHOT_URL, "pathname"), prevent_initial_call=True)
    def switch_axis(axis, search, pathname):
        view = view_of(ctx, pathname, search)
        return draw_timeline(ctx, view.sid, view.device, axis=axis)

    @app.callback(Output(ids.TIMELINE, "figure"), Input(ids.TIMELINE, "relayoutData"),
                  State(ids.TIMELINE_AXIS, "value"), State(ids.SNAPSHOT_URL, "search"),
                  State(ids.SNAPSHOT_URL, "pathname"), prevent_initial_call=True)
    def refine_timeline(relayout, axis, search, pathname):
        return refined(ctx, view_of(ctx, pathname, search), relayout, axis)

    # The selected event's line moves in the browser: no round trip, and no redraw of the timeline. The event
    # comes from the state's callback; by time, the figure's meta says where each event is.
    app.clientside_callback(ClientsideFunction("fragviz", "timelineEventLine"), Output(ids.TIMELINE, "className"),
                            Input(ids.SELECTED_EVENT, "data"), prevent_initial_call=True)
