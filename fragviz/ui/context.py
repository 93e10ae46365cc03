"""What every page and callback of one app works through: the AppContext, built once by create_app."""
from __future__ import annotations

from dataclasses import dataclass

from fragviz.library import Library
from fragviz.live.manager import LiveManager
from fragviz.ui.data.compare import CompareViews
from fragviz.ui.data.views import Views
from fragviz.ui.data.whatif_runs import WhatIfRuns
from fragviz.ui.http.api import Writer


@dataclass(frozen=True)
class AppContext:
    """One app's reader and writer, and what its pages keep between requests (caches, runners); every page's
    layout and register takes it. Nothing in it belongs to one request or one browser."""

    reader: Library  # the stored snapshots, read-only: pages never open the store themselves
    writer: Writer  # the server's one store writer (uploads, the bundled samples)
    views: Views  # cached reads of what the pages show
    compare: CompareViews  # the compare page's cached reads (timelines on a shared axis, peaks)
    live: LiveManager  # the pollers of running jobs: the live page attaches through it
    whatif_runs: WhatIfRuns  # the what-if page's background simulations, this app's own

    @classmethod
    def build(cls, reader: Library, writer: Writer, live: LiveManager) -> AppContext:
        views = Views(reader)
        return cls(reader, writer, views, CompareViews(views), live, WhatIfRuns())
