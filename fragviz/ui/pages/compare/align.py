"""The compare page's aligned timelines: both sides' memory on one axis (event, time or step; align= in the URL),
each side's selected state marked on it, a click there selecting the state of each side at that position, and
the button that puts each side at its own peak."""
from __future__ import annotations

import dash
from dash import Input, Output, State, ctx as dash_ctx, dcc, html, no_update

from fragviz.replay.align import AXES, AlignmentRefused
from fragviz.base.errors import FragvizError
from fragviz.ui import ids
from fragviz.ui.context import AppContext
from fragviz.ui.data.compare import AlignedSide, CompareViews
from fragviz.ui.figures.compare import SideSeries, aligned_figure
from fragviz.ui.pages.common import card, query

AXIS_LABELS = {"event": "event index", "time": "time since the first event", "step": "step markers"}
SIDE_INPUTS = (Input(ids.COMPARE_A, "value"), Input(ids.COMPARE_DEVICE_A, "value"), Input(ids.COMPARE_EVENT_A, "value"),
               Input(ids.COMPARE_B, "value"), Input(ids.COMPARE_DEVICE_B, "value"), Input(ids.COMPARE_EVENT_B, "value"))


def align_of(search: str | None) -> str:
    """The URL's shared axis (align=), event where it names none or an unknown one."""
    wanted = query(search).get("align")
    return wanted if wanted in AXES else "event"


def aligned_card(search: str | None) -> html.Section:
    return card("Aligned timelines", html.Div(className="fv-controls", children=[
        html.Label(["align by ", dcc.RadioItems(id=ids.COMPARE_ALIGN, value=align_of(search), inline=True,
                                                 options=[{"label": AXIS_LABELS[a], "value": a} for a in AXES])]),
    ]), html.Div(id=ids.COMPARE_ALIGNED_NOTE), dcc.Graph(id=ids.COMPARE_ALIGNED))


def peaks_button() -> html.Button:
    return html.Button("each at its peak", id=ids.COMPARE_PEAKS, n_clicks=0, className="fv-action",
                       title="each side at its state of most allocated bytes")


def resolved_event(cv: CompareViews, sid: int | None, device: int | None, event: int | None) -> int | None:
    """A side's event as given, else its peak (the state of most allocated bytes)."""
    return event if event is not None else cv.peak_or_none(sid, device)


def _sides(cv: CompareViews, a, da, b, db, axis: str) -> tuple[list[AlignedSide], list[str]]:
    """Both sides on the axis, and the reasons of those that cannot be placed there."""
    sides, refusals = [], []
    for label, sid, device in (("A", a, da), ("B", b, db)):
        try:
            sides.append(cv.side(label, sid, device, axis))
        except AlignmentRefused as exc:
            refusals.append(f"{label} cannot be aligned by {axis}: {exc}.")
        except FragvizError as exc:
            refusals.append(f"{label}: {exc}")
    return sides, refusals


def _note(text: str) -> html.P | None:
    return html.P(text, className="fv-note") if text else None


def _markers_note(sides: list[AlignedSide]) -> html.P | None:
    if not sides or sides[0].axis != "step":
        return None
    return _note("Step k of A is aligned with step k of B; between markers the axis is linear. " + "; ".join(
        f"{s.label}: {len(s.alignment.states)} markers, {s.markers}" for s in sides) + ".")


HIDDEN = {"display": "none"}


def _aligned(cv: CompareViews, a, da, ea, b, db, eb, axis: str):
    if a is None or b is None or da is None or db is None:
        return {}, HIDDEN, _note("Pick two snapshots to draw them on one axis.")
    sides, refusals = _sides(cv, a, da, b, db, axis)
    if refusals:
        return {}, HIDDEN, _note(" ".join(refusals))
    series = []
    for side, event in zip(sides, (resolved_event(cv, a, da, ea), resolved_event(cv, b, db, eb))):
        at = None if event is None else float(side.alignment.position([event])[0])
        series.append(SideSeries(side.label, side.x, side.timeline, event, at))
    return aligned_figure(series, axis), {}, _markers_note(sides)


def _clicked(cv: CompareViews, click: dict | None, a, da, b, db, axis: str) -> tuple:
    """Each side's state at the clicked position of the shared axis."""
    points = (click or {}).get("points") or []
    if not points or points[0].get("x") is None:
        return no_update, no_update
    sides, refusals = _sides(cv, a, da, b, db, axis)
    if refusals:
        return no_update, no_update
    x = float(points[0]["x"])
    return tuple(cv.state_at(side, x) for side in sides)


def register(app: dash.Dash, ctx: AppContext) -> None:
    cv = ctx.compare

    @app.callback(Output(ids.COMPARE_ALIGNED, "figure"), Output(ids.COMPARE_ALIGNED, "style"),
                  Output(ids.COMPARE_ALIGNED_NOTE, "children"),
                  *SIDE_INPUTS, Input(ids.COMPARE_ALIGN, "value"))
    def aligned(a, da, ea, b, db, eb, axis):
        return _aligned(cv, a, da, ea, b, db, eb, axis if axis in AXES else "event")

    # One writer of both event boxes: the peaks button, a click on the aligned chart, a side's new snapshot or
    # device (its peak: the old event means nothing on another trace).
    @app.callback(Output(ids.COMPARE_EVENT_A, "value"), Output(ids.COMPARE_EVENT_B, "value"),
                  Input(ids.COMPARE_PEAKS, "n_clicks"), Input(ids.COMPARE_ALIGNED, "clickData"),
                  Input(ids.COMPARE_A, "value"), Input(ids.COMPARE_DEVICE_A, "value"),
                  Input(ids.COMPARE_B, "value"), Input(ids.COMPARE_DEVICE_B, "value"),
                  State(ids.COMPARE_ALIGN, "value"), prevent_initial_call=True)
    def choose_events(_clicks, click, a, da, b, db, axis):
        fired = set(dash_ctx.triggered_prop_ids.values())
        if ids.COMPARE_ALIGNED in fired:
            return _clicked(cv, click, a, da, b, db, axis if axis in AXES else "event")
        peak_a, peak_b = cv.peak_or_none(a, da), cv.peak_or_none(b, db)
        if ids.COMPARE_PEAKS in fired:
            return peak_a, peak_b
        side_a = bool(fired & {ids.COMPARE_A, ids.COMPARE_DEVICE_A})
        side_b = bool(fired & {ids.COMPARE_B, ids.COMPARE_DEVICE_B})
        return peak_a if side_a else no_update, peak_b if side_b else no_update
