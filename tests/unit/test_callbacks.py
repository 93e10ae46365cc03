"""The dashboard's callback logic that needs no server: reading the URL. (A choice turned into an event is the
browser's: tests/browser/test_dashboard.py.)"""
from __future__ import annotations

from fragviz.ui.pages.common import make_search, query_int, sid_of


def test_urls_carry_the_view():
    assert sid_of("/snapshots/12") == 12 and sid_of("/whatif/3") == 3 and sid_of("/compare") is None
    search = make_search(device=1, event=40, other=None)
    assert search == "?device=1&event=40"
    assert (query_int(search, "device"), query_int(search, "event"), query_int(search, "x")) == (1, 40, None)
    assert query_int("?event=abc", "event") is None
