"""The what-if page: /whatif/<id>?device=N. The recorded workload of one device, picked on the page, under other
settings and device sizes, simulated in the background (the app's own job runner), drawn from the series the
free-run records, next to the recording's figures; the results name their device.

Code what-ifs (`fragviz simulate --scale/--bucket/--paged-kv`) change the workload before it runs, typed in the
Settings card and read when Simulate is clicked. Below the figure, the "Predict a bigger run" card (predict.py)
predicts the program at another size from this snapshot and others of the same program.

A device whose trace holds no workload gets the reason, and no Simulate button: nothing is drawn that was
not computed. Without a device in the URL the page opens on the device of the first OOM (as the snapshot page
does); only a device picked on the page goes into the URL."""
from __future__ import annotations

import dash
from dash import Input, Output, State, ctx as dash_ctx, dcc, html, no_update

from fragviz.allocator.config import parse_alloc_conf
from fragviz.base.errors import FragvizError, public_message
from fragviz.store.records import Summary
from fragviz.simulate.records import RunFigures
from fragviz.simulate.reshape import CodeChange
from fragviz.simulate.whatif import (GETS_PAST, SIMULATED, UNKNOWN, DeviceWhatIf, refusal_for, simulate_device,
                                    what_if_label)
from fragviz.ui import ids
from fragviz.ui.figures.whatif import overlay_figure
from fragviz.ui.data.code_changes import code_changes
from fragviz.ui.data.whatif_runs import WhatIfRun
from fragviz.ui.context import AppContext
from fragviz.ui.pages.common import (card, error_page, error_panel, fb, header, make_search, opening_device,
                                     path_sid, query_int, sid_of)
from fragviz.ui.pages.whatif import predict
from fragviz.base.units import parse_size

PATH = "/whatif/"  # the page's prefix: /whatif/<id>
MAX_POINTS = 2000


def layout(ctx: AppContext, pathname: str, search: str | None = None) -> html.Div:
    try:
        sid = path_sid(pathname, PATH)
        row = ctx.reader.snapshot_row(sid)
    except FragvizError as exc:
        return error_page(public_message(exc, ctx.reader.records.path))
    device = opening_device(row.devices, row.summary, query_int(search, "device"))
    title = html.H2(["What if… ", dcc.Link(row.name.rsplit("/", 1)[-1], id=ids.WHATIF_SNAPSHOT_LINK,
                                           href=snapshot_href(sid, device))])
    return html.Div([dcc.Location(id=ids.WHATIF_URL, refresh="callback-nav"), header(),
                     html.Main(className="fv-main", children=[
                         title, device_picker(row.devices, device),
                         html.Div(id=ids.WHATIF_BODY, children=body(row.summary, device, _others(ctx, sid)))])])


def snapshot_href(sid: int, device: int) -> str:
    return f"/snapshots/{sid}" + make_search(device=device)


def device_picker(devices: list[int], device: int) -> html.Div:
    options = [{"label": f"cuda:{d}", "value": d} for d in devices] or [{"label": "cuda:0", "value": 0}]
    return html.Div(className="fv-controls", children=[html.Label([
        "device ", dcc.Dropdown(id=ids.WHATIF_DEVICE, options=options, value=device, clearable=False,
                                className="fv-device")])])


def _others(ctx: AppContext, sid: int) -> list[dict]:
    """The prediction card's choice of other recordings: every stored snapshot but this one."""
    return predict.snapshot_options(ctx.reader.list_snapshots(), sid)


def body(summary: Summary, device: int, others: list[dict] | None = None) -> list:
    """What the page shows for `device`: the settings to simulate under and the prediction card (`others`: the
    snapshots it may predict with), or why its trace cannot be simulated."""
    reason = _refusal(summary, device)
    return [_cannot(reason)] if reason else _controls(device, others or [])


def _refusal(summary: Summary, device: int) -> str | None:
    found = summary.device(device)
    if found is None:
        return f"the snapshot holds no device {device}, so there is nothing to simulate"
    return refusal_for(device, found.trace_events, found.allocs)


def _cannot(reason: str) -> html.Section:
    return card("Cannot simulate", html.P(["Cannot simulate this snapshot: ", reason, "."], id=ids.WHATIF_STATUS,
                                          className="fv-cannot"))


# (id, label, placeholder, what it does) of the code what-ifs' boxes, in the order `fragviz simulate` applies them.
# TARGET: a kind of memory (activations, kv_cache, ...) or a site: a frame, file.py:LINE or file.py:function.
CODE_FIELDS = (
    (ids.WHATIF_SCALE, "scale", "e.g. activations=1.5",
     "TARGET=FACTOR, comma-separated: every allocation of TARGET FACTOR times its recorded size"),
    (ids.WHATIF_BUCKET, "bucket", "e.g. activations:8",
     "TARGET:K, comma-separated: each site's sizes padded up to K steps, as padding to K buckets would"),
    (ids.WHATIF_PAGED_KV, "paged KV", "e.g. 2MiB",
     "[TARGET=]SIZE: the KV cache (or TARGET) served from whole pages of SIZE bytes, as vLLM serves it"))


def _code_boxes() -> list[html.Label]:
    return [html.Label([f"{label} ", dcc.Input(id=box, placeholder=hint, className="fv-memory")], title=what)
            for box, label, hint, what in CODE_FIELDS]


def _controls(device: int, others: list[dict]) -> list:
    return [
        html.P("Replays this trace's requests and frees through fragviz's model of the caching allocator, under the "
               "settings below, and sets the result beside the recorded run.", className="fv-sub"),
        card("Settings", html.Div(className="fv-controls", children=[
            html.Label(["PYTORCH_CUDA_ALLOC_CONF ", dcc.Input(id=ids.WHATIF_CONF, value="expandable_segments:True",
                                                              className="fv-conf", debounce=False)]),
            html.Label(["device memory ", dcc.Input(id=ids.WHATIF_MEMORY, placeholder="e.g. 80GiB (blank: as recorded)",
                                                    className="fv-memory")]),
            *_code_boxes(),
            html.Button("Simulate", id=ids.WHATIF_RUN, n_clicks=0, className="fv-primary"),
        ]), html.Div(id=ids.WHATIF_STATUS, className="fv-status", **{"aria-live": "polite"}),
            dcc.Store(id=ids.WHATIF_JOB),
            dcc.Interval(id=ids.WHATIF_POLL, interval=400, disabled=True)),
        card(f"Reserved memory and fragmentation on cuda:{device}: recorded and simulated",
             dcc.Graph(id=ids.WHATIF_FIGURE)),
        predict.predict_card(others),
    ]


def _simulate(ctx: AppContext, sid: int, device: int, conf: str, memory: int | None, run: WhatIfRun,
              changes: tuple[CodeChange, ...] = ()) -> DeviceWhatIf:
    """The work of one run: the device's what-if, its workload changed by `changes`, with the simulated series to
    draw (none when refused)."""
    analysis = ctx.views.analysis(sid)
    label = what_if_label(conf, changes)  # blank settings: "the default settings", as PYTORCH_CUDA_ALLOC_CONF=""
    (result,) = simulate_device(analysis, device, [(label, parse_alloc_conf(conf))], memory,
                                series_points=MAX_POINTS, progress=run.set_progress, changes=changes)
    return result


def _ooms(run: RunFigures, known: bool, until_recording_ends: bool = False) -> str:
    """`until_recording_ends`: the recording ends at its failure, so "no OOM" holds only that far."""
    if run.ooms:
        return f"{len(run.ooms)} OOM(s), the first at event {run.ooms[0].event}"
    if not known:
        return "not simulated (device size unknown)"
    return "no OOM up to the end of the recording" if until_recording_ends else "no OOM"


def _result_panel(d: DeviceWhatIf) -> html.Div:
    """The recording and the simulations side by side, then what the simulation can claim."""
    if d.status != SIMULATED:
        return html.Div([f"Cannot simulate cuda:{d.device}: ", d.reason, "."], className="fv-cannot")
    known = d.memory.bytes is not None
    past = d.outcome == GETS_PAST
    rows = [("recorded", d.recorded, True, False), ("simulated, recorded settings", d.baseline, known, past),
            (f"simulated, {d.label}", d.given, known, past)]
    table = html.Table(className="fv-whatif-table", children=[
        html.Thead(html.Tr([html.Th(h) for h in ("run", "peak reserved", "peak requested", "OOMs")])),
        html.Tbody([html.Tr([html.Td(name), html.Td(fb(r.peak_reserved_bytes)), html.Td(fb(r.peak_requested_bytes)),
                             html.Td(_ooms(r, k, p))]) for name, r, k, p in rows])])
    memory = (f"Device size {fb(d.memory.bytes)} ({d.memory.source})." if known else
              "Device size unknown: give one above to ask about OOMs.")
    claim = html.P([html.Strong("Cannot tell: " if d.outcome == UNKNOWN else "Result: "), d.claim, "."],
                   className="fv-claim")
    notes = [html.P(["Note: ", n], className="fv-note") for n in d.start.notes]
    where = html.P(f"On cuda:{d.device}: its recorded run, and its workload simulated.",
                   className="fv-whatif-device")
    return html.Div([where, html.P(memory), table, claim, *notes])


def _page_sid(pathname: str | None) -> int | None:
    """The snapshot id of a what-if page's path; None off one (the page's own Location hears a jump away)."""
    return sid_of(pathname) if (pathname or "").startswith(PATH) else None


_UNCHANGED = (no_update, no_update, no_update, no_update)


def chosen_device(ctx: AppContext, picked: int | None, chose: bool, search: str | None, pathname: str | None) -> tuple:
    """The body, the URL's query, the picker and the title's link for the device picked on the page (`chose`) or
    named by the URL (Back, Forward)."""
    sid = _page_sid(pathname)
    if sid is None:
        return _UNCHANGED
    row = ctx.reader.snapshot_row(sid)
    from_url = opening_device(row.devices, row.summary, query_int(search, "device"))
    if not chose and from_url == picked:
        # the page's Location telling the URL it opened on, or a Back to the device shown: the body stays, and
        # with it what was typed into the settings before this answer came
        return _UNCHANGED
    device = picked if chose else from_url
    new_search = make_search(device=device)
    return (body(row.summary, device, _others(ctx, sid)), new_search if chose and new_search != search else no_update,
            no_update if device == picked else device, snapshot_href(sid, device))


def started(ctx: AppContext, conf: str | None, memory: str | None, device: int, pathname: str | None,
            code: tuple[str | None, ...] = (None, None, None)) -> tuple:
    """A simulation started in the background: its run id, the poll switched on, and a progress bar; or why not.
    `code`: the scale, bucket and paged-KV boxes as typed (code what-ifs)."""
    try:
        parse_alloc_conf(conf or "")
        capacity = parse_size(memory) if memory else None
        changes = code_changes(*code)
        sid = sid_of(pathname)
        run_id = ctx.whatif_runs.start(lambda run: _simulate(ctx, sid, device, conf or "", capacity, run, changes),
                                       "whatif")
    except FragvizError as exc:
        return no_update, True, error_panel(public_message(exc, ctx.reader.records.path))
    return run_id, False, html.Div([html.Progress(value="0", max="100"), f" simulating cuda:{device}…"])


def polled(ctx: AppContext, run_id: str | None, pathname: str | None) -> tuple:
    """The status, the figure and whether to poll on, for the run's progress or its result."""
    run = ctx.whatif_runs.read(run_id or "")
    if run is None:
        return no_update, no_update, True
    if not run.done:
        pct = int(100 * run.progress)
        return html.Div([html.Progress(value=str(pct), max="100"), f" simulating… {pct}%"]), no_update, False
    if run.error:
        return error_panel(run.error), no_update, True
    result: DeviceWhatIf = run.result
    if result.series is None:
        return _result_panel(result), no_update, True
    # the device the run simulated, whatever the picker says now
    recorded = ctx.reader.timeline(sid_of(pathname), result.device, max_points=MAX_POINTS)
    ooms = [o.event for o in result.recorded.ooms]
    return _result_panel(result), overlay_figure(recorded, result.series, result.label, ooms), True


def register(app: dash.Dash, ctx: AppContext) -> None:
    @app.callback(Output(ids.WHATIF_BODY, "children"), Output(ids.WHATIF_URL, "search"),
                  Output(ids.WHATIF_DEVICE, "value"), Output(ids.WHATIF_SNAPSHOT_LINK, "href"),
                  Input(ids.WHATIF_DEVICE, "value"), Input(ids.WHATIF_URL, "search"),
                  State(ids.WHATIF_URL, "pathname"), prevent_initial_call=True)
    def choose_device(picked, search, pathname):
        # A device picked on the page goes into the URL (a history entry); a URL reached by Back or Forward
        # moves the picker. The URL is never rewritten otherwise (see the snapshot page).
        chose = dash_ctx.triggered_id == ids.WHATIF_DEVICE and picked is not None
        return chosen_device(ctx, picked, chose, search, pathname)

    @app.callback(Output(ids.WHATIF_JOB, "data"), Output(ids.WHATIF_POLL, "disabled"),
                  Output(ids.WHATIF_STATUS, "children"),
                  Input(ids.WHATIF_RUN, "n_clicks"), State(ids.WHATIF_CONF, "value"), State(ids.WHATIF_MEMORY, "value"),
                  State(ids.WHATIF_DEVICE, "value"), State(ids.URL, "pathname"),
                  *(State(field[0], "value") for field in CODE_FIELDS), prevent_initial_call=True)
    def run(_, conf, memory, device, pathname, *code):
        return started(ctx, conf, memory, device, pathname, code)

    @app.callback(Output(ids.WHATIF_STATUS, "children", allow_duplicate=True), Output(ids.WHATIF_FIGURE, "figure"),
                  Output(ids.WHATIF_POLL, "disabled", allow_duplicate=True),
                  Input(ids.WHATIF_POLL, "n_intervals"), State(ids.WHATIF_JOB, "data"),
                  State(ids.URL, "pathname"), prevent_initial_call=True)
    def poll(_, run_id, pathname):
        return polled(ctx, run_id, pathname)

    predict.register(app, ctx)
