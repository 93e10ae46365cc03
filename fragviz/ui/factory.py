"""The composition root of the dashboard: create_app(store path) -> a Dash app on its Flask server, and the
routing table: which page answers which path."""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Any, Protocol

import dash
from dash import Input, Output, State, dcc, html
from flask import Flask

from fragviz.live.manager import LiveManager
from fragviz.library import Library
from fragviz.store.engine import open_store
from fragviz.ui import ids
from fragviz.ui.context import AppContext
from fragviz.ui.http.api import Writer, install_api
from fragviz.ui.http.guard import Door, install_guard
from fragviz.ui.pages import compare, doctor, job, library, live, snapshot, whatif
from fragviz.ui.pages.common import error_page

ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")  # a link to the repository's assets/; real files in the wheel


class Page(Protocol):
    """A page module (fragviz.ui.pages): its path, its layout for a URL, and its callbacks."""

    PATH: str

    def layout(self, ctx: AppContext, pathname: str, search: str | None = None) -> Any: ...

    def register(self, app: dash.Dash, ctx: AppContext) -> None: ...


@dataclass(frozen=True)
class Exact:
    path: str

    def __call__(self, pathname: str) -> bool:
        return pathname == self.path


@dataclass(frozen=True)
class Prefix:
    path: str

    def __call__(self, pathname: str) -> bool:
        return pathname.startswith(self.path)


@dataclass(frozen=True)
class Route:
    matches: Exact | Prefix
    page: Page


# The routing table: the first route whose matcher takes the path shows its page. Routing follows the path
# only: pages follow their own query (event, device, what they compare).
ROUTES: tuple[Route, ...] = (
    Route(Exact(library.PATH), library),  # /
    Route(Prefix(snapshot.PATH), snapshot),  # /snapshots/<id>?device=N&event=K
    Route(Prefix(whatif.PATH), whatif),  # /whatif/<id>?device=N
    Route(Prefix(job.PATH), job),  # /jobs/<id>
    Route(Prefix(compare.PATH), compare),  # /compare?a=ID&b=ID...
    Route(Exact(live.PATH), live),  # /live
    Route(Exact(doctor.PATH), doctor),  # /doctor?snapshot=ID
)


def page_for(pathname: str) -> Page | None:
    """The page of the first route that matches `pathname`; None where none does."""
    return next((route.page for route in ROUTES if route.matches(pathname)), None)


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
    ctx = AppContext.build(reader, writer, LiveManager(db_path))
    server = Flask("fragviz")
    install_guard(server, Door(host, token or None, tuple(allowed_hosts)))
    install_api(server, reader, writer)
    app = dash.Dash(__name__, server=server, assets_folder=ASSETS, title="fragviz", update_title=None,
                    suppress_callback_exceptions=True)
    app.layout = html.Div([dcc.Location(id=ids.URL, refresh="callback-nav"), html.Div(id=ids.PAGE)])
    _register(app, ctx)
    return app


def _register(app: dash.Dash, ctx: AppContext) -> None:
    @app.callback(Output(ids.PAGE, "children"), Input(ids.URL, "pathname"), State(ids.URL, "search"))
    def route(pathname, search):
        path = pathname or "/"
        page = page_for(path)
        return error_page(f"no page at {path}") if page is None else page.layout(ctx, path, search)

    for page in dict.fromkeys(route.page for route in ROUTES):
        page.register(app, ctx)
