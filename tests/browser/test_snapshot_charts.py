"""The snapshot page's figures as a user sees them, in a real browser: the segment map's row order, its folded
rows and an axis kept in sight; the timeline's steps, round fragmentation ticks and named annotation spans;
the free-gap histogram's whole, apart tick labels."""
from __future__ import annotations

import re
import uuid

from tests.support.annotated_trace import SPANS_BY_EVENT, SPANS_BY_TIME, annotated_snapshot
from tests.support.helpers import real, write_pickle
from fragviz.snapshot import read_raw
from tests.support.pages import post_file, wait_for_plot

VERL = real("verl_mempools_pending.pickle")  # 127 segments in 3 pools, 8 of them without a live block
PLOT = "document.querySelector('#{0} .js-plotly-plot')"
# the axis drawn apart lines up with the map: the same plot area across and the same range
ALIGNED = (f"(() => {{ const [m, a] = [{PLOT.format('segment-map')}, {PLOT.format('segment-map-axis')}]"
           ".map(p => p._fullLayout.xaxis); return Math.abs(m._offset - a._offset) <= 1 &&"
           " Math.abs(m._length - a._length) <= 1 && m.range[0] === a.range[0] && m.range[1] === a.range[1]; })()")


def row_addresses(page) -> list[int]:
    """The segment map's row labels as drawn, top to bottom, as addresses."""
    labels = page.evaluate("Array.from(document.querySelectorAll('#segment-map .ytick text'))"
                           ".map(t => [t.getBoundingClientRect().top, t.textContent])")
    return [int(text.split()[-1], 16) for _, text in sorted(labels)]


def expected_rows(segments: list[dict], most: int | None) -> list[int]:
    """Worked out from the raw file: the `most` largest segments, by pool id, size class, stream, then size."""
    chosen = sorted(segments, key=lambda s: (-s["total_size"], s["address"]))[:most]
    key = lambda s: (tuple(s.get("segment_pool_id") or (0, 0)), s["segment_type"], s["stream"], -s["total_size"],
                     s["address"])
    return [s["address"] for s in sorted(chosen, key=key)]


def boxes(page, selector: str) -> list[dict]:
    return page.evaluate(f"Array.from(document.querySelectorAll(\"{selector}\")).map(e => {{"
                         "const r = e.getBoundingClientRect(); return {text: e.textContent, left: r.left, "
                         "right: r.right, top: r.top, bottom: r.bottom}; })")


def overlap(a: dict, b: dict) -> bool:
    return a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]


def test_segment_map_rows_fold_and_axis(page, server):
    body, _ = post_file(server, VERL)
    segments = read_raw(VERL).data["segments"]
    page.goto(f"{server.url}/snapshots/{body['id']}")
    wait_for_plot(page, "segment-map")
    wait_for_plot(page, "segment-map-axis")
    rows = row_addresses(page)
    assert rows == expected_rows(segments, 120)
    free = [s["address"] for s in segments if s["active_size"] == 0]
    biggest_free = max((s for s in segments if s["active_size"] == 0), key=lambda s: s["total_size"])
    assert rows.index(biggest_free["address"]) < 20  # 260 MiB of cached free memory, near the top of its pool
    assert len(free) == 8 and set(free) <= set(rows)  # every free segment is drawn
    note = page.locator("#segment-map .annotation-text").text_content()
    assert f"{len(segments) - 120} smaller segments folded: showing the 120 largest of {len(segments)}" in note
    legend = boxes(page, "#segment-map .legend .bg")[0]
    assert not overlap(boxes(page, "#segment-map .annotation-text")[0], legend)  # both readable

    # the axis lines up with the map's plot area, and stays in sight with the map scrolled to its end
    page.wait_for_function(ALIGNED)
    top = page.evaluate(f"{PLOT.format('segment-map')}._fullLayout.xaxis.range[1]")
    assert top == max(s["total_size"] for s in segments) / 2**20  # MiB, the largest segment's size

    # a zoom on the map (a drag across its plot area) takes the axis along
    page.locator(".fv-scroll").scroll_into_view_if_needed()
    area = page.locator("#segment-map .nsewdrag").first.bounding_box()
    y = area["y"] + 40
    page.mouse.move(area["x"] + 20, y)
    page.mouse.down()
    page.mouse.move(area["x"] + area["width"] / 2, y, steps=5)
    page.mouse.up()
    page.wait_for_function(f"{PLOT.format('segment-map')}._fullLayout.xaxis.range[1] < {top * 0.7}")
    page.wait_for_function(ALIGNED)
    page.locator(".fv-scroll").evaluate("el => el.scrollTop = el.scrollHeight")
    page.wait_for_function("(() => { const el = document.querySelector('.fv-scroll');"
                           " return el.scrollTop > 0 && el.scrollTop + el.clientHeight >= el.scrollHeight - 1; })()")
    view = page.locator(".fv-scroll").bounding_box()
    ticks = boxes(page, "#segment-map-axis .xtick text")
    assert len(ticks) >= 3 and all(t["text"].strip() for t in ticks)
    for t in ticks:
        assert view["y"] <= t["top"] and t["bottom"] <= view["y"] + view["height"]
        x, y = (t["left"] + t["right"]) / 2, (t["top"] + t["bottom"]) / 2
        assert page.evaluate(f"document.getElementById('segment-map-axis').contains(document.elementFromPoint({x}, {y}))")
    last = boxes(page, "#segment-map .ytick text")
    assert max(b["bottom"] for b in last) <= view["y"] + view["height"] + 1  # the bottom rows are in view too

    page.check("#segment-map-all input")
    page.wait_for_function(f"{PLOT.format('segment-map')}.layout.yaxis.categoryarray.length === {len(segments)}")
    page.wait_for_function("document.querySelectorAll('#segment-map .annotation-text').length === 0")
    assert row_addresses(page) == expected_rows(segments, None)
    assert page.errors == []


def annotated(server, tmp_path) -> int:
    path = write_pickle(str(tmp_path / f"annotated-{uuid.uuid4().hex[:6]}.pickle"), annotated_snapshot())
    body, status = post_file(server, path)
    assert status in (200, 201), body
    return body["id"]


def span_figure(page) -> dict:
    return page.evaluate(f"(() => {{ const p = {PLOT.format('timeline')};"
                         " const band = p._fullData.find(t => t.name === 'annotated spans (record_function)');"
                         " const text = p._fullData.find(t => t.mode === 'text');"
                         " return {x: band.x, names: text.text}; })()")


def spans_of(x: list) -> list[tuple[float, float]]:
    return [(x[i], x[i + 1]) for i in range(0, len(x), 6)]


def assert_steps_and_labels(page) -> None:
    # every memory line is drawn in steps: its path goes only across and up or down, never slanted
    paths = page.evaluate(f"(() => {{ const p = {PLOT.format('timeline')}; return p._fullData.filter(t =>"
                          " t.mode === 'lines' && !t.name.startsWith('annotated')).map(t => {"
                          " const line = p.querySelector('.trace' + t.uid + ' .js-line');"
                          " return [t.name, line ? line.getAttribute('d') : null]; }); })()")
    assert [name for name, _ in paths] == ["allocated", "requested", "reserved", "cached free", "fragmentation"]
    for name, d in paths:
        assert d and re.fullmatch(r"M[-\d.e,]+(?:[HV][-\d.e]+)+", d), (name, d[:120])
    labels = boxes(page, "#timeline .textpoint text")
    assert [b["text"] for b in labels] == [name for name, _, _ in SPANS_BY_EVENT]
    area = page.locator("#timeline .nsewdrag").first.bounding_box()
    for i, a in enumerate(labels):
        assert area["x"] - 1 <= a["left"] and a["right"] <= area["x"] + area["width"] + 1, a  # whole, readable
        assert not any(overlap(a, b) for b in labels[i + 1:])
    legend = boxes(page, "#timeline .legendtext")
    assert "annotated spans (record_function)" in [b["text"] for b in legend]
    symbol = page.evaluate("(() => { const items = Array.from(document.querySelectorAll('#timeline .traces'));"
                           " const it = items.find(i => i.querySelector('.legendtext').textContent.startsWith('annot'));"
                           " const f = it.querySelector('.legendfill path');"
                           " return f ? [f.getAttribute('d'), getComputedStyle(f).fill] : null; })()")
    assert symbol and symbol[0] and symbol[1] not in ("none", "rgba(0, 0, 0, 0)")  # a visible swatch
    ticks = [t["text"] for t in boxes(page, "#timeline .y2tick text")]
    assert ticks == ["0%", "20%", "40%", "60%", "80%", "100%"]


def test_timeline_steps_ticks_and_named_spans(page, server, tmp_path):
    sid = annotated(server, tmp_path)
    page.goto(f"{server.url}/snapshots/{sid}?device=0&event=3")
    wait_for_plot(page, "timeline")
    page.wait_for_selector("#timeline .textpoint text")
    by_event = span_figure(page)
    assert spans_of(by_event["x"]) == [(a, b) for _, a, b in SPANS_BY_EVENT]
    assert by_event["names"] == [name for name, _, _ in SPANS_BY_EVENT]
    assert_steps_and_labels(page)

    page.click("#timeline-axis input[value=time]")
    page.wait_for_function(f"{PLOT.format('timeline')}.layout.xaxis.title.text === 'seconds since the first event'")
    page.wait_for_selector("#timeline .textpoint text")
    by_time = spans_of(span_figure(page)["x"])
    assert all(abs(a - x) < 1e-9 and abs(b - y) < 1e-9 for (a, b), (x, y) in zip(by_time, SPANS_BY_TIME)), by_time
    assert len(by_time) == len(SPANS_BY_TIME)
    assert_steps_and_labels(page)  # across the 2 s pause too: flat, then one step
    assert page.errors == []


def test_gap_histogram_ticks_are_whole_and_apart(page, server):
    sid = server.sample_id("gpt_train_fragmentation_oom.pickle.gz")
    page.goto(f"{server.url}/snapshots/{sid}")
    page.wait_for_selector("#gap-histogram .bars path")
    page.wait_for_function(f"{PLOT.format('gap-histogram')}.layout.annotations.length > 0")  # the failed request
    xticks = boxes(page, "#gap-histogram .xtick text")
    assert len(xticks) >= 3
    assert all(re.fullmatch(r"\d+ (B|KiB|MiB|GiB|TiB)", t["text"]) for t in xticks), [t["text"] for t in xticks]
    ticks = xticks + boxes(page, "#gap-histogram .ytick text") + boxes(page, "#gap-histogram .y2tick text")
    for i, a in enumerate(ticks):
        assert not any(overlap(a, b) for b in ticks[i + 1:]), a
    svg = page.locator("#gap-histogram .main-svg").first.bounding_box()
    for t in ticks:  # whole: inside the figure, not cut at its edge
        assert svg["x"] <= t["left"] and t["right"] <= svg["x"] + svg["width"]
        assert svg["y"] <= t["top"] and t["bottom"] <= svg["y"] + svg["height"]
    legend = page.locator("#gap-histogram .legend").first.bounding_box()
    legend = {"left": legend["x"], "right": legend["x"] + legend["width"], "top": legend["y"],
              "bottom": legend["y"] + legend["height"]}
    others = ticks + boxes(page, "#gap-histogram .gtitle") + boxes(page, "#gap-histogram .annotation-text")
    assert not any(overlap(legend, t) for t in others), (legend, [t for t in others if overlap(legend, t)])
    mark = page.locator("#gap-histogram .annotation-text").text_content()
    assert mark == "failed request 90.00 MiB (dashed line)"
    assert page.errors == []
