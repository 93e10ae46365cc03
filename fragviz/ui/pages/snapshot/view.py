"""The snapshot page's URL read as a view (snapshot, device, event, trace length), and the timeline drawn for a
view: what every part of the page starts from."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import plotly.graph_objects as go
from dash.exceptions import PreventUpdate

from fragviz.ui.context import AppContext
from fragviz.ui.figures.timeline import timeline_figure
from fragviz.ui.pages.common import opening_device, path_sid, query_int

PATH = "/snapshots/"  # the page's prefix: /snapshots/<id>
# The timeline's most points: about one (a bucket's min and max) per pixel of a wide plot; a zoom refines it.
# Plotly's drawing time follows the points, and the timeline is drawn on every visit.
TIMELINE_POINTS = 1200


class View(NamedTuple):
    sid: int
    device: int
    event: int  # the state after this many events
    n: int  # the device's trace length


def page_sid(pathname: str | None) -> int:
    """The snapshot id of a snapshot page's path; off a snapshot page, PreventUpdate.

    The page's own dcc.Location hears an in-app jump to another page (a dcc.Link) before the router has
    replaced the page, so every callback of this page reads its path through here (or view_of) and then
    does nothing. An unreadable id under /snapshots/ stays an error: the layout shows it."""
    if not (pathname or "").startswith(PATH):
        raise PreventUpdate
    return path_sid(pathname, PATH)


def view_of(ctx: AppContext, pathname: str | None, search: str | None) -> View:
    """The view the URL names, defaults filled in (without a device, the device of the first OOM: see
    opening_device), bounds checked (PreventUpdate off a snapshot page: see page_sid)."""
    sid = page_sid(pathname)
    row = ctx.reader.snapshot_row(sid)
    device = opening_device(row.devices, row.summary, query_int(search, "device"))
    n = ctx.reader.trace_length(sid, device) if row.devices else 0
    event = query_int(search, "event")
    event = n if event is None else min(max(event, 0), n)
    return View(sid, device, event, n)


def draw_timeline(ctx: AppContext, sid: int, device: int, lo: int | None = None, hi: int | None = None,
                  axis: str = "event") -> go.Figure:
    """The timeline of a device; over events lo..hi where both are given (zoomed)."""
    tl = ctx.reader.timeline(sid, device, lo or 0, hi, max_points=TIMELINE_POINTS)
    x_range = None
    if lo is not None and hi is not None:
        x_range = [lo, hi] if axis == "event" else _seconds(ctx, sid, device, [lo, hi])
    return timeline_figure(tl, ctx.views.markers(sid, device), x_range=x_range, axis=axis,
                           spans=ctx.views.annotation_spans(sid, device))


def _time_map(ctx: AppContext, sid: int, device: int):
    """(event starts, seconds since the first event) over the whole trace, coarse: to turn one into the other."""
    tl = ctx.reader.timeline(sid, device, max_points=5000)
    if tl.t0_us is None or tl.time_us is None:
        return None
    return np.asarray(tl.start), (np.asarray(tl.time_us) - tl.t0_us) / 1e6


def _seconds(ctx: AppContext, sid: int, device: int, events: list[int]) -> list[float] | None:
    m = _time_map(ctx, sid, device)
    return None if m is None else [float(v) for v in np.interp(events, m[0], m[1])]


def events_at_seconds(ctx: AppContext, sid: int, device: int, seconds: list[float]) -> list[int]:
    m = _time_map(ctx, sid, device)
    if m is None:
        return [int(s) for s in seconds]
    return [int(v) for v in np.interp(seconds, m[1], m[0])]
