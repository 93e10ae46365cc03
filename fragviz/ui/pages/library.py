"""The library: every ingested snapshot, and the upload area."""
from __future__ import annotations

import dash
from dash import Input, Output, dcc, html

from fragviz.ui import ids
from fragviz.ui.context import AppContext
from fragviz.ui.http.api import snapshot_entry
from fragviz.ui.pages.common import card, fb, header
from fragviz.ui.pages.job import jobs_table

PATH = "/"


def layout(ctx: AppContext, pathname: str, search: str | None = None) -> html.Div:
    return html.Div([
        header(),
        html.Main(className="fv-main", children=[
            card("Add snapshots",
                 html.Div(id=ids.UPLOAD, className="fv-upload", tabIndex="0", role="button",
                          **{"aria-label": "add snapshot files: drop them here, or press to choose"}, children=[
                     # assets/upload.js adds a hidden file input and sends each file to POST /api/snapshots,
                     # streaming it (no base64 round trip) and showing its progress. The whole area is the one
                     # control: a click (or Enter) opens the file chooser, a drop takes the files.
                     html.P(["Drop snapshot files here, or ", html.Span("choose files", className="fv-choose")],
                            className="fv-upload-label"),
                     html.P("torch.cuda.memory._dump_snapshot() pickles (.pickle, .pkl), gzip (.gz) or JSON; "
                            "several at once.", className="fv-hint"),
                 ]),
                 html.Div(id=ids.UPLOAD_RESULTS, className="fv-upload-results", **{"aria-live": "polite"}),
                 html.Button("refresh", id=ids.UPLOAD_DONE, className="fv-hidden", n_clicks=0)),
            card("Jobs", html.Div(id=ids.LIBRARY_JOBS, children=jobs_table(ctx.reader))),
            card("Snapshots", html.Div(id=ids.LIBRARY, children=table(ctx))),
            # Plotly (3.5 MB of script, about a second to parse here) is loaded by the first graph a page shows:
            # this one, hidden, loads it while the library waits, so a snapshot opened from here draws at once
            dcc.Graph(id=ids.PLOTLY_PRELOAD, style={"display": "none"}, config={"staticPlot": True}),
        ]),
    ])


def table(ctx: AppContext) -> html.Table | html.P:
    rows = ctx.reader.list_snapshots()
    if not rows:
        return html.P("No snapshots yet: add one above.")
    head = html.Thead(html.Tr([html.Th(h) for h in ("snapshot", "devices", "file", "reserved", "peak reserved",
                                                     "fragmentation", "OOMs", "warnings", "added")]))
    return html.Table(className="fv-table", children=[head, html.Tbody([_row(row) for row in rows])])


def _row(row) -> html.Tr:
    e = snapshot_entry(row)
    n = len(e["devices"])
    return html.Tr([
        html.Td(dcc.Link(row.name.rsplit("/", 1)[-1], href=f"/snapshots/{row.id}", title=row.name)),
        html.Td(devices_text(e["devices"])), html.Td(fb(e["file_size"])),
        html.Td(summed(fb(e["reserved_bytes"]), n)),
        html.Td(summed(fb(e["peak_reserved_bytes"]), n, "each device's own peak, added up: they need not be at "
                                                         "the same moment")),
        html.Td(_fragmentation(e["fragmentation"], n)),
        html.Td(summed(str(e["ooms"]), n), className="fv-oom" if e["ooms"] else ""), html.Td(str(e["warnings"])),
        html.Td(e["added_at"].replace("T", " ")[:16])])


def _fragmentation(value: float | None, devices: int) -> str | list:
    """Non-releasable / reserved at the end: for several devices the highest (a share is not added up)."""
    if value is None:
        return "not recorded"
    text = f"{value:.1%}"
    if devices < 2:
        return text
    return [text, " ", html.Span(f"(highest of {devices} devices)", className="fv-hint",
                                 title="free memory empty_cache() could not give back, as a share of reserved")]


def total_note(devices: int) -> str | None:
    """What a figure summed over a snapshot's devices says it is ('total over 2 devices'); None for one device,
    where the figure is that device's own."""
    return f"total over {devices} devices" if devices > 1 else None


def summed(text: str, devices: int, why: str | None = None) -> str | list:
    """A cell of a figure summed over `devices` devices: the figure, and where there are several, that it is
    their total (`why`, if given, as its tooltip)."""
    note = total_note(devices)
    if note is None:
        return text
    return [text, " ", html.Span(f"({note})", className="fv-hint fv-total-note", title=why or note)]


def devices_text(devices: list[int]) -> str:
    """How many devices and which: '1 (cuda:0)', '4 (cuda:0–3)', '2 (cuda:0, cuda:2)'; a bare index would read
    as a count ('0' devices)."""
    if not devices:
        return "none"
    runs: list[list[int]] = []
    for d in sorted(devices):
        if runs and d == runs[-1][-1] + 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    names = [f"cuda:{r[0]}–{r[-1]}" if len(r) > 2 else ", ".join(f"cuda:{d}" for d in r) for r in runs]
    return f"{len(devices)} ({', '.join(names)})"


def register(app: dash.Dash, ctx: AppContext) -> None:
    @app.callback(Output(ids.LIBRARY, "children"), Input(ids.UPLOAD_DONE, "n_clicks"), prevent_initial_call=True)
    def refresh(_):
        return table(ctx)
