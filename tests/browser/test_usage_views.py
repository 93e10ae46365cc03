"""What holds memory, in a real browser on real snapshots: the kind areas and the allocation bands add up to the
replayed allocated bytes, a band's hover and click tell its story, and the three views share one zoom."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.helpers import REAL, ROOT
from tests.support.server import Server
from fragviz.replay.analysis import analyze
from fragviz.snapshot import load_snapshot
from fragviz.ui.ids import KIND_NOTES
from fragviz.usage.stackless import BEFORE_RECORDING, INFERRED_TEXT, REASON_TEXT

HANMIN = os.path.join(REAL, "hanmin_train_19k.pickle")
FULLSTEP = os.path.join(REAL, "cs336kk_ctx128_fullstep.pickle")
NOTRACE = os.path.join(REAL, "selectn_dev1_notrace.pickle")
SAMPLE = os.path.join(ROOT, "sample_snapshots", "gpt_train.pickle.gz")  # fewer, larger allocations: tall bands
FORWARD = os.path.join(REAL, "cs336kk_ctx128_forward.pickle")  # a forward pass: its weights have no stack
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


@pytest.fixture(scope="module")
def usage_server(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("usage") / "store.sqlite")
    for path in (HANMIN, FULLSTEP, NOTRACE, SAMPLE, FORWARD):  # ids 1, 2, 3, 4, 5
        subprocess.run([sys.executable, "-m", "fragviz", "ingest", "--db", db, path], cwd=ROOT, check=True,
                       capture_output=True)
    srv = Server(db, samples=False)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def allocated():
    """The replayed allocated bytes of every state, worked out apart from the views (no store, no lifetimes)."""
    return {path: analyze(load_snapshot(path)).replays[0].series["allocated"] for path in (HANMIN, FULLSTEP)}


def plot(page, graph: str, expr: str):
    return page.evaluate(f"(() => {{ const p = document.querySelector('#{graph} .js-plotly-plot'); return {expr}; }})()")


def wait_drawn(page, graph: str, words: str = "") -> None:
    page.wait_for_function(f"(() => {{ const p = document.querySelector('#{graph} .js-plotly-plot');"
                           f" return p && p._fullData && p._fullData.length > 0"
                           f" && p.textContent.includes({words!r}); }})()", timeout=60000)


def totals_by_state(page) -> dict[int, float]:
    """Bytes of every column of the kind areas (the stacked traces' sum), by the state it draws."""
    traces = plot(page, "memory-by-kind", "p.data.map(t => ({y: Array.from(t.y), c: Array.from(t.customdata)}))")
    unit = plot(page, "memory-by-kind", "p.layout.yaxis.title.text").split("(")[1].rstrip(")")
    out: dict[int, float] = {}
    for t in traces:
        # the last point repeats the last column, to draw its step to the end of the range
        for state, y in dict(zip(t["c"], t["y"])).items():
            out[state] = out.get(state, 0.0) + y * UNITS[unit]
    return out


# Each band's rectangles in the page's pixels, with their words (the figure's hover table, layout.meta.bands)
BANDS_ON_PAGE = """(() => {
    const p = document.querySelector('#allocation-bands .js-plotly-plot'), f = p._fullLayout, t = f.meta.bands;
    const b = p.getBoundingClientRect(), out = [];
    for (let i = 0; i < t.x0.length; i++) {
        const x0 = f.xaxis.l2p(t.x0[i]), x1 = f.xaxis.l2p(t.x1[i]), y0 = f.yaxis.l2p(t.y0[i]), y1 = f.yaxis.l2p(t.y1[i]);
        out.push({x: b.left + f._size.l + (x0 + x1) / 2, y: b.top + f._size.t + (y0 + y1) / 2,
                  area: Math.abs((x1 - x0) * (y1 - y0)), height: Math.abs(y1 - y0), text: t.text[t.band[i]],
                  row: t.row[t.band[i]]});
    }
    return out;
})()"""


def drag(page, graph: str, start: float, width: float) -> None:
    box = page.locator(f"#{graph} .nsewdrag").first.bounding_box()
    x = box["x"] + box["width"] * start
    y = box["y"] + box["height"] * 0.5
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + width / 2, y + 5, steps=3)
    page.mouse.move(x + width, y + 10, steps=3)
    page.mouse.up()


def test_kind_areas_add_up_to_the_replayed_allocated_bytes(page, usage_server, allocated):
    page.goto(usage_server.url + "/snapshots/2")
    wait_drawn(page, "memory-by-kind", "most live bytes")
    legend = plot(page, "memory-by-kind", "Array.from(p.querySelectorAll('.legendtext')).map(t => t.textContent)")
    assert {"optimizer state", "gradients", "activations and temporaries", "parameters (inferred)"} <= set(legend)
    # a training step's memory without a stack is shown as inferred, and the card says on what grounds
    assert page.locator(f"#{KIND_NOTES}").inner_text() == f"parameters (inferred): {INFERRED_TEXT}"
    series = allocated[FULLSTEP]
    totals = totals_by_state(page)
    assert len(totals) > 100
    for state, total in totals.items():
        assert total == pytest.approx(series[state], rel=1e-9, abs=1)
    # each column draws the state of most live bytes in its bucket: the highest column is the trace's peak
    assert max(totals.values()) == pytest.approx(series.max(), rel=1e-9)
    assert page.errors == []


def test_a_band_hovered_and_clicked_tells_its_size_lifetime_site_and_stack(page, usage_server):
    page.goto(usage_server.url + "/snapshots/4")
    wait_drawn(page, "allocation-bands", "most live bytes")
    page.locator("#allocation-bands").scroll_into_view_if_needed()
    # the tallest band with a stack (a pointer lands on whole pixels)
    band = max((b for b in page.evaluate(BANDS_ON_PAGE) if "no stack recorded" not in b["text"]),
               key=lambda b: b["height"])
    assert band["height"] >= 3
    x, y = band["x"], band["y"]
    page.mouse.move(x - 2, y)
    page.mouse.move(x, y)
    page.wait_for_function("(() => { const t = document.querySelector('#allocation-bands .fv-band-tip');"
                           " return t && t.style.display === 'block' && t.textContent.includes('requested'); })()")
    hover = page.locator("#allocation-bands .fv-band-tip").inner_text()
    for words in ("requested", "at 0x", "states", "site ", "kind"):
        assert words in hover
    # the words are the band's own: its size and address as the hover table has them
    assert hover.split("\n")[0] in band["text"].replace("<b>", "").replace("</b>", "")
    page.mouse.click(x, y)
    page.wait_for_function("document.querySelector('#stack-trace').innerText.includes('allocation of')")
    panel = page.locator("#stack-trace").inner_text()
    assert "states" in panel and "site " in panel
    assert page.locator("#stack-trace ol li").count() > 0  # the allocation's frames
    assert page.errors == []


def test_the_views_share_one_zoom_refined_to_exact_states(page, usage_server, allocated):
    page.goto(usage_server.url + "/snapshots/1")
    wait_drawn(page, "allocation-bands", "most live bytes")
    page.locator("#allocation-bands").scroll_into_view_if_needed()
    drag(page, "allocation-bands", 0.30, 12)  # 19,464 states over ~1,200 px: about 200 states
    wait_drawn(page, "allocation-bands", "exact: one column per state")
    wait_drawn(page, "memory-by-kind", "exact: one point per state")
    lo, hi = plot(page, "allocation-bands", "p.layout.xaxis.range")
    assert 0 < hi - lo <= 300
    totals = totals_by_state(page)
    states = sorted(totals)
    assert states == list(range(states[0], states[-1] + 1))  # every state of the range, one by one
    for state in states:
        assert totals[state] == pytest.approx(allocated[HANMIN][state], rel=1e-9, abs=1)
    # the timeline follows the drag on the bands
    page.wait_for_function(f"(() => {{ const r = document.querySelector('#timeline .js-plotly-plot').layout.xaxis.range;"
                           f" return Math.abs(r[0] - {lo}) < 2 && Math.abs(r[1] - {hi}) < 2; }})()")
    # and a drag on the timeline takes the bands and the kind areas along
    page.locator("#timeline").scroll_into_view_if_needed()
    drag(page, "timeline", 0.2, 300)
    page.wait_for_function(f"(() => {{ const r = document.querySelector('#allocation-bands .js-plotly-plot')"
                           f".layout.xaxis.range; return r[0] > {lo} - 300 && Math.abs(r[1] - r[0]) < {hi - lo}; }})()")
    t_range = plot(page, "timeline", "p.layout.xaxis.range")
    b_range = plot(page, "allocation-bands", "p.layout.xaxis.range")
    assert b_range[0] == pytest.approx(t_range[0], abs=1.5) and b_range[1] == pytest.approx(t_range[1], abs=1.5)
    assert page.errors == []


def test_the_kind_card_says_why_memory_has_no_stack(page, usage_server):
    page.goto(usage_server.url + "/snapshots/5")
    wait_drawn(page, "memory-by-kind", "most live bytes")
    legend = plot(page, "memory-by-kind", "Array.from(p.querySelectorAll('.legendtext')).map(t => t.textContent)")
    assert "no stack recorded" in legend and "other" not in legend and "parameters (inferred)" not in legend
    assert page.locator(f"#{KIND_NOTES}").inner_text() == f"no stack recorded: {REASON_TEXT[BEFORE_RECORDING]}"
    assert page.errors == []


def test_by_site_and_a_snapshot_without_a_trace(page, usage_server):
    page.goto(usage_server.url + "/snapshots/1")
    wait_drawn(page, "memory-by-kind", "most live bytes")
    page.locator("#memory-by-group label", has_text="by allocation site").click()
    page.wait_for_function("Array.from(document.querySelectorAll('#memory-by-kind .legendtext'))"
                           ".some(t => t.textContent.includes('adapters.py'))")
    page.goto(usage_server.url + "/snapshots/3")
    page.wait_for_selector("text=has no trace, so there is no memory over time to draw")
    assert not page.locator("#allocation-bands").is_visible()
    assert page.errors == []
