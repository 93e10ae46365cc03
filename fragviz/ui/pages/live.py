"""The live page (/live): running jobs' memory, refreshed every second by appending to the charts.

Attach by host:port (the server starts the poller itself), or pick an attachment already recorded into
this store (also by `fragviz attach`). One panel per attachment and device: the chart of allocated,
requested, reserved, NVML used (the band above reserved is memory outside PyTorch), largest free gap and
fragmentation with OOM markers; the latest segment map and free-gap histogram; a button that saves a
full snapshot; an alert with the doctor's verdict when the job runs out of memory.
"""
from __future__ import annotations

import time
from typing import Any

import dash
from dash import ALL, MATCH, Input, Output, Patch, State, ctx as dash_ctx, dcc, html, no_update

from fragviz.base.errors import FragvizError
from fragviz.ui import ids
from fragviz.ui.context import AppContext
from fragviz.ui.figures.gaps import gap_histogram_figure
from fragviz.ui.figures.live import live_figure, live_points, thin
from fragviz.ui.figures.segments import segment_map_figure
from fragviz.ui.pages.common import card, error_panel, fb, header

PATH = "/live"
MAX_INITIAL_POINTS = 3000
TITLES = {"exhaustion": "true exhaustion", "fragmentation": "fragmentation", "outside_pytorch":
          "memory outside PyTorch", "capacity_cap": "a capacity cap"}


def layout(ctx: AppContext, pathname: str, search: str | None = None) -> html.Div:
    options = _options(ctx)
    # the jobs recording now; when none is, the one that ended last (a reload after a job died shows its last
    # state and its OOM, never an empty page)
    chosen = [o["value"] for o in options if not o.get("ended")] or [o["value"] for o in options][:1]
    return html.Div([header(), html.Main(className="fv-main", children=[
        html.H2("Live"),
        html.P(["Watch a running job: start it with ", html.Code("fragviz run -- python train.py"),
                " (its agent serves on port 9400, or 9400 + LOCAL_RANK under torchrun), then attach to it here. "
                "Every poll is recorded into this store."], className="fv-sub"),
        card("Attach", html.Div(className="fv-controls", children=[
            html.Label(["job ", dcc.Input(id=ids.LIVE_TARGET, placeholder="127.0.0.1:9400", className="fv-pick",
                                          debounce=False)]),
            html.Label(["token ", dcc.Input(id=ids.LIVE_TOKEN, type="password", placeholder="if the agent has one",
                                            className="fv-memory")]),
            html.Button("Attach", id=ids.LIVE_ATTACH, n_clicks=0, className="fv-primary"),
        ]), html.Div(id=ids.LIVE_STATUS, className="fv-status", **{"aria-live": "polite"}),
            html.Div(className="fv-controls", children=[html.Span("jobs: ", className="fv-hint"), dcc.Checklist(
                id=ids.LIVE_ATTACHMENTS, options=_checklist(options), value=chosen, inline=True,
                className="fv-attachments")])),
        html.Div(id=ids.LIVE_PANELS, className="fv-live-grid"),
        dcc.Store(id=ids.LIVE_CURSOR, data={}),
        dcc.Store(id=ids.LIVE_DEVICES, data=devices_of(ctx, chosen)),
        dcc.Interval(id=ids.LIVE_INTERVAL, interval=1000),
    ])])


def _options(ctx: AppContext) -> list[dict[str, Any]]:
    """Attachments live now, then the 10 most recent others."""
    now = time.time()
    rows = ctx.reader.live.attachments()
    live = [a for a in rows if a.is_live(now)]
    ended = [a for a in rows if not a.is_live(now)][:10]
    return ([{"value": a.id, "label": a.label} for a in live]
            + [{"value": a.id, "label": a.label + " (ended)", "ended": True} for a in ended])


def _checklist(options: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"value": o["value"], "label": o["label"]} for o in options]


def _panel_key(aid: int, device: int) -> str:
    return f"{aid}-{device}"


def _panel(ctx: AppContext, aid: int, device: int) -> tuple[html.Section, dict[str, Any]]:
    live = ctx.reader.live
    att = live.attachment(aid)
    samples = live.samples(aid, device=device)
    ooms = live.events(aid, kind="oom")
    nvml = any(v is not None for v in samples["nvml_used"])
    fig = live_figure(thin(samples, MAX_INITIAL_POINTS), [e.t for e in ooms], att.simulated, nvml)
    key = _panel_key(aid, device)
    badge = (html.Span("simulated device: a CPU run mirrored into fragviz's allocator model; no NVML",
                       className="fv-badge fv-simulated") if att.simulated else
             html.Span("CUDA" + (" + NVML" if nvml else " (NVML not available)"), className="fv-badge"))
    events = live.events(aid)
    cursor = {"sample": samples["id"][-1] if samples["id"] else 0, "event": events[-1].id if events else 0,
              "state": None, "aid": aid, "device": device, "last": _last(samples)}
    section = html.Section(className="fv-card fv-live-panel", children=[
        html.H3([f"{att.label} · device {device} ", badge]),
        html.Div(_figures_line(_last(samples)), id={"type": ids.LIVE_NOW, "index": key}, className="fv-live-now"),
        html.Div(_alerts(ctx, ooms), id={"type": ids.LIVE_OOM_ALERT, "index": key}),
        dcc.Graph(id={"type": ids.LIVE_CHART, "index": key}, figure=fig, config={"displaylogo": False}),
        html.Div(className="fv-controls", children=[
            html.Button("Save snapshot with trace", id={"type": ids.LIVE_SAVE, "index": key}, n_clicks=0),
            html.Span(id={"type": ids.LIVE_SAVE_RESULT, "index": key})]),
        html.Div(className="fv-row", children=[
            html.Div(dcc.Graph(id={"type": ids.LIVE_SEGMENT_MAP, "index": key}, config={"displaylogo": False}),
                     className="fv-card fv-scroll"),
            html.Div(dcc.Graph(id={"type": ids.LIVE_GAP_HISTOGRAM, "index": key}, config={"displaylogo": False}),
                     className="fv-card")]),
    ])
    return section, cursor


STALE_AFTER = 5.0  # seconds without a sample after which a panel says its figures are old


def _last(samples: dict[str, list]) -> dict[str, Any] | None:
    """The newest sample of these columns, as one row (None when there is none)."""
    return {k: v[-1] for k, v in samples.items()} if samples["t"] else None


def _figures_line(s: dict[str, Any] | None, now: float | None = None) -> Any:
    """The newest figures; once no sample has come for STALE_AFTER seconds, first and in its own colour, how
    long it has been (counting on at every tick), and the figures greyed as the last ones known."""
    if s is None:
        return "waiting for the first sample…"
    parts = [f"reserved {fb(s['reserved'])}", f"allocated {fb(s['allocated'])}", f"requested {fb(s['requested'])}",
             f"fragmentation {100 * s['fragmentation']:.1f}% (non-releasable {fb(s['non_releasable'])})",
             f"largest request the cache can serve {fb(s['largest_free'])}"]
    if s["nvml_used"] is not None:
        parts.append(f"NVML used {fb(s['nvml_used'])} (outside PyTorch {fb(max(0, s['nvml_used'] - s['reserved']))})")
    if s["device_total"]:
        parts.append(f"device {fb(s['device_total'])}")
    age = (time.time() if now is None else now) - s["t"]
    if age <= STALE_AFTER:
        return " · ".join(parts)
    return [html.Strong(f"no sample for {age:.0f} s: the job ended or cannot be reached", className="fv-stale-age"),
            html.Span(" · last known: " + " · ".join(parts), className="fv-stale")]


def _alerts(ctx: AppContext, ooms: list) -> list:
    out = []
    for e in ooms[-3:]:
        verdict = _verdict(ctx, e.snapshot_id)
        when = time.strftime("%H:%M:%S", time.localtime(e.t))
        link = dcc.Link(f"open the OOM snapshot ({e.snapshot_id})", href=f"/snapshots/{e.snapshot_id}") \
            if e.snapshot_id else "the OOM snapshot could not be read"
        out.append(html.Div(className="fv-error fv-live-oom", role="alert", children=[
            html.Strong(f"Out of memory at {when}: "), verdict, " ", link]))
    return out


def _verdict(ctx: AppContext, sid: int | None) -> str:
    if sid is None:
        return ""
    try:
        ooms = ctx.views.doctor(sid)
    except FragvizError as exc:
        return f"(no verdict: {exc})"
    if not ooms:
        return "(the snapshot holds no OOM entry to diagnose)"
    o = ooms[-1]
    return (f"{TITLES.get(o.verdict, o.verdict)} — {o.advice[0]}" if o.advice else TITLES.get(o.verdict, o.verdict))


def _state_figures(ctx: AppContext, aid: int, device: int, seen: float | None):
    """The segment map and gap histogram when the recorded segments changed since `seen`, else no_update."""
    live = ctx.reader.live
    if live.state_time(aid, device) in (None, seen):
        return no_update, no_update, seen
    t, segments = live.latest_state(aid, device)
    gaps = [b.size for s in segments for b in s.blocks if b.state.value == "inactive"]
    seg_map = segment_map_figure(segments, lambda _stack: "")
    seg_map.update_layout(title=dict(text=f"segments at {time.strftime('%H:%M:%S', time.localtime(t))}",
                                     font=dict(size=13)))
    histogram = gap_histogram_figure(gaps, None, max(gaps, default=0))
    # half a 1280 px page: a title that fits it (the snapshot page's long one is cut there)
    histogram.update_layout(title=dict(text=f"free gaps · largest {fb(max(gaps, default=0))}", font=dict(size=13)))
    return seg_map, histogram, t


def attached(ctx: AppContext, target: str | None, token: str | None, chosen: list | None) -> tuple:
    """The status line, the jobs to choose from and those chosen, once the server attaches to `target`."""
    if not (target or "").strip():
        return error_panel("enter the job's host:port, for example 127.0.0.1:9400"), no_update, no_update
    try:
        aid = ctx.live.attach(target, token or None)
    except FragvizError as exc:
        return error_panel(str(exc)), no_update, no_update
    chosen = [c for c in (chosen or []) if c != aid] + [aid]
    return f"attached to {target.strip()}: recording as attachment {aid}", _checklist(_options(ctx)), chosen


def panels_of(ctx: AppContext, chosen: list | None) -> tuple:
    """A panel per chosen attachment and device, and each panel's cursor (what its chart has drawn so far)."""
    sections, cursors = [], {}
    for aid in chosen or []:
        if ctx.reader.live.attachment(aid) is None:
            continue
        devices = ctx.reader.live.devices(aid)
        if not devices:
            sections.append(_waiting_panel(ctx, aid))
        for device in devices:
            section, cursor = _panel(ctx, aid, device)
            sections.append(section)
            cursors[_panel_key(aid, device)] = cursor
    if not sections:
        return html.P("No job chosen: attach to one above.", className="fv-hint"), {}
    return sections, cursors


def devices_of(ctx: AppContext, chosen: list | None) -> dict[str, list[int]]:
    """The devices recorded so far of each chosen attachment (a job shows its device once it imports torch)."""
    return {str(aid): list(ctx.reader.live.devices(aid)) for aid in chosen or []}


def _waiting_panel(ctx: AppContext, aid: int) -> html.Section:
    """A job whose agent answers but that has no device yet: it has not imported torch (or not used CUDA)."""
    att = ctx.reader.live.attachment(aid)
    return html.Section(className="fv-card fv-live-panel fv-live-waiting", children=[
        html.H3(att.label),
        html.P("The agent answers, and no device is in use yet: the job has not imported torch, or has not "
               "touched its GPU. Its device appears here as soon as it does.", className="fv-hint")])


def ticked(ctx: AppContext, cursors: dict | None, chart_ids: list[dict]) -> tuple:
    """What one tick sends to every panel (new points, figures, alerts), and the cursors it moved."""
    out: list[list] = [[], [], [], [], []]
    # Only the cursors moved here are patched: `panels` may have added a panel's cursor while this tick was
    # under way, and writing the whole dict back would drop it (that panel's chart would never grow).
    moved = Patch()
    for cid in chart_ids:
        key = cid["index"]
        cursor = dict((cursors or {}).get(key) or {})
        if not cursor:
            for column in out:
                column.append(no_update)
            continue
        for column, value in zip(out, _advance(ctx, cursor)):
            column.append(value)
        moved[key] = cursor
    return (*out, moved)


def saved(ctx: AppContext, panel: str) -> Any:
    """A full snapshot of the panel's job saved into the store: a link to it, or why not."""
    aid = int(str(panel).split("-")[0])
    try:
        sid = ctx.live.save_snapshot(aid)
    except (FragvizError, OSError) as exc:
        return error_panel(str(exc))
    if sid is None:
        return error_panel("the snapshot could not be read (see the job's events)")
    return dcc.Link(f"saved as snapshot {sid}: open it", href=f"/snapshots/{sid}")


def register(app: dash.Dash, ctx: AppContext) -> None:
    @app.callback(Output(ids.LIVE_STATUS, "children"), Output(ids.LIVE_ATTACHMENTS, "options"),
                  Output(ids.LIVE_ATTACHMENTS, "value"), Input(ids.LIVE_ATTACH, "n_clicks"),
                  State(ids.LIVE_TARGET, "value"), State(ids.LIVE_TOKEN, "value"), State(ids.LIVE_ATTACHMENTS, "value"),
                  prevent_initial_call=True)
    def attach(_, target, token, chosen):
        return attached(ctx, target, token, chosen)

    @app.callback(Output(ids.LIVE_ATTACHMENTS, "options", allow_duplicate=True),
                  Output(ids.LIVE_DEVICES, "data"), Input(ids.LIVE_INTERVAL, "n_intervals"),
                  State(ids.LIVE_ATTACHMENTS, "options"), State(ids.LIVE_ATTACHMENTS, "value"),
                  State(ids.LIVE_DEVICES, "data"), prevent_initial_call=True)
    def refresh_jobs(_, current, chosen, devices):
        options = _checklist(_options(ctx))
        now = devices_of(ctx, chosen)
        return no_update if options == current else options, no_update if now == devices else now

    @app.callback(Output(ids.LIVE_PANELS, "children"), Output(ids.LIVE_CURSOR, "data"),
                  Input(ids.LIVE_ATTACHMENTS, "value"), Input(ids.LIVE_DEVICES, "data"))
    def panels(chosen, _devices):
        return panels_of(ctx, chosen)

    @app.callback(Output({"type": ids.LIVE_CHART, "index": ALL}, "figure"),
                  Output({"type": ids.LIVE_NOW, "index": ALL}, "children"),
                  Output({"type": ids.LIVE_OOM_ALERT, "index": ALL}, "children"),
                  Output({"type": ids.LIVE_SEGMENT_MAP, "index": ALL}, "figure"),
                  Output({"type": ids.LIVE_GAP_HISTOGRAM, "index": ALL}, "figure"),
                  Output(ids.LIVE_CURSOR, "data", allow_duplicate=True),
                  Input(ids.LIVE_INTERVAL, "n_intervals"), State(ids.LIVE_CURSOR, "data"),
                  State({"type": ids.LIVE_CHART, "index": ALL}, "id"), prevent_initial_call=True)
    def tick(_, cursors, chart_ids):
        return ticked(ctx, cursors, chart_ids)

    @app.callback(Output({"type": ids.LIVE_SAVE_RESULT, "index": MATCH}, "children"),
                  Input({"type": ids.LIVE_SAVE, "index": MATCH}, "n_clicks"), prevent_initial_call=True)
    def save(_):
        return saved(ctx, dash_ctx.triggered_id["index"])


def _advance(ctx: AppContext, cursor: dict[str, Any]) -> tuple:
    """What one tick sends for one panel; moves `cursor` past what it sent."""
    live = ctx.reader.live
    aid, device = cursor["aid"], cursor["device"]
    new = live.samples(aid, cursor["sample"], device=device)
    events = live.events(aid, cursor["event"])
    new_ooms = [e for e in events if e.kind == "oom"]
    if events:
        cursor["event"] = events[-1].id
    patch: Any = no_update
    if new["t"] or new_ooms:
        patch = Patch()
        for k, (xs, ys) in enumerate(live_points(new, [e.t for e in new_ooms])):
            if xs:
                patch["data"][k]["x"].extend(xs)
                patch["data"][k]["y"].extend(ys)
    if new["t"]:
        cursor["sample"] = new["id"][-1]
        cursor["last"] = _last(new)
    now_line = _figures_line(cursor.get("last"))  # every tick: the age of the last sample keeps counting
    alerts = _alerts(ctx, live.events(aid, kind="oom")) if new_ooms else no_update
    seg_map, histogram, cursor["state"] = _state_figures(ctx, aid, device, cursor.get("state"))
    return patch, now_line, alerts, seg_map, histogram

