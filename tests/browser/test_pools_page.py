"""The snapshot page of a real file with private pools and pending frees, in a real browser."""
from __future__ import annotations

from tests.support.helpers import MiB, real
from fragviz.snapshot import read_raw
from tests.support.pages import upload, wait_for_state

VERL = real("verl_mempools_pending.pickle")


def test_segment_map_shows_pending_frees_and_private_pools(page, server):
    upload(page, server, VERL)  # one file: its page opens
    page.wait_for_url("**/snapshots/*")
    drawn = wait_for_state(page)
    assert "pending free" in drawn["kinds"]
    legend = page.locator("#segment-map .fv-map-legend").inner_text()
    assert "pending free" in legend
    ticks = [r["label"] for r in drawn["rows"]]
    assert any("pool (0, 2)" in t for t in ticks) and any("pool (0, 1)" in t for t in ticks)
    pending = sum(s["active_size"] - s["allocated_size"] for s in read_raw(VERL).data["segments"])
    page.wait_for_function("document.querySelector('#event-info').innerText.includes('active_pending_free')")
    info = page.locator("#event-info").inner_text()
    assert f"9 blocks ({pending / MiB:.2f} MiB) freed, waiting for stream work (active_pending_free)" in info
    assert "pool (0, 2)" in info and "private: general requests cannot use it" in info
    assert page.errors == []
