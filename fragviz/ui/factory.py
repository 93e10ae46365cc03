"""The composition root of the dashboard: create_app(store path) -> a Dash app on its Flask server."""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field

import dash
from dash import Input, Output, State, dcc, html
from flask import Flask

from fragviz.live.manager import LiveManager
from fragviz.library import Library
from fragviz.store.engine import open_store
from fragviz.ui import ids
from fragviz.ui.http.api import Writer, install_api
from fragviz.ui.data.compare import CompareViews
from fragviz.ui.data.views import Views
from fragviz.ui.http.guard import Door, install_guard
from fragviz.ui.data.whatif_runs import WhatIfRuns
from fragviz.ui.pages import compare, doctor, job, library, live, snapshot, usage_callbacks, whatif
from fragviz.ui.pages.common import error_panel, header

ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")  # a link to the repository's assets/; real files in the wheel


@dataclass
class AppContext:
    reader: Library
    writer: Writer
    views: Views
    compare: CompareViews
    live: LiveManager
    whatif_runs: WhatIfRuns = field(default_factory=WhatIfRuns)  # the what-if page's simulations, this app's own


def create_app(db_path: str, token: str | None = None, samples: str | None = None, host: str = "127.0.0.1",
               allowed_hosts: tuple[str, ...] = ()) -> dash.Dash:
    """The dashboard over the store at `db_path`; with `samples`, a new empty store gets those files ingested.

    `host` is the address it will listen on and `allowed_hosts` the other names clients call it by: every
    request must name one of them in its Host header (see http/guard.py for the rest of the door)."""
    store = open_store(db_path)  # created, or its schema brought up to date, before anything reads it
    writer = Writer(db_path, store)
    reader = Library.open(store)
    if samples and not reader.list_snapshots():
        for path in sorted(glob.glob(os.path.join(samples, "*.pickle.gz"))):
            writer.ingest_file(path, os.path.basename(path))
    views = Views(reader)
    app_ctx = AppContext(reader, writer, views, CompareViews(views), LiveManager(db_path))
    server = Flask("fragviz")
    install_guard(server, Door(host, token or None, tuple(allowed_hosts)))
    install_api(server, reader, writer)
    app = dash.Dash(__name__, server=server, assets_folder=ASSETS, title="fragviz", update_title=None,
                    suppress_callback_exceptions=True)
    app.layout = html.Div([dcc.Location(id=ids.URL, refresh="callback-nav"), html.Div(id=ids.PAGE)])
    _register(app, app_ctx)
    return app


def _register(app: dash.Dash, app_ctx: AppContext) -> None:
    # Routing follows the path only: pages follow their own query (event, device, what they compare).
    @app.callback(Output(ids.PAGE, "children"), Input(ids.URL, "pathname"), State(ids.URL, "search"))
    def route(pathname, search):
        path = pathname or "/"
        if path == "/":
            return library.layout(app_ctx)
        if path.startswith("/snapshots/"):
            return snapshot.layout(app_ctx, path, search)
        if path.startswith("/whatif/"):
            return whatif.layout(app_ctx, path, search)
        if path.startswith("/jobs/"):
            return job.layout(app_ctx, path)
        if path.startswith("/compare"):
            return compare.layout(app_ctx, search)
        if path == "/live":
            return live.layout(app_ctx)
        if path == "/doctor":
            return doctor.layout(app_ctx, search)
        return html.Div([header(), html.Main(className="fv-main", children=[error_panel(f"no page at {path}")])])

    for page in (library, snapshot, usage_callbacks, whatif, compare, live, doctor, job):
        page.register(app, app_ctx)

