"""The right device everywhere, without a server: which device a page opens on, the OOM card's titles, links
and lines for other devices, the library's note on figures summed over devices, the what-if page's body."""
from __future__ import annotations

from dash import dcc, html

from fragviz.doctor import Diagnosis
from fragviz.store.records import DeviceSummary, Summary
from fragviz.ui.pages.common import opening_device
from fragviz.ui.pages.library import summed, total_note
from fragviz.ui.pages.snapshot.device import view_on, whatif_href
from fragviz.ui.pages.snapshot.oom import oom_href, oom_title, verdicts_view
from fragviz.ui.pages.whatif import body


def device(d: int, ooms: int = 0, allocs: int = 0, events: int | None = None) -> DeviceSummary:
    actions = {"oom": ooms, "alloc": allocs}
    n = sum(actions.values()) if events is None else events
    return DeviceSummary(d, n, actions, 0, 0, 0, 0, 0, 0.0, 0, 0, 0, 0)


def texts(component) -> list[str]:
    """Every string in a component tree, in order."""
    if isinstance(component, str):
        return [component]
    if component is None or isinstance(component, (int, float)):
        return []
    children = component if isinstance(component, (list, tuple)) else getattr(component, "children", None)
    if children is None:
        return []
    return [t for c in (children if isinstance(children, (list, tuple)) else [children]) for t in texts(c)]


def links(component) -> list[tuple[str, str]]:
    """(text, href) of every dcc.Link in a component tree."""
    found = []
    if isinstance(component, dcc.Link):
        found.append(("".join(texts(component.children)), component.href))
    children = component if isinstance(component, (list, tuple)) else getattr(component, "children", None)
    for c in children if isinstance(children, (list, tuple)) else ([children] if children is not None else []):
        if not isinstance(c, str):
            found.extend(links(c))
    return found


def oom(d: int, event: int, verdict: str = "exhaustion") -> Diagnosis:
    return Diagnosis(verdict=verdict, device=d, event=event, requested_bytes=2**30, reserved_bytes=2**31,
                     allocated_bytes=None, device_total_bytes=None, device_free_bytes=0, allowed_bytes=None,
                     largest_free_block=2**20, non_releasable_bytes=None, fragmentation=None, processes=(),
                     advice=("reduce the batch",), what_if=(), warnings=(), notes=())


def test_a_page_opens_on_the_asked_device_else_the_first_oom_device_else_the_first():
    summary = Summary((device(0), device(1, ooms=2), device(3, ooms=1)))
    assert opening_device([0, 1, 3], summary, 3) == 3  # asked, and there
    assert opening_device([0, 1, 3], summary, None) == 1  # the lowest device with an OOM
    assert opening_device([0, 1, 3], summary, 2) == 1  # asked for a device the snapshot lacks
    assert opening_device([0, 1], Summary((device(0), device(1))), None) == 0  # no OOM: as before
    assert opening_device([2, 5], Summary((device(2), device(5))), None) == 2
    assert opening_device([], Summary(), None) == 0


def test_an_oom_is_named_by_its_device_and_event_and_links_to_its_state():
    assert oom_title(oom(1, 41, "fragmentation")) == "Fragmentation on cuda:1 at event 41"
    assert oom_title(oom(0, 3)) == "True exhaustion on cuda:0 at event 3"
    assert oom_title(oom(2, 7, "something_new")) == "something_new on cuda:2 at event 7"  # never a KeyError
    assert oom_href(9, 1, 41) == "/snapshots/9?device=1&event=41"
    assert whatif_href(9, 1) == "/whatif/9?device=1"


def test_the_oom_card_shows_the_page_device_and_points_to_the_others():
    ooms = [oom(1, 5), oom(1, 9, "fragmentation"), oom(2, 4)]
    on_1 = verdicts_view(7, 1, ooms)
    assert [h.children for h in on_1.children if isinstance(h, html.Div)
            for h in h.children if isinstance(h, html.H4)] == ["True exhaustion on cuda:1 at event 5",
                                                                "Fragmentation on cuda:1 at event 9"]
    assert links(on_1) == [("show the state at this OOM (cuda:1, event 5)", "/snapshots/7?device=1&event=5"),
                           ("show the state at this OOM (cuda:1, event 9)", "/snapshots/7?device=1&event=9"),
                           ("the first at event 4", "/snapshots/7?device=2&event=4")]
    assert "cuda:2 records 1 OOM: " in texts(on_1)

    on_0 = verdicts_view(7, 0, ooms)
    said = texts(on_0)
    assert said[0] == "No out-of-memory error is recorded on cuda:0."
    assert "cuda:1 records 2 OOMs: " in said and "cuda:2 records 1 OOM: " in said
    assert not any("exhaustion" in t.lower() for t in said)  # no other device's verdict shown as this one's
    assert links(on_0) == [("the first at event 5", "/snapshots/7?device=1&event=5"),
                           ("the first at event 4", "/snapshots/7?device=2&event=4")]
    assert texts(verdicts_view(7, 0, [])) == ["No out-of-memory error is recorded in this snapshot."]


def test_figures_summed_over_devices_say_so():
    assert total_note(1) is None and total_note(0) is None
    assert total_note(4) == "total over 4 devices"
    assert summed("1.00 GiB", 1) == "1.00 GiB"
    cell = summed("3.00 GiB", 2, "each device's own peak, added up")
    assert texts(cell) == ["3.00 GiB", " ", "(total over 2 devices)"]
    assert cell[2].title == "each device's own peak, added up"


def test_a_device_view_keeps_the_url_event_only_for_the_url_device():
    def view_of(_ctx, _path, search):  # the snapshot page's view_of over a two-device snapshot of 10 events each
        d = 1 if "device=1" in (search or "") else 0
        return 5, d, (4 if "event=4" in (search or "") else 10), 10

    assert view_on(None, view_of, "/snapshots/5", "?device=1&event=4", 1) == (5, 1, 4, 10)  # a link, or Back
    assert view_on(None, view_of, "/snapshots/5", "?device=1&event=4", 0) == (5, 0, 10, 10)  # picked: its end
    assert view_on(None, view_of, "/snapshots/5", "", 0) == (5, 0, 10, 10)


def test_the_whatif_body_is_the_chosen_devices():
    summary = Summary((device(0, allocs=0, events=3), device(1, allocs=12)))
    refused = texts(body(summary, 0))
    assert any("device 0's trace holds 3 events but no alloc" in t for t in refused)
    ready = body(summary, 1)
    assert "Reserved memory and fragmentation on cuda:1: recorded and simulated" in texts(ready)
    assert any("the snapshot holds no device 4" in t for t in texts(body(summary, 4)))
