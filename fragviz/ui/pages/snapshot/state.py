"""The selected state on the snapshot page: the controls that choose it (device, event, previous, next), the
segment map and its size axis, the free gaps, and the line of figures above them.

The browser both takes a choice (a click on the timeline, a key, a typed event, a device) into the URL and
draws the state (assets/state_view.js): from the device's lives where its trace is within page_state_events,
so that a new event costs no round trip, else from the server's state. The URL as an input also serves Back
and Forward."""
from __future__ import annotations

import dash
from dash import ClientsideFunction, Input, Output, State, dcc, html

from fragviz.base.settings import setting
from fragviz.ui import ids
from fragviz.ui.context import AppContext
from fragviz.ui.figures.segments import FREE_BLOCK
from fragviz.ui.figures.style import COLORS
from fragviz.ui.pages.common import card
from fragviz.ui.pages.snapshot.device import whatif_href
from fragviz.ui.pages.snapshot.view import View

SEGMENT_ROWS = 120  # segments drawn before the smallest are folded


def controls(devices: list[int], view: View) -> html.Div:
    return html.Div(className="fv-controls", children=[
        html.Label(["device ", dcc.Dropdown(id=ids.DEVICE, value=view.device, clearable=False, className="fv-device",
                                            options=[{"label": f"cuda:{d}", "value": d} for d in devices])]),
        html.Button("◀", id=ids.PREV, title="previous event (←)", n_clicks=0),
        html.Label(["event ", dcc.Input(id=ids.EVENT, type="number", min=0, max=view.n, value=view.event,
                                        debounce=True, className="fv-event")]),
        html.Button("▶", id=ids.NEXT, title="next event (→)", n_clicks=0),
        html.Span(id=ids.EVENT_INFO, className="fv-event-info"),
        dcc.Link("what if…", id=ids.SNAPSHOT_WHATIF, href=whatif_href(view.sid, view.device), className="fv-action"),
        dcc.Link("compare…", href=f"/compare?a={view.sid}", className="fv-action"),
    ])


def segments_card() -> html.Section:
    """The segment map and its size axis, drawn on canvases in the browser (assets/state_draw.js) into a box
    Dash renders empty."""
    return card("Segments at the selected event",
                dcc.Checklist(id=ids.SEGMENT_MAP_ALL, value=[], className="fv-fold",
                              options=[{"label": " draw every segment (the map folds all but the largest "
                                        f"{SEGMENT_ROWS})", "value": "all"}]),
                html.Div(id=ids.SEGMENT_MAP, className="fv-state-map"), class_name="fv-wide")


def gaps_card() -> html.Section:
    return card("Free gaps", html.Div(id=ids.GAP_HISTOGRAM, className="fv-state-gaps"),
                html.Label(["mark a size (MiB) ", dcc.Input(id=ids.MARK_SIZE, type="number", min=0, debounce=True)]))


def state_source(ctx: AppContext, sid: int, devices: list[int], opening: int) -> dcc.Store:
    """What the page needs to choose and draw a state itself (assets/state_view.js): each device's trace
    length and whether its lives come to the page (within page_state_events), the OOMs' failed requests, the
    colours and the component ids."""
    budget = int(setting("page_state_events"))
    lengths = {d: ctx.reader.trace_length(sid, d) for d in devices}
    ooms = [{"device": o.device, "event": o.event, "requested": o.requested_bytes}
            for o in ctx.views.doctor(sid) if o.event is not None]
    colors = {"allocated": COLORS["allocated"], "rounding waste": COLORS["waste"], "pending free": COLORS["pending"],
              "free": FREE_BLOCK, "gaps": COLORS["free"], "volume": COLORS["reserved"], "mark": COLORS["oom"]}
    return dcc.Store(id=ids.STATE_SOURCE, data={
        "sid": sid, "opening": opening, "rows": SEGMENT_ROWS, "ooms": ooms, "colors": colors,
        "devices": {d: {"n": n, "lives": n <= budget} for d, n in lengths.items()},
        "ids": {"timeline": ids.TIMELINE, "prev": ids.PREV, "next": ids.NEXT, "event": ids.EVENT,
                "device": ids.DEVICE, "url": ids.SNAPSHOT_URL, "info": ids.EVENT_INFO, "blockClick": ids.BLOCK_CLICK,
                "stateDrawn": ids.STATE_DRAWN, "sitesTrigger": ids.SITES_TRIGGER}})


def register(app: dash.Dash, ctx: AppContext) -> None:
    # A choice (the timeline, the buttons and keys, a typed event, the device, the URL) goes into the URL and
    # the state is drawn in the browser: fragviz.selectEvent in assets/state_view.js. The sites and the
    # icicle, the timeline's line and the usage views follow the selected event it gives.
    app.clientside_callback(
        ClientsideFunction("fragviz", "selectEvent"),
        Output(ids.SNAPSHOT_URL, "search"), Output(ids.EVENT, "value"), Output(ids.DEVICE, "value"),
        Output(ids.SELECTED_EVENT, "data"),
        Input(ids.TIMELINE, "clickData"), Input(ids.PREV, "n_clicks"), Input(ids.NEXT, "n_clicks"),
        Input(ids.EVENT, "value"), Input(ids.DEVICE, "value"), Input(ids.MARK_SIZE, "value"),
        Input(ids.SNAPSHOT_URL, "search"), Input(ids.SEGMENT_MAP_ALL, "value"),
        State(ids.TIMELINE_AXIS, "value"), State(ids.STATE_SOURCE, "data"))
