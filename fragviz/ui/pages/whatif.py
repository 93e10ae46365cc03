"""The what-if page: the recorded workload under other settings and device sizes, simulated in the background."""
from __future__ import annotations

import threading
import uuid
from typing import Any

import numpy as np
from dash import Input, Output, State, dcc, html, no_update

from fragviz.allocator.config import parse_alloc_conf
from fragviz.allocator.state import snapshot_dict
from fragviz.analysis import analyze
from fragviz.errors import FragvizError
from fragviz.lod import per_event, summarise
from fragviz.model import Snapshot
from fragviz.simulate import recorded_capacity, run_free
from fragviz.units import parse_size
from fragviz.snapshot.loader import RawSnapshot
from fragviz.snapshot.parse import parse_snapshot
from fragviz.ui import figures, ids
from fragviz.ui.pages.common import card, error_panel, fb, header, query_int
from fragviz.ui.pages.snapshot import sid_of

MAX_POINTS = 2000
_JOBS: dict[str, dict[str, Any]] = {}
_LOCK = threading.Lock()


def layout(app_ctx, pathname: str, search: str | None) -> html.Div:
    sid = sid_of(pathname)
    try:
        row = app_ctx.reader.snapshot_row(sid)
    except FragvizError as exc:
        return html.Div([header(), html.Main(className="fv-main", children=[error_panel(str(exc))])])
    device = query_int(search, "device")
    device = device if device in row.devices else (row.devices[0] if row.devices else 0)
    return html.Div([header(), html.Main(className="fv-main", children=[
        html.H2(["What if… ", dcc.Link(row.name.rsplit("/", 1)[-1], href=f"/snapshots/{sid}?device={device}")]),
        html.P("Replays this trace's requests and frees through fragviz's model of the caching allocator, under the "
               "settings below, and draws the result over the recorded run.", className="fv-sub"),
        card("Settings", html.Div(className="fv-controls", children=[
            html.Label(["PYTORCH_CUDA_ALLOC_CONF ", dcc.Input(id=ids.WHATIF_CONF, value="expandable_segments:True",
                                                              className="fv-conf", debounce=False)]),
            html.Label(["device memory ", dcc.Input(id=ids.WHATIF_MEMORY, placeholder="e.g. 80GiB (blank: as recorded)",
                                                    className="fv-memory")]),
            html.Button("Simulate", id=ids.WHATIF_RUN, n_clicks=0, className="fv-primary"),
        ]), html.Div(id=ids.WHATIF_STATUS, className="fv-status", **{"aria-live": "polite"}),
            dcc.Store(id="whatif-job"), dcc.Store(id="whatif-device", data=device),
            dcc.Interval(id=ids.WHATIF_POLL, interval=400, disabled=True)),
        card("Reserved memory and fragmentation: recorded and simulated", dcc.Graph(id=ids.WHATIF_FIGURE)),
    ])])


def _recorded_curve(app_ctx, sid: int, device: int) -> dict[str, Any]:
    return app_ctx.reader.timeline(sid, device, max_points=MAX_POINTS)


def _simulated_curve(analysis, device: int, conf: str, memory: int | None, job: dict) -> tuple[dict, dict]:
    settings = parse_alloc_conf(conf)
    capacity = memory if memory is not None else recorded_capacity(analysis, device)
    n = len(analysis.replays[device].trace)

    def progress(done: int, total: int) -> None:
        job["progress"] = 0.9 * done / max(1, total)

    result = run_free(analysis, device, settings, capacity, record=True, progress=progress)
    snap = analysis.snapshot
    data = snapshot_dict([result.allocator], snap.frames, snap.stacks, {"origin": "simulated", "alloc_conf": conf})
    events = np.array([e["event"] for e in result.allocator.trace], np.int64)
    sim = analyze(_parse(data))
    fig = per_event(sim.replays[device].series) if device in sim.replays else None
    job["progress"] = 0.97
    curve = None
    if fig is not None and len(events):
        bucket = max(1, len(events) // MAX_POINTS)
        curve = summarise({k: fig[k] for k in ("reserved", "fragmentation")}, bucket)
        x = np.concatenate([[0], events + 1])
        curve["start"] = x[np.minimum(curve["start"], len(x) - 1)]
    summary = result.summary()
    summary["events"] = n
    return curve, summary


def _parse(data: dict) -> Snapshot:
    return parse_snapshot(RawSnapshot("simulated", data, "pickle", None, 4, "", 0))


def _start(app_ctx, sid: int, device: int, conf: str, memory: int | None) -> str:
    job_id = uuid.uuid4().hex
    job: dict[str, Any] = {"progress": 0.0, "done": False, "error": None, "result": None}
    with _LOCK:
        _JOBS[job_id] = job

    def work() -> None:
        try:
            analysis = app_ctx.views.analysis(sid)
            curve, summary = _simulated_curve(analysis, device, conf, memory, job)
            job["result"] = (curve, summary)
        except FragvizError as exc:
            job["error"] = str(exc)
        except Exception as exc:  # shown as a message, never a traceback
            job["error"] = f"the simulation failed ({type(exc).__name__}: {exc})"
        finally:
            job["done"] = True

    threading.Thread(target=work, daemon=True, name=f"whatif-{job_id[:8]}").start()
    return job_id


def _summary_text(summary: dict[str, Any], conf: str) -> html.Div:
    cap = summary["settings"].get("device_memory_bytes")
    ooms = summary["ooms"]
    verdict = f"{len(ooms)} OOM(s), the first at event {ooms[0]['event']}" if ooms else "no OOM"
    return html.Div([html.Strong(f"{conf}: "), f"peak reserved {fb(summary['peak_reserved_bytes'])}"
                     + (f" of {fb(cap)}" if cap else "") + f", peak allocated {fb(summary['peak_allocated_bytes'])}, "
                     f"final fragmentation {summary['final_fragmentation']:.1%}: {verdict}."])


def register(app, app_ctx) -> None:
    @app.callback(Output("whatif-job", "data"), Output(ids.WHATIF_POLL, "disabled"), Output(ids.WHATIF_STATUS, "children"),
                  Input(ids.WHATIF_RUN, "n_clicks"), State(ids.WHATIF_CONF, "value"), State(ids.WHATIF_MEMORY, "value"),
                  State("whatif-device", "data"), State(ids.URL, "pathname"), prevent_initial_call=True)
    def run(_, conf, memory, device, pathname):
        try:
            parse_alloc_conf(conf or "")
            capacity = parse_size(memory) if memory else None
        except FragvizError as exc:
            return no_update, True, error_panel(str(exc))
        job = _start(app_ctx, sid_of(pathname), device, conf or "", capacity)
        return job, False, html.Div([html.Progress(value="0", max="100"), " simulating…"])

    @app.callback(Output(ids.WHATIF_STATUS, "children", allow_duplicate=True), Output(ids.WHATIF_FIGURE, "figure"),
                  Output(ids.WHATIF_POLL, "disabled", allow_duplicate=True),
                  Input(ids.WHATIF_POLL, "n_intervals"), State("whatif-job", "data"), State(ids.WHATIF_CONF, "value"),
                  State("whatif-device", "data"), State(ids.URL, "pathname"), prevent_initial_call=True)
    def poll(_, job_id, conf, device, pathname):
        job = _JOBS.get(job_id or "")
        if job is None:
            return no_update, no_update, True
        if not job["done"]:
            pct = int(100 * job["progress"])
            return html.Div([html.Progress(value=str(pct), max="100"), f" simulating… {pct}%"]), no_update, False
        with _LOCK:
            _JOBS.pop(job_id, None)
        if job["error"]:
            return error_panel(job["error"]), no_update, True
        curve, summary = job["result"]
        recorded = _recorded_curve(app_ctx, sid_of(pathname), device)
        return _summary_text(summary, conf), figures.overlay_figure(recorded, curve, conf), True
