"""The what-if page's "Predict a bigger run" card: `fragviz predict` on stored snapshots. This snapshot is one
recording of a program; the user picks one or two others of the same program at other sizes of one knob, gives
each one's size and the size to predict, and the program at that size is free-run through the allocator model in
the background (the app's run pool, as a what-if), under the Settings card's PYTORCH_CUDA_ALLOC_CONF (blank: as
recorded) on a device of its device memory (blank: no OOM answer). A refusal says why, never a made-up figure; the
command line that makes the same prediction stands under the result."""
from __future__ import annotations

from typing import Sequence

import dash
from dash import Input, Output, State, dcc, html, no_update

from fragviz.base.errors import FragvizError, public_message
from fragviz.base.units import format_bytes as fb
from fragviz.predict import Prediction, PredictedRun
from fragviz.predict.runs import as_number, settings_text
from fragviz.predict.text import fits_sentence
from fragviz.store.reader import SnapshotRow
from fragviz.ui import ids
from fragviz.ui.context import AppContext
from fragviz.ui.data.predict import PredictionShown, predict_command, predict_request, run_prediction
from fragviz.ui.figures.predict import prediction_figure
from fragviz.ui.pages.common import card, error_panel, sid_of

SITES_SHOWN = 15
INTRO = ("This snapshot is one recording of a program. Pick one or two recordings of the same program at other sizes "
         "of one knob (batch size, sequence length), give each one's size, this snapshot's first, and the size to "
         "predict: each allocation's size is fitted as a law of the knob, and the program at that size is run "
         "through fragviz's model of the caching allocator under the settings above (blank: the recorded settings) "
         "on a device of the device memory above (blank: whether it runs out of memory is not asked).")
CAPTION = "It runs against this dashboard's store: add --db STORE where that is not your default."


def snapshot_options(rows: Sequence[SnapshotRow], sid: int) -> list[dict]:
    """The stored snapshots other than `sid`, as the dropdown lists them."""
    return [{"label": f"{r.id}: {r.name.rsplit('/', 1)[-1]}", "value": r.id} for r in rows if r.id != sid]


def predict_card(options: list[dict]) -> html.Section:
    return card("Predict a bigger run", html.P(INTRO, className="fv-sub"), html.Div(className="fv-controls", children=[
        html.Label(["with ", dcc.Dropdown(id=ids.WHATIF_PREDICT_WITH, options=options, multi=True,
                                          placeholder="other recordings", className="fv-pick")]),
        html.Label(["sizes ", dcc.Input(id=ids.WHATIF_PREDICT_SIZES, placeholder="e.g. 8 16 (this one's first)",
                                        className="fv-memory")]),
        html.Label(["knob ", dcc.Input(id=ids.WHATIF_PREDICT_KNOB, value="batch", className="fv-memory")]),
        html.Label(["predict at ", dcc.Input(id=ids.WHATIF_PREDICT_TO, placeholder="e.g. 32", className="fv-memory")]),
        html.Button("Predict", id=ids.WHATIF_PREDICT_RUN, n_clicks=0, className="fv-primary"),
    ]), html.Div(id=ids.WHATIF_PREDICT_RESULT, className="fv-status", **{"aria-live": "polite"}),
        dcc.Store(id=ids.WHATIF_PREDICT_JOB), dcc.Interval(id=ids.WHATIF_PREDICT_POLL, interval=400, disabled=True),
        class_name="fv-predict")


def _fits(run: PredictedRun) -> str:
    if run.device_memory_bytes is None:
        return "not asked: the device size was not given (give a device memory above)"
    return fits_sentence(run)


def _span(bounds: tuple[int, int] | None) -> str:
    if bounds is None:
        return "not worked out"
    return fb(bounds[0]) if bounds[0] == bounds[1] else f"{fb(bounds[0])} to {fb(bounds[1])}"


def _figures_table(run: PredictedRun) -> html.Table:
    limit = " (without the device's limit)" if run.oom is not None else ""
    rows = (("peak requested", fb(run.peak_requested_bytes)),
            (f"peak requested, range{limit}", _span(run.peak_requested_range)),
            ("peak allocated", fb(run.peak_allocated_bytes)), ("peak reserved", fb(run.peak_reserved_bytes)),
            (f"peak reserved, range{limit}", _span(run.peak_reserved_range)),
            ("fragmentation at the peak", f"{run.fragmentation:.1%}"), ("fits the device?", _fits(run)))
    return html.Table(className="fv-whatif-table fv-predict-figures",
                      children=html.Tbody([html.Tr([html.Th(name), html.Td(value)]) for name, value in rows]))


def _warnings(p: Prediction) -> html.Div | None:
    """What to know before trusting the figures (fragviz.predict.doubt), or nothing where nothing is in doubt."""
    if not p.warnings:
        return None
    return html.Div(id=ids.WHATIF_PREDICT_WARNINGS, className="fv-note", role="note", children=[
        html.Strong("How sure: "), html.Ul([html.Li(w) for w in p.warnings])])


def _matched(p: Prediction) -> html.P:
    laws = ", ".join(f"{n} {law}" for law, n in p.law_counts.items() if n)
    u = p.unmatched
    unmatched = ("every allocation matched between the recordings" if not u.allocations else
                 f"unmatched: {u.allocations} allocations, {fb(u.bytes)} ({u.share:.1%} of the recorded bytes), "
                 "kept at their recorded size")
    return html.P(f"Matched {p.matched_allocations} of {p.template_allocations} allocations (laws: {laws}); "
                  f"{unmatched}.", className="fv-predict-matched")


def _laws_table(p: Prediction) -> html.Table:
    head = ["site", "law", *(f"{p.knob} {as_number(k)}" for k in p.knobs), f"{p.knob} {as_number(p.target)}"]
    rows = [html.Tr([html.Td(s.site), html.Td(s.law), *(html.Td(fb(b)) for b in s.recorded_bytes),
                     html.Td(fb(s.predicted_bytes))]) for s in p.sites[:SITES_SHOWN]]
    return html.Table(id=ids.WHATIF_PREDICT_LAWS, className="fv-table fv-predict-laws",
                      children=[html.Thead(html.Tr([html.Th(h) for h in head])), html.Tbody(rows)])


def _command(command: str) -> html.Div:
    return html.Div([html.P(["The same prediction on the command line: ",
                             html.Code(command, id=ids.WHATIF_PREDICT_COMMAND, className="fv-gate-command")]),
                     html.P(CAPTION, className="fv-hint")])


def prediction_panel(shown: PredictionShown, command: str) -> html.Div:
    """The predicted figures, what they rest on, the sites' laws and the figure; the command line under them."""
    p, run = shown.prediction, shown.prediction.runs[0]
    at = ", ".join(str(as_number(k)) for k in p.knobs)
    where = html.P(f"Predicted at {p.knob} {as_number(p.target)} from the recordings at {p.knob} {at}, on "
                   f"cuda:{p.device}, under {settings_text(run.alloc_conf)}.", className="fv-predict-where")
    return html.Div([where, _figures_table(run), _warnings(p), _matched(p),
                     html.H4(f"Sites by predicted bytes (allocated over the run), the top {SITES_SHOWN}"),
                     _laws_table(p), dcc.Graph(id=ids.WHATIF_PREDICT_FIGURE, figure=prediction_figure(p.knob,
                                                                                                      shown.points)),
                     _command(command)])


def refused_panel(reason: str, command: str) -> html.Div:
    return html.Div([html.Div([html.Strong("Cannot predict: "), reason], className="fv-error", role="alert"),
                     _command(command)])


def progress_bar(share: float) -> html.Div:
    pct = int(100 * share)
    return html.Div([html.Progress(value=str(pct), max="100"), f" predicting… {pct}%"])


def started(ctx: AppContext, pathname: str | None, device: int, picked, sizes, knob, target, memory, conf) -> tuple:
    """A prediction started in the background: its run and command line, the poll switched on, a progress bar;
    or why not (the inputs not understood, the app busy)."""
    try:
        request = predict_request(sid_of(pathname), picked, sizes, knob, target, device, memory, conf)
        run_id = ctx.whatif_runs.start(lambda run: run_prediction(ctx.views, request, run.set_progress), "predict")
    except FragvizError as exc:
        return no_update, True, error_panel(public_message(exc, ctx.reader.records.path))
    return {"run": run_id, "command": predict_command(request)}, False, progress_bar(0.0)


def polled(ctx: AppContext, job: dict | None) -> tuple:
    """The result (or its progress) and whether to poll on."""
    job = job or {}
    run = ctx.whatif_runs.read(job.get("run") or "")
    if run is None:
        return no_update, True
    if not run.done:
        return progress_bar(run.progress), False
    if run.error:
        return refused_panel(run.error, job["command"]), True
    return prediction_panel(run.result, job["command"]), True


def register(app: dash.Dash, ctx: AppContext) -> None:
    @app.callback(Output(ids.WHATIF_PREDICT_JOB, "data"), Output(ids.WHATIF_PREDICT_POLL, "disabled"),
                  Output(ids.WHATIF_PREDICT_RESULT, "children"), Input(ids.WHATIF_PREDICT_RUN, "n_clicks"),
                  State(ids.URL, "pathname"), State(ids.WHATIF_DEVICE, "value"),
                  State(ids.WHATIF_PREDICT_WITH, "value"),
                  State(ids.WHATIF_PREDICT_SIZES, "value"), State(ids.WHATIF_PREDICT_KNOB, "value"),
                  State(ids.WHATIF_PREDICT_TO, "value"), State(ids.WHATIF_MEMORY, "value"),
                  State(ids.WHATIF_CONF, "value"), prevent_initial_call=True)
    def run(_, pathname, device, picked, sizes, knob, target, memory, conf):
        return started(ctx, pathname, device, picked, sizes, knob, target, memory, conf)

    @app.callback(Output(ids.WHATIF_PREDICT_RESULT, "children", allow_duplicate=True),
                  Output(ids.WHATIF_PREDICT_POLL, "disabled", allow_duplicate=True),
                  Input(ids.WHATIF_PREDICT_POLL, "n_intervals"), State(ids.WHATIF_PREDICT_JOB, "data"),
                  prevent_initial_call=True)
    def poll(_, job):
        return polled(ctx, job)
