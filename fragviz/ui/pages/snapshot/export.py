"""The snapshot page's export card: what (the series, the allocations, or the segments at the selected event)
and the format, and a plain download link to the API's export route (GET /api/snapshots/<id>/export), kept in
step with the page's device and event. The file never passes through Dash."""
from __future__ import annotations

from urllib.parse import urlencode

import dash
from dash import Input, Output, State, dcc, html

from fragviz.library.export import snapshot_file_name
from fragviz.ui import ids
from fragviz.ui.context import AppContext
from fragviz.ui.pages.common import card
from fragviz.ui.pages.snapshot.view import view_of

WHAT_OPTIONS = [{"label": " figures over the trace ", "value": "series"},
                {"label": " every allocation ", "value": "allocations"},
                {"label": " segments at the selected event", "value": "segments"}]
FORMAT_OPTIONS = [{"label": " Parquet ", "value": "parquet"}, {"label": " CSV", "value": "csv"}]


def export_href(sid: int, what: str, fmt: str, device: int, event: int) -> str:
    """The export route's URL: the page's device, and its event for the segments."""
    params = {"what": what, "format": fmt, "device": device, **({"at": event} if what == "segments" else {})}
    return f"/api/snapshots/{sid}/export?{urlencode(params)}"


def export_card(ctx: AppContext, sid: int, device: int, event: int) -> html.Section:
    what, fmt = "series", "parquet"
    return card("Export", html.Div(className="fv-controls", children=[
        dcc.RadioItems(id=ids.EXPORT_WHAT, options=WHAT_OPTIONS, value=what, inline=True),
        dcc.RadioItems(id=ids.EXPORT_FORMAT, options=FORMAT_OPTIONS, value=fmt, inline=True),
        html.A("Download", id=ids.EXPORT_LINK, href=export_href(sid, what, fmt, device, event),
               download=snapshot_file_name(ctx.reader, sid, what, fmt), className="fv-download")]),
        html.P(export_note(sid, what, fmt, device, event), id=ids.EXPORT_NOTE, className="fv-hint"), id=ids.EXPORT)


def export_note(sid: int, what: str, fmt: str, device: int, event: int) -> str:
    at = f" at event {event}" if what == "segments" else ""
    return (f"Device {device}{at}; `fragviz export {sid} --format {fmt} --what {what}` writes every device, and "
            f"GET /api/snapshots/{sid}/export serves the same files.")


def register(app: dash.Dash, ctx: AppContext) -> None:
    """The link follows the choices and the page's URL (device and event)."""

    @app.callback(Output(ids.EXPORT_LINK, "href"), Output(ids.EXPORT_LINK, "download"),
                  Output(ids.EXPORT_NOTE, "children"), Input(ids.EXPORT_WHAT, "value"),
                  Input(ids.EXPORT_FORMAT, "value"), Input(ids.SNAPSHOT_URL, "search"),
                  State(ids.SNAPSHOT_URL, "pathname"))
    def follow(what, fmt, search, pathname):
        sid, device, event, _n = view_of(ctx, pathname, search)
        return (export_href(sid, what, fmt, device, event), snapshot_file_name(ctx.reader, sid, what, fmt),
                export_note(sid, what, fmt, device, event))
