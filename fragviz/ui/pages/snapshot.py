"""The snapshot page: /snapshots/<id>?device=N&event=K. Every state of the view is in the URL."""
from __future__ import annotations

import numpy as np
from dash import ClientsideFunction, Input, Output, State, ctx as dash_ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from fragviz.base.errors import FragvizError
from fragviz.model.metrics import PoolFigures, pending_frees, pool_figures, pool_of
from fragviz.model import Segment
from fragviz.snapshot.frames import is_user_frame, visible_frames
from fragviz.ui import ids
from fragviz.ui.figures.gaps import gap_histogram_figure
from fragviz.ui.figures.segments import segment_axis_figure, segment_map_figure
from fragviz.ui.figures.stacks import icicle_figure
from fragviz.ui.figures.timeline import timeline_figure
from fragviz.ui.pages import snapshot_device, snapshot_export, snapshot_oom, usage
from fragviz.ui.data.views import gaps_of
from fragviz.ui.pages.common import card, error_panel, fb, header, make_search, opening_device, query_int
from fragviz.ui.data.sites import icicle_note, icicle_weights, no_trace_note, peak_info, sites_rows, sites_table

GRAPH_CONFIG = {"displaylogo": False, "scrollZoom": True}
SEGMENT_ROWS = 120  # segments drawn before the smallest are folded


def sid_of(pathname: str | None) -> int | None:
    parts = (pathname or "").strip("/").split("/")
    if len(parts) >= 2 and parts[0] in ("snapshots", "whatif") and parts[1].isdigit():
        return int(parts[1])
    return None


def page_sid(pathname: str | None) -> int:
    """The snapshot id of a snapshot page's path; off a snapshot page, PreventUpdate.

    The page's own dcc.Location hears an in-app jump to another page (a dcc.Link) before the router has
    replaced the page, so every callback of this page reads its path through here (or view_of) and then
    does nothing. An unreadable id under /snapshots/ stays an error: the layout shows it."""
    if not (pathname or "").startswith("/snapshots/"):
        raise PreventUpdate
    return sid_of(pathname)


def view_of(app_ctx, pathname: str | None, search: str | None) -> tuple[int, int, int, int]:
    """(snapshot id, device, event, trace length) from the URL, defaults filled in (without a device, the device
    of the first OOM: see opening_device), bounds checked (PreventUpdate off a snapshot page: see page_sid)."""
    sid = page_sid(pathname)
    row = app_ctx.reader.snapshot_row(sid)
    device = opening_device(row.devices, row.summary, query_int(search, "device"))
    n = app_ctx.reader.trace_length(sid, device) if row.devices else 0
    event = query_int(search, "event")
    event = n if event is None else min(max(event, 0), n)
    return sid, device, event, n


def layout(app_ctx, pathname: str, search: str | None) -> html.Div:
    try:
        sid, device, event, n = view_of(app_ctx, pathname, search)
        row = app_ctx.reader.snapshot_row(sid)
        meta = app_ctx.reader.snapshot_meta(sid)
    except FragvizError as exc:
        return html.Div([header(), html.Main(className="fv-main", children=[error_panel(str(exc))])])
    fmt = meta["format"]
    if not row.devices:
        return empty_page(row, meta)
    controls = html.Div(className="fv-controls", children=[
        html.Label(["device ", dcc.Dropdown(id=ids.DEVICE, value=device, clearable=False, className="fv-device",
                                            options=[{"label": f"cuda:{d}", "value": d} for d in row.devices])]),
        html.Button("◀", id=ids.PREV, title="previous event (←)", n_clicks=0),
        html.Label(["event ", dcc.Input(id=ids.EVENT, type="number", min=0, max=n, value=event, debounce=True,
                                        className="fv-event")]),
        html.Button("▶", id=ids.NEXT, title="next event (→)", n_clicks=0),
        html.Span(id=ids.EVENT_INFO, className="fv-event-info"),
        dcc.Link("what if…", id=ids.SNAPSHOT_WHATIF, href=snapshot_device.whatif_href(sid, device),
                 className="fv-action"),
        dcc.Link("compare…", href=f"/compare?a={sid}", className="fv-action"),
    ])
    return html.Div([
        dcc.Location(id=ids.SNAPSHOT_URL, refresh="callback-nav"), dcc.Store(id="sites-trigger"), dcc.Store(id=ids.STACK_SOURCE),
        header(),
        html.Main(className="fv-main", children=[
            html.H2(row.name.rsplit("/", 1)[-1], title=row.name),
            html.P(snapshot_device.sub_line(fmt, row.file_size, n, device), id=ids.SNAPSHOT_SUB, className="fv-sub"),
            controls,
            timeline_card(app_ctx, sid, device, event, n, fmt),
            *usage.cards(n),
            html.Div(className="fv-row", children=[
                card("Segments at the selected event",
                     dcc.Checklist(id=ids.SEGMENT_MAP_ALL, value=[], className="fv-fold",
                                   options=[{"label": " draw every segment (the map folds all but the largest "
                                             f"{SEGMENT_ROWS})", "value": "all"}]),
                     html.Div(className="fv-scroll", children=[
                         dcc.Graph(id=ids.SEGMENT_AXIS, className="fv-sticky-axis",
                                   config={"displayModeBar": False, "staticPlot": True}),
                         dcc.Graph(id=ids.SEGMENT_MAP, config={"displaylogo": False})]), class_name="fv-wide"),
                card("Stack of the clicked block or allocation",
                     dcc.Checklist(id=ids.STACK_ALL, options=[{"label": " show PyTorch-internal and C++ frames",
                                                               "value": "all"}], value=[]),
                     html.Div(id=ids.STACK_TRACE, className="fv-stack",
                              children=html.P("Click a block in the segment map or a band of the allocations above.")), class_name="fv-narrow"),
            ]),
            html.Div(className="fv-row", children=[
                card("Free gaps", dcc.Graph(id=ids.GAP_HISTOGRAM, config={"displaylogo": False}),
                     html.Label(["mark a size (MiB) ", dcc.Input(id=ids.MARK_SIZE, type="number", min=0,
                                                                 debounce=True)])),
                card("Why it ran out of memory", dcc.Loading(html.Div(id=ids.OOM_VERDICT))),
            ]),
            html.Div(className="fv-row", children=[
                card("Top allocation sites at the event", sites_table(ids.SITES_NOW), class_name="fv-sites"),
                card("Top allocation sites at the peak", dcc.Loading([html.Div(id=ids.SITES_PEAK_INFO),
                                                                      sites_table(ids.SITES_PEAK)]),
                     class_name="fv-sites"),
            ]),
            card("Memory by stack at the event",
                 html.P("Stacks as the block's stack above shows them: PyTorch-internal and C++ frames hidden "
                        "unless its box is ticked; the frames all stacks share folded into the top box.",
                        className="fv-hint"), html.Div(id=ids.ICICLE_NOTE),
                 dcc.Graph(id=ids.ICICLE, config={"displaylogo": False})),
            snapshot_export.export_card(app_ctx, sid, device, event),
            card("Allocator settings and capture health", health(meta), id=ids.HEALTH),
        ]),
    ])


def timeline_card(app_ctx, sid: int, device: int, event: int, n: int, fmt) -> html.Section:
    """The timeline; where the device has no trace, a note that says so in its place (the graph and the axis
    switch stay, hidden: the page's callbacks read them)."""
    note = no_trace_note(n, "segments_list" in fmt.features)
    hidden = snapshot_device.timeline_box_style(n)
    return card("Memory over the trace", html.Div(note, id=ids.TIMELINE_NOTE), html.Div(id=ids.TIMELINE_BOX,
                                                                                         style=hidden, children=[
        dcc.RadioItems(id=ids.TIMELINE_AXIS, value="event", inline=True, className="fv-axis",
                       options=[{"label": " by event ", "value": "event"},
                                {"label": " by time", "value": "time", "disabled": "time_us" not in fmt.features}]),
        dcc.Graph(id=ids.TIMELINE, figure=timeline(app_ctx, sid, device, event), config=GRAPH_CONFIG)]))


def empty_page(row, meta: dict) -> html.Div:
    """A snapshot with no device at all: nothing to select or draw, so no controls; what it holds and why."""
    fmt = meta["format"]
    return html.Div([header(), html.Main(className="fv-main", children=[
        html.H2(row.name.rsplit("/", 1)[-1], title=row.name),
        html.P(f"format {fmt.generation} ({fmt.torch_estimate}), {fmt.encoding} · {fb(row.file_size)}",
               className="fv-sub"),
        card("Memory over the trace", html.Div(id=ids.TIMELINE_NOTE, children=html.P(
            "This snapshot is empty: it holds no segment and no trace event on any device. It was taken before "
            "anything was allocated on a CUDA device (or after torch.cuda.empty_cache() returned every segment) "
            "with no memory history recorded. There is nothing to draw."))),
        card("Allocator settings and capture health", health(meta), id=ids.HEALTH),
    ])])


def health(meta: dict) -> html.Div:
    settings = meta["allocator_settings"]
    conf = (settings or {}).get("PYTORCH_CUDA_ALLOC_CONF") or "(defaults)"
    items = [html.Li(w) for w in meta["warnings"]] or [html.Li("No capture problems found.")]
    shown = {k: v for k, v in (settings or {}).items() if k != "roundup_power2_divisions"}
    return html.Div([
        html.P(["PYTORCH_CUDA_ALLOC_CONF: ", html.Code(conf)] if settings else
               "This snapshot records no allocator settings (PyTorch before about 2.3): defaults are assumed."),
        html.Ul([html.Li(f"{k}: {v}") for k, v in shown.items()]) if shown else None,
        html.H4("Capture health"), html.Ul(items, className="fv-warnings"),
    ])


def timeline(app_ctx, sid: int, device: int, event: int, lo: int | None = None, hi: int | None = None,
             axis: str = "event"):
    tl = app_ctx.reader.timeline(sid, device, lo or 0, hi)
    x_range = None
    if lo is not None and hi is not None:
        x_range = [lo, hi] if axis == "event" else _seconds(app_ctx, sid, device, [lo, hi])
    return timeline_figure(tl, app_ctx.views.markers(sid, device), event, x_range=x_range, axis=axis,
                                   spans=app_ctx.views.annotation_spans(sid, device))


def _time_map(app_ctx, sid: int, device: int):
    """(event starts, seconds since the first event) over the whole trace, coarse: to turn one into the other."""
    tl = app_ctx.reader.timeline(sid, device, max_points=5000)
    if tl.get("t0_us") is None:
        return None
    return np.asarray(tl["start"]), (np.asarray(tl["time_us_min"]) - tl["t0_us"]) / 1e6


def _seconds(app_ctx, sid: int, device: int, events: list[int]) -> list[float] | None:
    m = _time_map(app_ctx, sid, device)
    return None if m is None else [float(v) for v in np.interp(events, m[0], m[1])]


def events_at_seconds(app_ctx, sid: int, device: int, seconds: list[float]) -> list[int]:
    m = _time_map(app_ctx, sid, device)
    if m is None:
        return [int(s) for s in seconds]
    return [int(v) for v in np.interp(seconds, m[1], m[0])]


def _frames_view(frames, show_all: bool) -> html.Div:
    if not frames:
        return html.P("No stack was recorded for this block (record history with context='all').")
    shown = visible_frames(frames, show_all)
    hidden = len(frames) - len(shown)
    lines = [html.Li([html.Code(f.name), html.Span(f"  {f.filename}:{f.line}", className="fv-file-line")],
                     className="fv-user" if is_user_frame(f) else "") for f in shown]
    note = html.P(f"{hidden} PyTorch-internal and C++ frames hidden.", className="fv-hint") if hidden else None
    return html.Div([html.Ol(lines, className="fv-frames"), note])


def register(app, app_ctx) -> None:
    snapshot_export.register(app, app_ctx, view_of)
    snapshot_oom.register(app, app_ctx, page_sid)
    snapshot_device.register(app, app_ctx, view_of, timeline)

    @app.callback(Output(ids.SNAPSHOT_URL, "search"), Output(ids.SEGMENT_MAP, "figure"), Output(ids.GAP_HISTOGRAM, "figure"),
                  Output(ids.EVENT_INFO, "children"), Output(ids.EVENT, "value"), Output(ids.SEGMENT_AXIS, "figure"),
                  Output(ids.DEVICE, "value"),
                  Input(ids.TIMELINE, "clickData"), Input(ids.PREV, "n_clicks"), Input(ids.NEXT, "n_clicks"),
                  Input(ids.EVENT, "value"), Input(ids.DEVICE, "value"), Input(ids.MARK_SIZE, "value"),
                  Input(ids.SNAPSHOT_URL, "search"), State(ids.SNAPSHOT_URL, "pathname"), State(ids.TIMELINE_AXIS, "value"),
                  Input(ids.SEGMENT_MAP_ALL, "value"))
    def select_and_draw(click, _prev, _next, typed, device, mark_mib, search, pathname, axis, every_segment):
        # One callback both takes the choice (a click, a key, a typed event) into the URL and draws the state,
        # so a new event costs one round trip. The URL as input also serves back and forward navigation.
        sid, cur_device, event, n = view_of(app_ctx, pathname, search)
        trigger = dash_ctx.triggered_id
        if trigger == ids.DEVICE and device is not None and device != cur_device:
            new_search = make_search(device=device)
            sid, cur_device, event, n = view_of(app_ctx, pathname, new_search)
        else:
            event = _chosen_event(trigger, click, typed, event, n, axis == "time")
            new_search = make_search(device=cur_device, event=event)
        segments, fig, _ = app_ctx.views.state(sid, cur_device, event)
        rows = None if "all" in (every_segment or []) else SEGMENT_ROWS
        seg_map = segment_map_figure(segments, lambda stack: app_ctx.views.site(sid, stack), rows,
                                             own_axis=False)
        mark, label = _mark(app_ctx, sid, cur_device, event, mark_mib)
        pools = pool_figures(segments)
        room = pool_of(segments).largest_free_block  # the general pool's: what a general request can get
        hist = gap_histogram_figure(gaps_of(segments), mark, room, label)
        info = (f"after {event} of {n} events · reserved {fb(fig.reserved_bytes)} · allocated "
                f"{fb(fig.allocated_bytes)} · fragmentation {fig.fragmentation:.1%} (non-releasable "
                f"{fb(fig.non_releasable_bytes)}) · largest request the cache can serve now "
                f"{fb(fig.largest_free_block)} · cached free {fb(fig.free_bytes)} in {fig.free_blocks} gaps, "
                f"free scatter {fig.free_scatter:.1%}" + pools_info(pools, segments))
        # Only a choice made on the page goes into the URL: the URL itself (loaded, or reached by Back) is never
        # rewritten, or a URL without an event would gain one and Back would land on the same page again.
        navigated = trigger in (None, ids.SNAPSHOT_URL)
        # A URL reached by a link or Back may name another device: the picker follows it (and with it the
        # cards that follow the picker: the OOM verdicts, the sites at the peak).
        return (no_update if new_search == search or navigated else new_search,
                seg_map, hist, info, (no_update if typed == event else event),
                segment_axis_figure(segments, rows), (no_update if device == cur_device else cur_device))

    # The sites table and the icicle follow a moment later, so that the segment map and the histogram of a
    # new event are drawn first (the browser draws one thing at a time).
    app.clientside_callback(
        "function(info) { return new Promise(resolve => setTimeout(() => resolve(info), 120)); }",
        Output("sites-trigger", "data"), Input(ids.EVENT_INFO, "children"))

    @app.callback(Output(ids.SITES_NOW, "data"), Output(ids.SITES_NOW, "tooltip_data"), Output(ids.ICICLE, "figure"),
                  Output(ids.ICICLE, "style"), Output(ids.ICICLE_NOTE, "children"), Input("sites-trigger", "data"),
                  Input(ids.STACK_ALL, "value"), State(ids.SNAPSHOT_URL, "pathname"), State(ids.SNAPSHOT_URL, "search"))
    def draw_sites(_, show_all, pathname, search):
        # The icicle follows the stack panel's frame filter: its checkbox redraws it
        sid, device, event, _n = view_of(app_ctx, pathname, search)
        segments, _, _ = app_ctx.views.state(sid, device, event)
        sites, tips = sites_rows(app_ctx.views.top_sites(sid, segments))
        weights = icicle_weights(app_ctx.views.stack_weights(sid, segments, limit=60), "all" in (show_all or []))
        fig = icicle_figure(weights, max_depth=8) if weights else {}
        return sites, tips, fig, {} if weights else {"display": "none"}, icicle_note(segments, weights)

    # The axis switch is a callback of its own: a relayout fired while it is in flight (Plotly reports one
    # after most redraws) would otherwise supersede its request, and the page would drop the new axis.
    @app.callback(Output(ids.TIMELINE, "figure", allow_duplicate=True), Input(ids.TIMELINE_AXIS, "value"),
                  State(ids.SNAPSHOT_URL, "search"), State(ids.SNAPSHOT_URL, "pathname"), prevent_initial_call=True)
    def switch_axis(axis, search, pathname):
        sid, device, event, _ = view_of(app_ctx, pathname, search)
        return timeline(app_ctx, sid, device, event, axis=axis)

    @app.callback(Output(ids.TIMELINE, "figure"), Input(ids.TIMELINE, "relayoutData"),
                  State(ids.TIMELINE_AXIS, "value"), State(ids.SNAPSHOT_URL, "search"),
                  State(ids.SNAPSHOT_URL, "pathname"), prevent_initial_call=True)
    def refine_timeline(relayout, axis, search, pathname):
        sid, device, event, n = view_of(app_ctx, pathname, search)
        if not relayout:
            return no_update
        if "xaxis.range[0]" in relayout:
            ends = [relayout["xaxis.range[0]"], relayout["xaxis.range[1]"]]
            if axis == "time":
                ends = events_at_seconds(app_ctx, sid, device, ends)
            lo, hi = int(max(0, ends[0])), int(min(n, ends[1]) + 1)
            return timeline(app_ctx, sid, device, event, lo, max(lo + 1, hi), axis)
        if relayout.get("xaxis.autorange"):
            return timeline(app_ctx, sid, device, event, axis=axis)
        return no_update

    # The segment map's size axis, drawn apart so that it stays in sight, follows the map's margins and zoom
    # (assets/segment_axis.js).
    app.clientside_callback(ClientsideFunction("fragviz", "syncSegmentAxis"), Output(ids.SEGMENT_AXIS, "className"),
                            Input(ids.SEGMENT_MAP, "figure"), Input(ids.SEGMENT_AXIS, "figure"),
                            prevent_initial_call=True)

    # The selected event's line moves in the browser: no round trip, and the segment map is not kept waiting.
    app.clientside_callback(
        """function(info) {
            const plot = document.querySelector('#timeline .js-plotly-plot');
            const m = /after (\\d+) of/.exec(info || '');
            if (plot && m && window.Plotly) {
                const k = Number(m[1]);
                let x = k;
                const title = (plot.layout.xaxis && plot.layout.xaxis.title && plot.layout.xaxis.title.text) || '';
                const d = plot._fullData && plot._fullData[0];
                if (title.startsWith('seconds') && d && d.customdata) {
                    let i = 0;
                    while (i < d.customdata.length - 1 && d.customdata[i] < k) { i += 1; }
                    x = d.x[i];
                }
                window.Plotly.relayout(plot, {shapes: [{type: 'line', xref: 'x', yref: 'paper', x0: x, x1: x,
                                                        y0: 0, y1: 1, line: {color: '#000000', width: 1}}]});
            }
            return window.dash_clientside.no_update;
        }""",
        Output(ids.TIMELINE, "className"), Input(ids.EVENT_INFO, "children"), prevent_initial_call=True)

    @app.callback(Output(ids.STACK_TRACE, "children"), Output(ids.STACK_SOURCE, "data"),
                  Input(ids.SEGMENT_MAP, "clickData"), Input(ids.BAND_CLICK, "data"),
                  Input(ids.STACK_ALL, "value"), State(ids.STACK_SOURCE, "data"), State(ids.SNAPSHOT_URL, "pathname"),
                  State(ids.SNAPSHOT_URL, "search"), prevent_initial_call=True)
    def show_stack(block_click, band_click, show_all, source, pathname, search):
        # The panel shows the last thing clicked: a block of the segment map or a band of the allocation view
        trigger = dash_ctx.triggered_id
        if trigger == ids.SEGMENT_MAP:
            point = (block_click or {}).get("points", [{}])[0]
            if "customdata" not in point:
                return no_update, no_update
            source = {"kind": "block", "key": point["customdata"]}
        elif trigger == ids.BAND_CLICK:
            if not band_click:
                return no_update, no_update
            source = {"kind": "allocation", "key": band_click["row"]}
        if not source:
            return no_update, no_update
        sid, device, event, _ = view_of(app_ctx, pathname, search)
        if source["kind"] == "allocation":
            head, stack = usage.allocation_panel(app_ctx, sid, device, int(source["key"]))
        else:
            seg_index, block_index = (int(v) for v in str(source["key"]).split(":"))
            segments, _, _ = app_ctx.views.state(sid, device, event)
            block = segments[seg_index].blocks[block_index]
            head = html.P(f"{block.state.value} block of {fb(block.size)} at {block.address:#x}"
                          + (f", requested {fb(block.requested_size)}" if block.requested_size else ""))
            stack = block.stack
        return html.Div([head, _frames_view(app_ctx.views.frames(sid, stack), "all" in (show_all or []))]), source

    @app.callback(Output(ids.SITES_PEAK, "data"), Output(ids.SITES_PEAK, "tooltip_data"),
                  Output(ids.SITES_PEAK_INFO, "children"), Input(ids.DEVICE, "value"),
                  State(ids.SNAPSHOT_URL, "pathname"))
    def peak_sites(device, pathname):
        sid = page_sid(pathname)
        if sid is None or device is None:
            return no_update, no_update, no_update
        peak = app_ctx.views.peak_event(sid, device)
        segments, fig, _ = app_ctx.views.state(sid, device, peak)
        n = app_ctx.reader.trace_length(sid, device)
        return *sites_rows(app_ctx.views.top_sites(sid, segments)), peak_info(sid, device, peak, n,
                                                                             fig.allocated_bytes)


def pools_info(pools: list[PoolFigures], segments: list[Segment]) -> str:
    """Private pools and pending frees of the state, for the line above the segment map (empty without them)."""
    out = ""
    if any(p.is_private for p in pools):
        parts = [f"pool ({p.pool[0]}, {p.pool[1]}) {fb(p.reserved_bytes)} with {fb(p.free_bytes)} free"
                 + (" (private: general requests cannot use it)" if p.is_private else " (general)") for p in pools]
        out += " · those figures cover all pools: " + "; ".join(parts)
    pending = pending_frees(segments)
    if pending.blocks:
        out += (f" · {pending.blocks} blocks ({fb(pending.bytes)}) freed, waiting for stream work "
                "(active_pending_free), counted as allocated")
    return out


def _chosen_event(trigger, click, typed, event: int, n: int, timed: bool = False) -> int:
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


def _mark(app_ctx, sid: int, device: int, event: int, mark_mib) -> tuple[int | None, str]:
    if mark_mib:
        return int(float(mark_mib) * 2**20), "size"
    for o in app_ctx.views.doctor(sid):
        if o.get("device") == device and o.get("event") is not None and abs(o["event"] - event) <= 1:
            return o["requested_bytes"], "failed request"
    return None, ""

