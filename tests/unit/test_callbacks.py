"""The dashboard's callback logic that needs no server: reading the URL and turning a choice into an event."""
from __future__ import annotations

from fragviz.ui import ids
from fragviz.ui.pages.common import make_search, query_int, sid_of
from fragviz.ui.pages.snapshot.state import chosen_event


def test_urls_carry_the_view():
    assert sid_of("/snapshots/12") == 12 and sid_of("/whatif/3") == 3 and sid_of("/compare") is None
    search = make_search(device=1, event=40, other=None)
    assert search == "?device=1&event=40"
    assert (query_int(search, "device"), query_int(search, "event"), query_int(search, "x")) == (1, 40, None)
    assert query_int("?event=abc", "event") is None


def test_a_choice_becomes_an_event_within_the_trace():
    click = {"points": [{"x": 41.6, "customdata": 7}]}
    assert chosen_event(ids.TIMELINE, click, None, 10, 97) == 42  # by event: the clicked x
    assert chosen_event(ids.TIMELINE, click, None, 10, 97, timed=True) == 7  # by time: the point's event
    assert chosen_event(ids.PREV, None, None, 0, 97) == 0 and chosen_event(ids.NEXT, None, None, 97, 97) == 97
    assert chosen_event(ids.NEXT, None, None, 5, 97) == 6
    assert chosen_event(ids.EVENT, None, 500, 5, 97) == 97 and chosen_event(ids.EVENT, None, -3, 5, 97) == 0
    assert chosen_event(None, None, None, 33, 97) == 33
