"""The compare page's aligned timelines in a real browser: two real traces with step markers put in (one
annotated, one with `snapshot` actions), each side at its own peak, both on the step axis, and a click there
moving both sides; time alignment refused where a side has no times."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.support.helpers import ROOT
from tests.support.pages import click_plot
from tests.support.server import Server
from fragviz.replay.analysis import analyze
from fragviz.snapshot import load_snapshot
from tests.support.step_traces import step_starts, with_snapshot_actions, with_step_annotations

TIMED, UNTIMED = "hanmin_train_19k.pickle", "ftcourse.pickle"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    where = tmp_path_factory.mktemp("compare_align")
    a_path, a_markers = with_step_annotations(TIMED, step_starts(TIMED, 6), str(where / "run_a.pickle"))
    b_path, b_markers = with_snapshot_actions(UNTIMED, [1499, 2999, 4499, 5999, 7499], str(where / "run_b.pickle"))
    db = str(where / "store.sqlite")
    for path in (a_path, b_path):  # ids 1 and 2
        subprocess.run([sys.executable, "-m", "fragviz", "ingest", "--db", db, path], cwd=ROOT, check=True,
                       capture_output=True)
    peaks = [int(np.argmax(analyze(load_snapshot(p)).replays[0].series["allocated"])) for p in (a_path, b_path)]
    srv = Server(db, samples=False)
    yield {"url": srv.url, "markers": (a_markers, b_markers), "peaks": peaks}
    srv.stop()


def step_of(state: float, markers: list[int]) -> float:
    """The step of a state: k at the k-th marker (from 1), linear between markers and, outside them, at the rate
    of the nearest interval."""
    k = 0 if state <= markers[1] else len(markers) - 2
    for i in range(len(markers) - 1):
        if markers[i] <= state <= markers[i + 1]:
            k = i
            break
    return k + 1 + (state - markers[k]) / (markers[k + 1] - markers[k])


def plot(page, expr: str):
    return page.evaluate(f"(() => {{ const p = document.querySelector('#compare-aligned .js-plotly-plot');"
                         f" return {expr}; }})()")


def wait_drawn(page, names: list[str]) -> None:
    page.wait_for_function("(() => { const p = document.querySelector('#compare-aligned .js-plotly-plot');"
                           " return p && p.data && p.data.map(t => t.name).join('|') === " + repr("|".join(names))
                           + "; })()", timeout=60000)


def events(page) -> tuple[int, int]:
    q = page.evaluate("Object.fromEntries(new URLSearchParams(location.search))")
    return int(q["ea"]), int(q["eb"])


def test_step_alignment_each_at_its_peak_and_a_click_moves_both(page, runs):
    (ma, mb), (peak_a, peak_b) = runs["markers"], runs["peaks"]
    page.goto(f"{runs['url']}/compare?a=1&b=2&align=step")
    wait_drawn(page, ["A allocated", "A reserved", "B allocated", "B reserved"])
    assert page.locator("#compare-align input[value=step]").is_checked()
    page.wait_for_function(f"location.search.includes('ea={peak_a}') && location.search.includes('eb={peak_b}')")
    assert page.input_value("#compare-ea") == str(peak_a) and page.input_value("#compare-eb") == str(peak_b)
    page.wait_for_function("(document.querySelector('#compare-summary') || {innerText: ''}).innerText.includes('B: ')",
                           timeout=60000)
    summary = page.locator("#compare-summary").inner_text()
    assert f"A: run_a.pickle, cuda:0, after {peak_a} events" in summary
    assert f"B: run_b.pickle, cuda:0, after {peak_b} events" in summary
    assert "steps:" not in summary and "annotation" not in summary
    assert "A: 6 markers, starts of 'train_step'; B: 5 markers, `snapshot` actions" in \
        page.locator("#compare-aligned-note").inner_text()

    # every point at its state's step; each side's peak marked at its own step
    traces = plot(page, "p._fullData.slice(0, 4).map(t => ({x: Array.from(t.x), s: Array.from(t.customdata)}))")
    for trace, markers in zip(traces, (ma, ma, mb, mb)):
        assert trace["x"] == pytest.approx([step_of(s, markers) for s in trace["s"]])
    shapes = {s["name"]: s["x0"] for s in plot(page, "p.layout.shapes")}
    assert shapes["A selected"] == pytest.approx(step_of(peak_a, ma))
    assert shapes["B selected"] == pytest.approx(step_of(peak_b, mb))

    # a click at 30 % of the axis: both sides move to their states at one step
    box = click_plot(page, "compare-aligned", 0.3)
    page.wait_for_function(f"!location.search.includes('ea={peak_a}&')")
    ea, eb = events(page)
    # the same position lies in both chosen states' stretches of the axis: [step(e), step(e + 1))
    assert max(step_of(ea, ma), step_of(eb, mb)) < min(step_of(ea + 1, ma), step_of(eb + 1, mb)) + 1e-9, (ea, eb)
    at = plot(page, f"p._fullLayout.xaxis.p2l({box['width'] * 0.3})")
    span = plot(page, "p._fullLayout.xaxis.range[1] - p._fullLayout.xaxis.range[0]")
    assert abs(step_of(ea, ma) - at) < 0.02 * span  # near where the pointer was
    page.wait_for_function(f"document.querySelector('#compare-summary').innerText.includes('after {ea} events')")
    shapes = {s["name"]: s["x0"] for s in plot(page, "p.layout.shapes")}
    assert shapes["A selected"] == pytest.approx(step_of(ea, ma))

    page.click("#compare-peaks")
    page.wait_for_function(f"location.search.includes('ea={peak_a}&') && location.search.includes('eb={peak_b}')")
    assert page.errors == []


def test_time_alignment_refused_where_a_side_has_no_times(page, runs):
    page.goto(f"{runs['url']}/compare?a=1&b=2&align=time")
    page.wait_for_function("(document.querySelector('#compare-aligned-note') || {innerText: ''}).innerText"
                           ".includes('cannot')",
                           timeout=60000)
    note = page.locator("#compare-aligned-note").inner_text()
    assert note == "B cannot be aligned by time: its trace records no times (time_us): align by event or by step."
    page.click("#compare-align input[value=event]")
    wait_drawn(page, ["A allocated", "A reserved", "B allocated", "B reserved"])
    page.wait_for_function("!location.search.includes('align=')")
    assert page.locator("#compare-aligned-note").inner_text() == ""
    last = plot(page, "Math.max(...Array.from(p._fullData[2].x))")
    assert last == max(plot(page, "Array.from(p._fullData[2].customdata)"))  # by event: x is the state
    assert page.errors == []
