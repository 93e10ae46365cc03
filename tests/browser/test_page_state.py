"""The page's own states (assets/lives.js) against the server's, in Chromium: on every real snapshot and bundled
sample, each device's lives decoded in the page give, at the ends, around each checkpoint and at random events,
the segments and blocks that GET /api/snapshots/<id>/state gives and the same figures; the line of figures the
page writes is the one the server writes. A trace over page_state_events is refused, and the page says so."""
from __future__ import annotations

import glob
import os
import random
import subprocess
import sys

import pytest

from fragviz.base.units import counted, format_bytes as fb
from fragviz.model.metrics import pending_frees, pool_figures
from fragviz.replay.engine import CHECKPOINT_EVERY
from tests.support.helpers import REAL, ROOT
from tests.support.pages import wait_for_state
from tests.support.server import Server

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
FILES = sorted(glob.glob(os.path.join(REAL, "*.pickle"))) + sorted(
    glob.glob(os.path.join(ROOT, "sample_snapshots", "*.pickle.gz")))
FIGURES = {"reserved_bytes": "reserved", "allocated_bytes": "allocated", "requested_bytes": "requested",
           "free_bytes": "free", "largest_free_block": "largest", "non_releasable_bytes": "nonReleasable",
           "fragmentation": "fragmentation", "free_scatter": "freeScatter"}

# In the page: each chosen event's state from the lives and from the server, side by side, as plain data
COMPARE = """async ([sid, device, events, names]) => {
    const answer = await fetch(`/api/snapshots/${sid}/devices/${device}/lives`);
    if (answer.status !== 200) return {status: answer.status};
    const lives = fragviz.lives.decode(await answer.arrayBuffer());
    const out = [];
    for (const k of events) {
        const state = fragviz.lives.stateAt(lives, k);
        const f = fragviz.lives.figures(state);
        const server = await (await fetch(`/api/snapshots/${sid}/state?device=${device}&event=${k}`)).json();
        const mine = state.map((s) => ({address: s.address, total_size: s.size, stream: s.stream, pool: s.pool,
            is_expandable: s.expandable, pool_id: s.poolId, stack: s.stack, blocks: s.blocks.map((b) => ({address: b.address, size: b.size,
            requested_size: b.requested, state: b.state, stack: b.stack}))}));
        const figures = {};
        for (const [py, js] of names) figures[py] = f[js];
        out.push({event: k, mine: mine, theirs: server.segments, figures: figures, server: server,
                  line: fragviz.lives.eventInfo(k, lives.states - 1, f)});
    }
    return {status: 200, states: lives.states, compared: out};
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory, real_dir):
    db = str(tmp_path_factory.mktemp("page_state") / "store.sqlite")
    done = subprocess.run([FRAGVIZ, "ingest", "--db", db, "--no-progress", "--json", *FILES], capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    srv = Server(db, samples=False, env={"FRAGVIZ_PAGE_STATE_EVENTS": "60000"})
    yield srv
    srv.stop()


def event_info(event: int, n: int, fig, segments) -> str:
    """The line above the segment map, written here from the server's stored state and figures: what the page
    must write from its own."""
    line = (f"after {event} of {n} events · reserved {fb(fig.reserved_bytes)} · allocated "
            f"{fb(fig.allocated_bytes)} · fragmentation {fig.fragmentation:.1%} (non-releasable "
            f"{fb(fig.non_releasable_bytes)}) · largest request the cache can serve now "
            f"{fb(fig.largest_free_block)} · cached free {fb(fig.free_bytes)} in {counted(fig.free_blocks, 'gap')}, "
            f"free scatter {fig.free_scatter:.1%}")
    pools = pool_figures(segments)
    if any(p.is_private for p in pools):
        line += " · those figures cover all pools: " + "; ".join(
            f"pool ({p.pool[0]}, {p.pool[1]}) {fb(p.reserved_bytes)} with {fb(p.free_bytes)} free"
            + (" (private: general requests cannot use it)" if p.is_private else " (general)") for p in pools)
    pending = pending_frees(segments)
    if pending.blocks:
        line += (f" · {counted(pending.blocks, 'block')} ({fb(pending.bytes)}) freed, waiting for stream work "
                 "(active_pending_free), counted as allocated")
    return line


def events_to_check(n: int, rng: random.Random) -> list[int]:
    chosen = {0, 1, n - 1, n} | {rng.randrange(n + 1) for _ in range(8)}
    for c in range(CHECKPOINT_EVERY, n + 1, CHECKPOINT_EVERY):
        chosen |= {c - 1, c, c + 1}
    return sorted(k for k in chosen if 0 <= k <= n)


def test_the_page_rebuilds_the_server_s_state_on_every_real_snapshot(server, page):
    page.goto(server.url + "/")
    page.wait_for_function("() => window.fragviz && window.fragviz.lives")
    planned = checked = 0
    for row in server.get_json("/api/snapshots"):
        rng = random.Random(row["name"])
        for device in row["devices"]:
            n = server.get_json(f"/api/snapshots/{row['id']}/state?device={device}")["event"]
            if n > 60000:
                continue
            events = events_to_check(n, rng)
            planned += len(events)
            got = page.evaluate(COMPARE, [row["id"], device, events, list(FIGURES.items())])
            assert got["status"] == 200 and got["states"] == n + 1, (row["name"], got.get("status"))
            for each in got["compared"]:
                where = f"{row['name']} device {device} event {each['event']}"
                assert each["mine"] == each["theirs"], where
                for name, value in each["figures"].items():
                    assert value == pytest.approx(each["server"][name], rel=1e-12, abs=1e-12), (where, name)
                checked += 1
    assert checked == planned > 150
    assert page.errors == []


def test_the_page_s_line_of_figures_is_the_server_s(server, page):
    """The line above the segment map, written by the page from its own figures and by the server's
    from the stored state, on files with private pools, pending frees and expandable segments."""
    page.goto(server.url + "/")
    page.wait_for_function("() => window.fragviz && window.fragviz.lives")
    from fragviz.library import Library

    reader = Library.open(server.db)
    try:
        for row in server.get_json("/api/snapshots"):
            if row["name"].rsplit("/", 1)[-1] not in ("verl_mempools_pending.pickle", "hanmin_train_19k.pickle",
                                                      "gpt_train_expandable.pickle.gz", "sqattn_segment_free.pickle"):
                continue
            device = row["devices"][0]
            n = reader.trace_length(row["id"], device)
            events = sorted(k for k in {0, n // 4, n // 2, n - 1, n} if k >= 0)
            got = page.evaluate(COMPARE, [row["id"], device, events, []])
            for each in got["compared"]:
                segments, figures, k = reader.device_state(row["id"], device, each["event"])
                expected = event_info(k, n, figures, segments)
                assert each["line"] == expected, row["name"]
    finally:
        reader.close()


def test_a_trace_over_the_budget_is_refused_to_the_page(server, page):
    from fragviz.library import Library

    page.goto(server.url + "/")
    row = next(r for r in server.get_json("/api/snapshots") if r["name"].endswith("hanmin_train_19k.pickle"))
    status = page.evaluate("async (sid) => (await fetch(`/api/snapshots/${sid}/devices/0/lives`)).status", row["id"])
    assert status == 200
    small = Server(server.db, samples=False, env={"FRAGVIZ_PAGE_STATE_EVENTS": "1000"})
    try:
        page.goto(small.url + "/")
        answer = page.evaluate("async (sid) => { const r = await fetch(`/api/snapshots/${sid}/devices/0/lives`);"
                               " return [r.status, (await r.json()).error]; }", row["id"])
        assert answer[0] == 413 and "over page_state_events (1,000)" in answer[1]
        # the snapshot page draws its states from the server's instead, the same line of figures
        n = small.get_json(f"/api/snapshots/{row['id']}/state?device=0")["event"]
        page.goto(f"{small.url}/snapshots/{row['id']}?device=0&event=500")
        for k in (500, 501):
            drawn = wait_for_state(page, k)
            reader = Library.open(server.db)
            try:
                segments, figures, _ = reader.device_state(row["id"], 0, k)
            finally:
                reader.close()
            assert drawn["info"] == event_info(k, n, figures, segments) and drawn["segments"] == len(segments)
            page.click("#next-event")
        asked = page.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
        assert not any(a.endswith("/lives") for a in asked), asked
        assert any("/state?device=0&event=501" in a for a in asked)
        assert [e for e in page.errors if "status of 413" not in e] == []  # the one this test asked for
    finally:
        small.stop()
