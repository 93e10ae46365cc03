"""The snapshot page's figures as a user sees them, in a real browser: the segment map's row order, its folded
rows, its painted blocks and an axis kept in sight; the timeline's steps, round fragmentation ticks and named
annotation spans; the free-gap histogram's bars (worked out from the server's state), its whole, apart tick
labels and its mark."""
from __future__ import annotations

import re
import uuid

from tests.support.annotated_trace import SPANS_BY_EVENT, SPANS_BY_TIME, annotated_snapshot
from tests.support.helpers import real, write_pickle
from fragviz.snapshot import read_raw
from tests.support.pages import post_file, wait_for_plot, wait_for_state

VERL = real("verl_mempools_pending.pickle")  # 127 segments in 3 pools, 8 of them without a live block
PLOT = "document.querySelector('#{0} .js-plotly-plot')"
# the colour of the canvas at a point (CSS pixels from its corner), as "#rrggbb"
PIXEL = """([selector, x, y]) => { const c = document.querySelector(selector); const r = window.devicePixelRatio || 1;
    const p = c.getContext('2d').getImageData(Math.round(x * r), Math.round(y * r), 1, 1).data;
    return '#' + [p[0], p[1], p[2]].map(v => v.toString(16).padStart(2, '0')).join('').toUpperCase(); }"""


def row_addresses(drawn: dict) -> list[int]:
    """The segment map's row labels as drawn, top to bottom, as addresses."""
    return [int(r["label"].split()[-1], 16) for r in sorted(drawn["rows"], key=lambda r: r["y0"])]


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
    drawn = wait_for_state(page)
    rows = row_addresses(drawn)
    assert rows == expected_rows(segments, 120)
    free = [s["address"] for s in segments if s["active_size"] == 0]
    biggest_free = max((s for s in segments if s["active_size"] == 0), key=lambda s: s["total_size"])
    assert rows.index(biggest_free["address"]) < 20  # 260 MiB of cached free memory, near the top of its pool
    assert len(free) == 8 and set(free) <= set(rows)  # every free segment is drawn
    note = page.locator("#segment-map .fv-map-note").text_content()
    assert f"{len(segments) - 120} smaller segments folded: showing the 120 largest of {len(segments)}" in note
    legend = boxes(page, "#segment-map .fv-map-legend")[0]
    assert not overlap(boxes(page, "#segment-map .fv-map-note")[0], legend)  # both readable
    assert {"allocated", "pending free", "free"} <= set(drawn["kinds"])
    assert drawn["top"] == max(s["total_size"] for s in segments) and drawn["unit"] == "MiB"
    assert drawn["ticks"][0] == "0" and len(drawn["ticks"]) >= 3

    # the blocks are painted: the middle of the widest allocated block has the allocated colour, of a free
    # segment the free colour
    row, block = max(((r, b) for r in drawn["rows"] for b in r["blocks"] if b["kinds"] == ["allocated"]),
                     key=lambda rb: rb[1]["x1"] - rb[1]["x0"])
    at = (block["x0"] + block["x1"]) / 2, (row["y0"] + row["y1"]) / 2
    assert page.evaluate(PIXEL, ["#segment-map canvas.fv-map-rows", *at]) == "#0072B2"
    row = next(r for r in drawn["rows"] if int(r["label"].split()[-1], 16) == biggest_free["address"])
    at = (row["blocks"][0]["x0"] + row["blocks"][0]["x1"]) / 2, (row["y0"] + row["y1"]) / 2
    assert page.evaluate(PIXEL, ["#segment-map canvas.fv-map-rows", *at]) == "#E8E8E8"

    # the size axis stays in sight with the map scrolled to its end, and the bottom rows are in view
    scroller = page.locator("#segment-map")
    scroller.scroll_into_view_if_needed()
    scroller.evaluate("el => el.scrollTop = el.scrollHeight")
    page.wait_for_function("(() => { const el = document.getElementById('segment-map');"
                           " return el.scrollTop > 0 && el.scrollTop + el.clientHeight >= el.scrollHeight - 1; })()")
    view = scroller.bounding_box()
    axis = page.locator("#segment-map canvas.fv-map-axis").bounding_box()
    assert view["y"] - 1 <= axis["y"] and axis["y"] + axis["height"] <= view["y"] + view["height"]
    x, y = axis["x"] + axis["width"] / 2, axis["y"] + axis["height"] / 2
    assert page.evaluate(f"document.elementFromPoint({x}, {y}).classList.contains('fv-map-axis')")
    rows_box = page.locator("#segment-map canvas.fv-map-rows").bounding_box()
    assert rows_box["y"] + rows_box["height"] <= view["y"] + view["height"] + 1

    page.check("#segment-map-all input")
    page.wait_for_function(f"fragviz.stateView.drawn().rows.length === {len(segments)}")
    assert page.locator("#segment-map .fv-map-note").is_hidden()
    assert row_addresses(wait_for_state(page)) == expected_rows(segments, None)
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


def test_gap_histogram_counts_ticks_and_mark(page, server):
    sid = server.sample_id("gpt_train_fragmentation_oom.pickle.gz")
    page.goto(f"{server.url}/snapshots/{sid}")
    drawn = wait_for_state(page)
    histogram = drawn["histogram"]
    # the bars, worked out from the server's state: free blocks by power-of-two size
    state = server.get_json(f"/api/snapshots/{sid}/state?device={drawn['device']}&event={drawn['event']}")
    gaps = [b["size"] for s in state["segments"] for b in s["blocks"] if b["state"] == "inactive"]
    exps = [max(g, 1).bit_length() - 1 for g in gaps]
    expected = [(exps.count(e), sum(g for g, x in zip(gaps, exps) if x == e)) for e in range(min(exps), max(exps) + 1)]
    assert [(b["gaps"], b["bytes"]) for b in histogram["buckets"]] == expected
    labels = histogram["labels"]
    xticks = [t for t in labels if re.fullmatch(r"\d+ (B|KiB|MiB|GiB|TiB)", t["text"])]
    assert len(xticks) >= 3
    counts = [t for t in labels if t not in xticks]
    assert all(re.fullmatch(r"\d+(\.\d+)?", t["text"]) for t in counts)  # whole counts, round MiB
    for i, a in enumerate(labels):  # apart, and whole: inside the canvas
        assert not any(a["x0"] < b["x1"] and b["x0"] < a["x1"] and a["y0"] < b["y1"] and b["y0"] < a["y1"]
                       for b in labels[i + 1:]), a
        assert 0 <= a["x0"] and a["x1"] <= histogram["width"] and 0 <= a["y0"] and a["y1"] <= histogram["height"]
    assert histogram["markText"] == "failed request 90.00 MiB (dashed line)"
    title = boxes(page, "#gap-histogram .fv-gaps-title")[0]
    legend = boxes(page, "#gap-histogram .fv-gaps-legend")[0]
    plot = boxes(page, "#gap-histogram canvas")[0]
    assert not overlap(title, legend) and not overlap(legend, plot) and not overlap(title, plot)
    assert "failed request 90.00 MiB" in legend["text"] and title["text"].startswith("largest allocation that fits")
    assert plot["right"] - plot["left"] >= 300
    assert page.errors == []


def test_a_drag_zooms_the_segment_map_and_a_double_click_shows_it_all(page, server):
    sid = server.sample_id("gpt_train_fragmentation_oom.pickle.gz")
    page.goto(f"{server.url}/snapshots/{sid}?device=0&event=5000")
    drawn = wait_for_state(page, 5000)
    assert drawn["span"] == [0, drawn["top"]]
    page.locator("#segment-map").scroll_into_view_if_needed()  # the map unscrolled: its axis above its rows
    box = page.locator("#segment-map canvas.fv-map-rows").bounding_box()
    y = box["y"] + (drawn["rows"][0]["y0"] + drawn["rows"][0]["y1"]) / 2  # the first row
    assert page.evaluate(f"document.elementFromPoint({box['x'] + drawn['left'] + 5}, {y}).classList.contains("
                         "'fv-map-rows')")
    page.mouse.move(box["x"] + drawn["left"] + 5, y)
    page.mouse.down()
    page.mouse.move(box["x"] + drawn["left"] + drawn["plotWidth"] / 2, y, steps=5)
    page.mouse.up()
    page.wait_for_function(f"fragviz.stateView.drawn().span[1] < {drawn['top'] * 0.7}")
    zoomed = wait_for_state(page)
    lo, hi = zoomed["span"]
    assert 0 <= lo < hi and abs(hi - drawn["top"] * 0.5) < drawn["top"] * 0.05  # the half dragged over
    assert all(lo / 2**20 - 1e-9 <= float(t) <= hi / 2**20 + 1e-9 for t in zoomed["ticks"])  # MiB, within it
    # a block as wide as the view is now twice as wide on the canvas
    widest = max(b["x1"] - b["x0"] for r in drawn["rows"] for b in r["blocks"])
    assert max(b["x1"] - b["x0"] for r in zoomed["rows"] for b in r["blocks"]) > 1.5 * widest
    page.wait_for_timeout(300)
    assert page.locator("#stack-trace").inner_text().startswith("Click a block")  # a drag is no click
    page.click("#next-event")
    assert wait_for_state(page, 5001)["span"] == zoomed["span"]  # the zoom holds for the next event
    page.locator("#segment-map").scroll_into_view_if_needed()  # the button's click scrolled the page
    box = page.locator("#segment-map canvas.fv-map-rows").bounding_box()
    page.mouse.dblclick(box["x"] + drawn["left"] + 40, box["y"] + (drawn["rows"][0]["y0"] + drawn["rows"][0]["y1"]) / 2)
    page.wait_for_function("(() => { const d = fragviz.stateView.drawn(); return d.span[0] === 0 &&"
                           " d.span[1] === d.top; })()")
    assert page.errors == []
