"""What on the snapshot page follows its device beyond the selected state (drawn in snapshot.py): the timeline
and its note, the event box's bound, the line under the title and the what-if link. The device changes by the
picker, or by a link or Back to a URL that names another device (the picker then follows the URL)."""
from __future__ import annotations

from typing import Callable

from dash import Input, Output, State, html
from dash.exceptions import PreventUpdate

from fragviz.ui import ids
from fragviz.ui.pages.common import fb, make_search
from fragviz.ui.data.sites import no_trace_note

ViewOf = Callable[..., tuple[int, int, int, int]]


def whatif_href(sid: int, device: int) -> str:
    """The what-if page on the snapshot page's device."""
    return f"/whatif/{sid}" + make_search(device=device)


def sub_line(fmt, file_size: int, n: int, device: int) -> str:
    """The line under the title: the file's format and size, and the device's trace length."""
    return (f"format {fmt.generation} ({fmt.torch_estimate}), {fmt.encoding}{', gzip' if fmt.compression else ''}"
            f" · {fb(file_size)} · {n} trace events on device {device}")


def timeline_box_style(n: int) -> dict:
    """The timeline and its axis switch stay in the page without a trace (callbacks read them), hidden."""
    return {"display": "none"} if n == 0 else {}


def view_on(app_ctx, view_of: ViewOf, pathname: str | None, search: str | None, device: int):
    """The view of `device`: the URL's own where it shows that device (a link or Back), else its end (picked)."""
    view = view_of(app_ctx, pathname, search)
    return view if view[1] == device else view_of(app_ctx, pathname, make_search(device=device))


def register(app, app_ctx, view_of: ViewOf, draw_timeline: Callable) -> None:
    @app.callback(Output(ids.TIMELINE, "figure", allow_duplicate=True), Output(ids.TIMELINE_NOTE, "children"),
                  Output(ids.TIMELINE_BOX, "style"), Output(ids.EVENT, "max"), Output(ids.SNAPSHOT_SUB, "children"),
                  Output(ids.SNAPSHOT_WHATIF, "href"), Input(ids.DEVICE, "value"),
                  State(ids.SNAPSHOT_URL, "pathname"), State(ids.SNAPSHOT_URL, "search"),
                  State(ids.TIMELINE_AXIS, "value"), prevent_initial_call=True)
    def follow_device(device, pathname, search, axis):
        if device is None:
            raise PreventUpdate
        sid, device, event, n = view_on(app_ctx, view_of, pathname, search, device)
        row, fmt = app_ctx.reader.snapshot_row(sid), app_ctx.reader.snapshot_meta(sid)["format"]
        note: html.P | None = no_trace_note(n, "segments_list" in fmt.features)
        return (draw_timeline(app_ctx, sid, device, event, axis=axis or "event"), note, timeline_box_style(n), n,
                sub_line(fmt, row.file_size, n, device), whatif_href(sid, device))
