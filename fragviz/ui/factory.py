"""The composition root of the dashboard: create_app(store path) -> a Dash app on its Flask server."""
from __future__ import annotations

import glob
import hmac
import os
from dataclasses import dataclass

import dash
from dash import Input, Output, State, dcc, html
from flask import Flask, jsonify, make_response, request

from fragviz.live.manager import LiveManager
from fragviz.store.reader import StoreReader
from fragviz.store.schema import connect
from fragviz.ui import ids
from fragviz.ui.api import Writer, install_api
from fragviz.ui.data import Views
from fragviz.ui.pages import compare, library, live, snapshot, whatif
from fragviz.ui.pages.common import error_panel, header

ASSETS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "assets")
TOKEN_COOKIE = "fragviz_token"


@dataclass
class AppContext:
    reader: StoreReader
    writer: Writer
    views: Views
    live: LiveManager


def create_app(db_path: str, token: str | None = None, samples: str | None = None) -> dash.Dash:
    """The dashboard over the store at `db_path`; with `samples`, a new empty store gets those files ingested."""
    connect(db_path).close()  # create the store and its schema if needed
    writer = Writer(db_path)
    reader = StoreReader(db_path)
    if samples and not reader.list_snapshots():
        for path in sorted(glob.glob(os.path.join(samples, "*.pickle.gz"))):
            writer.ingest(open(path, "rb").read(), os.path.basename(path))
    app_ctx = AppContext(reader, writer, Views(reader), LiveManager(db_path))
    server = Flask("fragviz")
    if token:
        _protect(server, token)
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
        if path.startswith("/compare"):
            return compare.layout(app_ctx, search)
        if path == "/live":
            return live.layout(app_ctx)
        return html.Div([header(), html.Main(className="fv-main", children=[error_panel(f"no page at {path}")])])

    for page in (library, snapshot, whatif, compare, live):
        page.register(app, app_ctx)


def _protect(server: Flask, token: str) -> None:
    @server.before_request
    def check_token():
        given = (request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
                 or request.args.get("token") or request.cookies.get(TOKEN_COOKIE) or "")
        if not hmac.compare_digest(given.encode(), token.encode()):
            if request.path.startswith("/api/") or request.path.startswith("/_dash"):
                return jsonify({"error": "missing or wrong access token"}), 401
            return make_response("fragviz: this dashboard needs its access token (?token=...)", 401)
        return None

    @server.after_request
    def remember(response):
        if request.args.get("token") == token:
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="Strict")
        return response
