"""The snapshot page's site tables, its peak card, its notes where there is nothing to draw, and the icicle, in a
real browser on real snapshots. Expected figures come from the parsed files (load_snapshot, analyze), not from
the store the server reads."""
from __future__ import annotations

import os
import re
from html import escape
from collections import defaultdict

import numpy as np
import pytest

from tests.support.pages import wait_for_state
from tests.support.server import Server
from fragviz.replay.analysis import analyze
from fragviz.library.ingest import ingest_file
from fragviz.model import BlockState
from fragviz.snapshot import load_snapshot
from fragviz.snapshot.frames import is_user_frame
from fragviz.store.engine import open_store
from fragviz.usage.sites import site_label
from tests.support.helpers import real

FILES = ("verl_mempools_pending.pickle", "nuggets_nightly_mini.pickle", "hanmin_train_19k.pickle",
         "cs336kk_notrace_75gb.pickle", "selectn_dev1_notrace.pickle", "layoutedit_segments_only.pickle",
         "hitsbe_empty.pickle", "diffusion_tiny.pickle")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A server over a store holding FILES; .ids maps each file's name to its snapshot id."""
    db = str(tmp_path_factory.mktemp("sites") / "store.sqlite")
    conn = open_store(db)
    ids = {}
    for name in FILES:
        result = ingest_file(conn, real(name), name)
        assert result.status == "ingested", result.error
        ids[name] = result.id
    conn.close()
    srv = Server(db)  # a store that is not empty: no samples added
    srv.ids = ids
    yield srv
    srv.stop()


def open_snapshot(page, site, name: str, query: str = "") -> None:
    page.goto(f"{site.url}/snapshots/{site.ids[name]}{query}")


def live_blocks(segments, device: int):
    return [b for s in segments if s.device == device for b in s.blocks if b.state is not BlockState.INACTIVE]


def sites_of(snap, blocks) -> list[tuple[str, int, int]]:
    """(site, bytes, blocks) of live blocks by site, most bytes first (ties by site): site_label of each block's frames."""
    by_site: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for b in blocks:
        label = site_label([snap.frames[i] for i in snap.stacks[b.stack]]) if b.stack >= 0 else "(no stack recorded)"
        by_site[label][0] += b.size
        by_site[label][1] += 1
    return sorted(((s, v[0], v[1]) for s, v in by_site.items()), key=lambda r: (-r[1], r[0]))


def table_cells(page, table: str, column: str) -> list[str]:
    return page.eval_on_selector_all(f"#{table} td[data-dash-column={column}]", "cells => cells.map(c => c.innerText)")


OUT_OF_BOX = """table => {
    const box = document.querySelector('#' + table + ' .dash-spreadsheet-container');
    const card = box.closest('section').getBoundingClientRect();
    const b = box.getBoundingClientRect();
    const out = [];
    for (const col of ['live', 'bytes', 'blocks']) {
        for (const c of document.querySelectorAll('#' + table + ' td[data-dash-column=' + col + ']')) {
            const r = c.getBoundingClientRect();
            if (r.width < 20 || r.left < b.left - 0.5 || r.right > b.right + 0.5 || r.right > card.right)
                out.push(col + ' ' + c.innerText + ' ' + JSON.stringify([r.left, r.right, b.left, b.right, card.right]));
        }
    }
    if (box.scrollWidth > box.clientWidth + 1) out.push('scrolls ' + box.scrollWidth + ' > ' + box.clientWidth);
    return out;
}"""


def test_site_tables_fit_their_card_with_long_paths(page, site):
    snap = load_snapshot(real("verl_mempools_pending.pickle"))  # dist-packages paths up to 140 characters
    expected = sites_of(snap, live_blocks(snap.segments, 0))[:12]
    assert max(len(s) for s, _, _ in expected) > 100
    open_snapshot(page, site, "verl_mempools_pending.pickle")
    for table in ("sites-now", "sites-peak"):  # no trace: the peak is the final state too
        page.wait_for_function(f"document.querySelectorAll('#{table} td[data-dash-column=bytes]').length === 12",
                               timeout=60000)
        assert [int(v) for v in table_cells(page, table, "bytes")] == [b for _, b, _ in expected]
        assert page.evaluate(OUT_OF_BOX, table) == []
    shown = table_cells(page, "sites-now", "site")
    assert shown[0] == "…/dist-packages/vllm/…/cache_engine.py:83 _allocate_kv_cache"  # 64 characters at most
    assert expected[0][0] == "/usr/local/lib/python3.10/dist-packages/vllm/worker/cache_engine.py:83 _allocate_kv_cache"
    # the whole site in the cell's tooltip
    page.locator("#sites-now td[data-dash-column=site]").first.hover()
    tip = page.locator("#sites-now .dash-tooltip")
    tip.wait_for(state="visible")
    assert tip.inner_text().strip() == expected[0][0]
    assert page.errors == []


def test_generated_inductor_sites_fit_too(page, site):
    snap = load_snapshot(real("nuggets_nightly_mini.pickle"))
    blocks = live_blocks(analyze(snap).replays[0].segments_at(44), 0)
    expected = sites_of(snap, blocks)[:12]
    assert sum("/tmp/torchinductor_" in s for s, _, _ in expected) == 7
    open_snapshot(page, site, "nuggets_nightly_mini.pickle", "?device=0&event=44")
    page.wait_for_function(f"document.querySelectorAll('#sites-now td[data-dash-column=bytes]').length === "
                           f"{len(expected)}", timeout=60000)
    assert [int(v) for v in table_cells(page, "sites-now", "bytes")] == [b for _, b, _ in expected]
    assert [int(v) for v in table_cells(page, "sites-now", "blocks")] == [n for _, _, n in expected]
    assert page.evaluate(OUT_OF_BOX, "sites-now") == []
    inductor = [s for s in table_cells(page, "sites-now", "site") if "torchinductor" in s]
    assert len(inductor) == 7 and all(s.startswith("…/torchinductor_drisspg/nq/cnqtho") for s in inductor)
    assert page.errors == []


@pytest.mark.parametrize("name", ["nuggets_nightly_mini.pickle", "hanmin_train_19k.pickle"])
def test_the_peak_card_names_its_peak_and_jumps_to_it(page, site, name):
    snap = load_snapshot(real(name))
    allocated = np.asarray(analyze(snap).replays[0].series["allocated"])  # after 0..n events
    n = len(snap.trace_of(0))
    peak, value = int(allocated.argmax()), int(allocated.max())
    assert 0 < peak < n - 1
    open_snapshot(page, site, name, "?device=0&event=1")
    info = page.locator("#sites-peak-info")
    info.locator("a").wait_for(timeout=60000)
    text = info.inner_text()
    assert "peak of allocated memory on device 0" in text
    assert f"({value:,} bytes) after event {peak} of {n}" in text
    page.wait_for_function("document.querySelector('#event-info').innerText.includes('after 1 of')")
    page.click("#sites-peak-jump")
    page.wait_for_function(f"new URLSearchParams(location.search).get('event') === '{peak}'")
    page.wait_for_function(f"document.querySelector('#event-info').innerText.includes('after {peak} of {n}')")
    assert page.input_value("#event") == str(peak)
    assert f"allocated {fmt_bytes(value)}" in page.locator("#event-info").inner_text()
    assert page.errors == []


def fmt_bytes(n: int) -> str:
    from fragviz.base.units import format_bytes
    return format_bytes(n)


@pytest.mark.parametrize("name, says", [
    ("cs336kk_notrace_75gb.pickle", "This snapshot has no trace"),
    ("selectn_dev1_notrace.pickle", "This snapshot has no trace"),
    ("layoutedit_segments_only.pickle", "This file is a list of segments (torch.cuda.memory_snapshot())"),
])
def test_a_snapshot_without_a_trace_says_so_in_place_of_the_timeline(page, site, name, says):
    open_snapshot(page, site, name)
    note = page.locator("#timeline-note")
    note.wait_for()
    assert says in note.inner_text() and "only the" in note.inner_text()
    assert not page.locator("#timeline").is_visible()
    assert wait_for_state(page, 0, timeout=60000)["rows"]  # the final state is shown
    assert page.errors == []


def test_a_one_event_trace_is_explained_above_its_timeline(page, site):
    open_snapshot(page, site, "diffusion_tiny.pickle")
    page.locator("#timeline-note").wait_for()
    assert "single event" in page.locator("#timeline-note").inner_text()
    page.wait_for_function("(() => { const p = document.querySelector('#timeline .js-plotly-plot');"
                           " return p && p._fullData && p._fullData.length > 0; })()")
    assert page.errors == []


def test_an_empty_snapshot_shows_a_page_that_says_it_is_empty(page, site):
    open_snapshot(page, site, "hitsbe_empty.pickle")
    page.locator("#timeline-note").wait_for()
    assert "This snapshot is empty" in page.locator("#timeline-note").inner_text()
    assert "the snapshot is empty" in page.locator("#capture-health").inner_text()
    assert page.locator("#segment-map").count() == 0
    assert page.errors == []


def root_first_stacks(snap, device: int, show_all: bool) -> dict[tuple, int]:
    """Live bytes of the final state by stack, outermost frame first, filtered as the stack panel filters
    (user frames only; a stack without one whole) unless show_all; stacks without a user frame as one."""
    out: dict[tuple, int] = defaultdict(int)
    for b in live_blocks(snap.segments, device):
        if b.stack < 0:
            continue
        frames = [snap.frames[i] for i in reversed(snap.stacks[b.stack])]
        user = tuple(f for f in frames if is_user_frame(f))
        out[tuple(frames) if show_all else (user or ("internal",))] += b.size
    return dict(out)


def shared(stacks: list[tuple]) -> int:
    k = 0
    while all(len(s) > k for s in stacks) and len({s[k] for s in stacks}) == 1:
        k += 1
    return k


def short(f) -> str:
    return f"{os.path.basename(f.filename)}:{f.line} {f.name}"


def icicle(page) -> dict:
    return page.evaluate("(() => { const d = document.querySelector('#stack-icicle .js-plotly-plot').data[0];"
                         " return {labels: Array.from(d.labels), parents: Array.from(d.parents),"
                         " values: Array.from(d.values)}; })()")


def expect_icicle(stacks: dict[tuple, int]) -> tuple[str, set[str]]:
    """The root's label and the labels of the first level drawn, as the figure holds them (Plotly reads labels as
    HTML: "<module>" is written "&lt;module&gt;")."""
    k = shared(list(stacks))
    prefix = next(iter(stacks))[:k]
    via = " → ".join(map(short, prefix)) if k <= 2 else f"{short(prefix[0])} → … → {short(prefix[-1])}"
    first = {f"{s[k].name} ({os.path.basename(s[k].filename)}:{s[k].line})" for s in stacks if len(s) > k}
    return escape("all (via " + via + ")" if k else "all", quote=False), {escape(f, quote=False) for f in first}


def test_the_icicle_folds_the_shared_prefix_and_follows_the_frame_checkbox(page, site):
    snap = load_snapshot(real("verl_mempools_pending.pickle"))
    filtered, everything = root_first_stacks(snap, 0, False), root_first_stacks(snap, 0, True)
    assert ("internal",) not in filtered and 1 < len(filtered) < 60  # all drawn: the page draws the 60 largest
    root, first = expect_icicle(filtered)
    assert shared(list(filtered)) >= 3
    open_snapshot(page, site, "verl_mempools_pending.pickle")
    page.wait_for_function("(() => { const p = document.querySelector('#stack-icicle .js-plotly-plot');"
                           " return p && p.data && p.data.length > 0; })()", timeout=60000)
    ice = icicle(page)
    assert ice["labels"][0] == root and ice["values"][0] == sum(filtered.values())
    assert {label for label, parent in zip(ice["labels"], ice["parents"]) if parent == "root"} == first
    user = {escape(f"{f.name} ({os.path.basename(f.filename)}:{f.line})", quote=False) for s in filtered for f in s}
    assert set(ice["labels"][1:]) <= user  # no PyTorch-internal or C++ frame
    # with every frame shown, the icicle is drawn from whole stacks
    root_all, first_all = expect_icicle(everything)
    assert root_all != root
    page.check("#stack-all-frames input")
    page.wait_for_function("(root) => document.querySelector('#stack-icicle .js-plotly-plot').data[0].labels[0]"
                           " === root", arg=root_all)
    ice = icicle(page)
    assert {label for label, parent in zip(ice["labels"], ice["parents"]) if parent == "root"} == first_all
    assert page.errors == []


def test_without_stacks_the_icicle_says_why_and_how_to_record_them(page, site):
    snap = load_snapshot(real("cs336kk_notrace_75gb.pickle"))
    live = live_blocks(snap.segments, 0)
    assert live and all(b.stack < 0 for b in live)
    open_snapshot(page, site, "cs336kk_notrace_75gb.pickle")
    note = page.locator("#stack-icicle-note")
    note.locator("code").wait_for(timeout=60000)
    text = note.inner_text()
    assert f"None of the {len(live)} live blocks" in text
    assert "_record_memory_history(" in text and "stacks='all'" in text
    assert not page.locator("#stack-icicle").is_visible()
    assert page.errors == []


def test_stacks_of_only_internal_frames_are_one_box(page, site):
    snap = load_snapshot(real("hanmin_train_19k.pickle"))
    filtered = root_first_stacks(snap, 0, False)
    internal = filtered.pop(("internal",))
    open_snapshot(page, site, "hanmin_train_19k.pickle")
    page.wait_for_function("(() => { const p = document.querySelector('#stack-icicle .js-plotly-plot');"
                           " return p && p.data && p.data.length > 0; })()", timeout=60000)
    ice = icicle(page)
    values = dict(zip(ice["labels"], ice["values"]))
    assert values["(only PyTorch-internal and C++ frames)"] == internal
    assert not any(re.search(r"\.(cpp|h|cc|c):", label) or "??" in label for label in ice["labels"])
    bare = [b for b in live_blocks(snap.segments, 0) if b.stack < 0]
    assert f"{len(bare)} of the {len(live_blocks(snap.segments, 0))} live blocks" in \
        page.locator("#stack-icicle-note").inner_text()
    assert page.errors == []
