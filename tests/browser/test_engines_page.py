"""The dashboard on either store engine: served over a SQLite file and over a PostgreSQL database, the same
upload lands in the store and the same snapshot page draws the same state."""
from __future__ import annotations

import os

import pytest

from tests.support.server import Server
from tests.support.pg import ENGINES, drop_store_target, new_store_target
from fragviz.library import Library
from tests.support.helpers import REAL
from tests.support.pages import upload, wait_for_plot, wait_for_state

SMALL = os.path.join(REAL, "cs336silmont_small.pickle")


@pytest.fixture(scope="module", params=ENGINES)
def engine_server(request, tmp_path_factory):
    target = new_store_target(request.param, tmp_path_factory.mktemp(request.param))
    srv = Server(target)
    yield srv, target
    srv.stop()
    drop_store_target(target)


def test_an_upload_lands_in_the_store_and_its_page_draws_the_stored_state(page, engine_server):
    server, target = engine_server
    upload(page, server, SMALL)
    library = Library.open(target)
    try:
        row = next(r for r in library.list_snapshots() if r.name.endswith("cs336silmont_small.pickle"))
        n = library.trace_length(row.id, 0)
        k = n // 2
        _, figures, _ = library.device_state(row.id, 0, k)
    finally:
        library.close()
    page.goto(f"{server.url}/snapshots/{row.id}?device=0&event={k}")
    wait_for_plot(page, "timeline")
    drawn = wait_for_state(page, k)
    assert f"after {k} of {n} events" in drawn["info"]
    page.wait_for_function(f"document.querySelector('#event-info').innerText.includes('after {k} of {n} events')")
    assert len(drawn["rows"]) == figures.segments  # one row per segment of the stored state at that event
    assert page.errors == []
