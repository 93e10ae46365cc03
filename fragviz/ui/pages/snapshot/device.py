"""What on the snapshot page follows its device beyond the selected state (drawn in state.py): the timeline
and its note, the event box's bound, the line under the title and the what-if link. The device changes by the
picker, or by a link or Back to a URL that names another device (the picker then follows the URL)."""
from __future__ import annotations

from typing import Callable

import dash
from dash import Input, Output, State, html
from dash.exceptions import PreventUpdate

from fragviz.ui import ids
from fragviz.ui.context import AppContext
from fragviz.ui.pages.common import fb, make_search
from fragviz.ui.pages.snapshot.timeline import no_trace_note, timeline_box_style
from fragviz.ui.pages.snapshot.view import View, draw_timeline, view_of

ViewOf = Callable[[AppContext, "str | None", "str | None"], View]


def whatif_href(sid: int, device: int) -> str:
    """The what-if page on the snapshot page's device."""
    return f"/whatif/{sid}" + make_search(device=device)


def sub_line(fmt, file_size: int, n: int, device: int) -> str:
    """The line under the title: the file's format and size, and the device's trace length."""
    return (f"format {fmt.generation} ({fmt.torch_estimate}), {fmt.encoding}{', gzip' if fmt.compression else ''}"
            f" · {fb(file_size)} · {n} trace events on device {device}")


def view_on(ctx: AppContext, view_of: ViewOf, pathname: str | None, search: str | None, device: int) -> View:
    """The view of `device`: the URL's own where it shows that device (a link or Back), else its end (picked)."""
    view = view_of(ctx, pathname, search)
    return view if view[1] == device else view_of(ctx, pathname, make_search(device=device))


def followed(ctx: AppContext, view: View, axis: str | None) -> tuple:
    """What follows the device of `view`: the timeline, its note and box, the event box's bound, the line under
    the title and the what-if link."""
    row, fmt = ctx.reader.snapshot_row(view.sid), ctx.reader.snapshot_meta(view.sid)["format"]
    note: html.P | None = no_trace_note(view.n, "segments_list" in fmt.features)
    return (draw_timeline(ctx, view.sid, view.device, axis=axis or "event"), note,
            timeline_box_style(view.n), view.n, sub_line(fmt, row.file_size, view.n, view.device),
            whatif_href(view.sid, view.device))


def register(app: dash.Dash, ctx: AppContext) -> None:
    @app.callback(Output(ids.TIMELINE, "figure", allow_duplicate=True), Output(ids.TIMELINE_NOTE, "children"),
                  Output(ids.TIMELINE_BOX, "style"), Output(ids.EVENT, "max"), Output(ids.SNAPSHOT_SUB, "children"),
                  Output(ids.SNAPSHOT_WHATIF, "href"), Input(ids.DEVICE, "value"),
                  State(ids.SNAPSHOT_URL, "pathname"), State(ids.SNAPSHOT_URL, "search"),
                  State(ids.TIMELINE_AXIS, "value"), prevent_initial_call=True)
    def follow_device(device, pathname, search, axis):
        if device is None:
            raise PreventUpdate
        return followed(ctx, view_on(ctx, view_of, pathname, search, device), axis)
