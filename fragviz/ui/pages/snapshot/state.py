"""The selected state on the snapshot page: the controls that choose it (device, event, previous, next), the
segment map and its size axis, the free gaps, and the line of figures above them.

One callback both takes a choice (a click on the timeline, a key, a typed event, a device) into the URL and
draws the state, so that a new event costs one round trip. The URL as its input also serves Back and Forward."""
from __future__ import annotations

import dash
from dash import ClientsideFunction, Input, Output, State, ctx as dash_ctx, dcc, html, no_update

from fragviz.base.units import MiB, counted
from fragviz.model import Segment
from fragviz.model.metrics import PoolFigures, StateFigures, pending_frees, pool_figures, pool_of
from fragviz.ui import ids
from fragviz.ui.context import AppContext
from fragviz.ui.data.views import gaps_of
from fragviz.ui.figures.gaps import gap_histogram_figure
from fragviz.ui.figures.segments import segment_axis_figure, segment_map_figure
from fragviz.ui.pages.common import card, fb, make_search
from fragviz.ui.pages.snapshot.device import whatif_href
from fragviz.ui.pages.snapshot.view import View, view_of

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
    return card("Segments at the selected event",
                dcc.Checklist(id=ids.SEGMENT_MAP_ALL, value=[], className="fv-fold",
                              options=[{"label": " draw every segment (the map folds all but the largest "
                                        f"{SEGMENT_ROWS})", "value": "all"}]),
                html.Div(className="fv-scroll", children=[
                    dcc.Graph(id=ids.SEGMENT_AXIS, className="fv-sticky-axis",
                              config={"displayModeBar": False, "staticPlot": True}),
                    dcc.Graph(id=ids.SEGMENT_MAP, config={"displaylogo": False})]), class_name="fv-wide")


def gaps_card() -> html.Section:
    return card("Free gaps", dcc.Graph(id=ids.GAP_HISTOGRAM, config={"displayModeBar": False}),
                html.Label(["mark a size (MiB) ", dcc.Input(id=ids.MARK_SIZE, type="number", min=0, debounce=True)]))


def register(app: dash.Dash, ctx: AppContext) -> None:
    @app.callback(Output(ids.SNAPSHOT_URL, "search"), Output(ids.SEGMENT_MAP, "figure"),
                  Output(ids.GAP_HISTOGRAM, "figure"), Output(ids.EVENT_INFO, "children"), Output(ids.EVENT, "value"),
                  Output(ids.SEGMENT_AXIS, "figure"), Output(ids.DEVICE, "value"), Output(ids.SELECTED_EVENT, "data"),
                  Input(ids.TIMELINE, "clickData"), Input(ids.PREV, "n_clicks"), Input(ids.NEXT, "n_clicks"),
                  Input(ids.EVENT, "value"), Input(ids.DEVICE, "value"), Input(ids.MARK_SIZE, "value"),
                  Input(ids.SNAPSHOT_URL, "search"), State(ids.SNAPSHOT_URL, "pathname"),
                  State(ids.TIMELINE_AXIS, "value"), Input(ids.SEGMENT_MAP_ALL, "value"))
    def select_and_draw(click, _prev, _next, typed, device, mark_mib, search, pathname, axis, every_segment):
        trigger = dash_ctx.triggered_id
        view, new_search = chosen_view(ctx, trigger, click, typed, device, search, pathname, axis)
        seg_map, seg_axis, histogram, info = draw_state(ctx, view, mark_mib, "all" in (every_segment or []))
        # Only a choice made on the page goes into the URL: the URL itself (loaded, or reached by Back) is never
        # rewritten, or a URL without an event would gain one and Back would land on the same page again.
        navigated = trigger in (None, ids.SNAPSHOT_URL)
        # A URL reached by a link or Back may name another device: the picker follows it (and with it the
        # cards that follow the picker: the OOM verdicts, the sites at the peak).
        return (no_update if new_search == search or navigated else new_search, seg_map, histogram, info,
                no_update if typed == view.event else view.event, seg_axis,
                no_update if device == view.device else view.device, view.event)

    # The segment map's size axis, drawn apart so that it stays in sight, follows the map's margins and zoom
    # (fragviz.syncSegmentAxis in assets/segment_axis.js).
    app.clientside_callback(ClientsideFunction("fragviz", "syncSegmentAxis"), Output(ids.SEGMENT_AXIS, "className"),
                            Input(ids.SEGMENT_MAP, "figure"), Input(ids.SEGMENT_AXIS, "figure"),
                            prevent_initial_call=True)


def chosen_view(ctx: AppContext, trigger, click, typed, device, search: str | None, pathname: str | None,
                axis: str | None) -> tuple[View, str]:
    """The view a choice on the page makes of the URL's (the URL's own when nothing was chosen), and its query."""
    view = view_of(ctx, pathname, search)
    if trigger == ids.DEVICE and device is not None and device != view.device:
        new_search = make_search(device=device)  # another device opens at its end
        return view_of(ctx, pathname, new_search), new_search
    event = chosen_event(trigger, click, typed, view.event, view.n, axis == "time")
    return view._replace(event=event), make_search(device=view.device, event=event)


def draw_state(ctx: AppContext, view: View, mark_mib, every_segment: bool) -> tuple:
    """The segment map, its size axis, the free gaps and the line of figures of the view's state."""
    segments, fig, _ = ctx.views.state(view.sid, view.device, view.event)
    rows = None if every_segment else SEGMENT_ROWS
    seg_map = segment_map_figure(segments, lambda stack: ctx.views.site(view.sid, stack), rows, own_axis=False)
    mark, label = _mark(ctx, view, mark_mib)
    room = pool_of(segments).largest_free_block  # the general pool's: what a general request can get
    histogram = gap_histogram_figure(gaps_of(segments), mark, room, label)
    return seg_map, segment_axis_figure(segments, rows), histogram, event_info(view, fig, segments)


def event_info(view: View, fig: StateFigures, segments: list[Segment]) -> str:
    """The line above the segment map: where the state is in the trace, and its figures."""
    return (f"after {view.event} of {view.n} events · reserved {fb(fig.reserved_bytes)} · allocated "
            f"{fb(fig.allocated_bytes)} · fragmentation {fig.fragmentation:.1%} (non-releasable "
            f"{fb(fig.non_releasable_bytes)}) · largest request the cache can serve now "
            f"{fb(fig.largest_free_block)} · cached free {fb(fig.free_bytes)} in {counted(fig.free_blocks, 'gap')}, "
            f"free scatter {fig.free_scatter:.1%}" + pools_info(pool_figures(segments), segments))


def pools_info(pools: list[PoolFigures], segments: list[Segment]) -> str:
    """Private pools and pending frees of the state, for the line above the segment map (empty without them)."""
    out = ""
    if any(p.is_private for p in pools):
        parts = [f"pool ({p.pool[0]}, {p.pool[1]}) {fb(p.reserved_bytes)} with {fb(p.free_bytes)} free"
                 + (" (private: general requests cannot use it)" if p.is_private else " (general)") for p in pools]
        out += " · those figures cover all pools: " + "; ".join(parts)
    pending = pending_frees(segments)
    if pending.blocks:
        out += (f" · {counted(pending.blocks, 'block')} ({fb(pending.bytes)}) freed, waiting for stream work "
                "(active_pending_free), counted as allocated")
    return out


def chosen_event(trigger, click, typed, event: int, n: int, timed: bool = False) -> int:
    """The event a choice selects, within the trace: a click on the timeline (by time, the point's own event),
    the previous or next event, a typed one; else `event`."""
    if trigger == ids.TIMELINE and click and click.get("points"):
        point = click["points"][0]
        chosen = point.get("customdata") if timed else point["x"]  # by time, each point carries its event
        if chosen is not None:
            return min(max(int(round(float(chosen))), 0), n)
    if trigger == ids.PREV:
        return max(0, event - 1)
    if trigger == ids.NEXT:
        return min(n, event + 1)
    if trigger == ids.EVENT and typed is not None:
        return min(max(int(typed), 0), n)
    return event


def _mark(ctx: AppContext, view: View, mark_mib) -> tuple[int | None, str]:
    """The size the gaps are measured against: one typed in MiB, else the failed request of an OOM at the event."""
    if mark_mib:
        return int(float(mark_mib) * MiB), "size"
    for o in ctx.views.doctor(view.sid):
        if o.device == view.device and o.event is not None and abs(o.event - view.event) <= 1:
            return o.requested_bytes, "failed request"
    return None, ""
