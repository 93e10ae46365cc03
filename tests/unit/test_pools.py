"""Private pools and pending frees, apart: per-pool figures, the report, the doctor's notes and the segment map,
on a real file with two private pools and pending frees, and on small hand-worked cases."""
from __future__ import annotations

import pickle
from collections import defaultdict

import pytest

from fragviz.replay.analysis import analyze
from fragviz.doctor import diagnose
from fragviz.doctor.pools import pool_notes, request_pool_at
from fragviz.model.metrics import GENERAL_POOL, pending_frees, pool_figures, pool_of
from fragviz.doctor.report import report_of, report_text
from fragviz.snapshot import load_snapshot, load_snapshot_bytes, read_raw
from fragviz.ui.figures.segments import segment_map_figure
from fragviz.ui.figures.style import COLORS
from tests.support.cases import case_a
from tests.support.helpers import MiB, block, ev, real, segment, snapshot

VERL = real("verl_mempools_pending.pickle")
G = 0x7F00_0000_0000
P3 = G + 0x1000_0000
P10 = G + 0x2000_0000
MESSAGE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 MiB. GPU 0 has a total capacity of "
           "79.10 GiB of which 4.00 MiB is free.")


def in_pool(seg: dict, pool: tuple[int, int]) -> dict:
    seg["segment_pool_id"] = pool
    return seg


def three_pools() -> dict:
    """The general pool: one 20 MiB segment with gaps of 8 and 4 MiB and a 2 MiB pending free. Private pool (0, 3):
    40 MiB with one 30 MiB gap (larger than any general gap). Private pool (1, 0): a small segment, fully allocated."""
    general = segment(G, [block(G, 4 * MiB), block(G + 4 * MiB, 8 * MiB, "inactive", 0),
                          block(G + 12 * MiB, 2 * MiB, "active_pending_free"), block(G + 14 * MiB, 2 * MiB),
                          block(G + 16 * MiB, 4 * MiB, "inactive", 0)])
    private = in_pool(segment(P3, [block(P3, 10 * MiB), block(P3 + 10 * MiB, 30 * MiB, "inactive", 0)]), (0, 3))
    graph = in_pool(segment(P10, [block(P10, 2 * MiB)], pool="small"), (1, 0))
    return snapshot([graph, private, general])


def analysed(data: dict):
    return analyze(load_snapshot_bytes(pickle.dumps(data), "case.pickle"))


# -- hand-worked cases --------------------------------------------------------------------------------------

def test_pool_figures_keep_the_pools_apart_general_first():
    segs = load_snapshot_bytes(pickle.dumps(three_pools()), "case.pickle").segments_of(0)
    pools = pool_figures(list(segs))
    assert [p.pool for p in pools] == [(0, 0), (0, 3), (1, 0)]
    general, private, graph = pools
    # general: 20 MiB; active 4 + 2 (pending) + 2 = 8; gaps 8 and 4
    assert (general.reserved_bytes, general.allocated_bytes, general.free_bytes, general.free_blocks,
            general.largest_free_block) == (20 * MiB, 8 * MiB, 12 * MiB, 2, 8 * MiB)
    # every free byte of a segment holding live blocks is non-releasable: 12 of 20 MiB
    assert (general.non_releasable_bytes, general.fragmentation) == (12 * MiB, pytest.approx(12 / 20))
    assert general.free_scatter == pytest.approx(1 - 8 / 12)
    assert (general.pending_free_bytes, general.pending_free_blocks) == (2 * MiB, 1)
    assert (private.reserved_bytes, private.allocated_bytes, private.free_bytes, private.largest_free_block,
            private.fragmentation, private.free_scatter) == (40 * MiB, 10 * MiB, 30 * MiB, 30 * MiB, 0.75, 0.0)
    assert (graph.reserved_bytes, graph.allocated_bytes, graph.free_bytes, graph.fragmentation) == (2 * MiB, 2 * MiB,
                                                                                                   0, 0.0)
    assert not general.is_private and private.is_private and graph.is_private
    assert pool_of(list(segs)) == general and pool_of(list(segs), (0, 7)).reserved_bytes == 0
    assert pending_frees(list(segs)) == pending_frees([s for s in segs if s.address == G])


def test_report_json_adds_pools_and_pending_and_keeps_device_totals():
    d = report_of(analysed(three_pools())).devices[0]
    assert d.as_dict()["pools"] == [  # the pools in `fragviz report --json`
        {"pool": [0, 0], "reserved_bytes": 20 * MiB, "allocated_bytes": 8 * MiB, "free_bytes": 12 * MiB,
         "largest_free_block": 8 * MiB, "non_releasable_bytes": 12 * MiB, "fragmentation": pytest.approx(0.6),
         "free_scatter": pytest.approx(1 / 3)},
        {"pool": [0, 3], "reserved_bytes": 40 * MiB, "allocated_bytes": 10 * MiB, "free_bytes": 30 * MiB,
         "largest_free_block": 30 * MiB, "non_releasable_bytes": 30 * MiB, "fragmentation": 0.75,
         "free_scatter": 0.0},
        {"pool": [1, 0], "reserved_bytes": 2 * MiB, "allocated_bytes": 2 * MiB, "free_bytes": 0,
         "largest_free_block": 0, "non_releasable_bytes": 0, "fragmentation": 0.0, "free_scatter": 0.0},
    ]
    assert (d.pending_free_bytes, d.pending_free_blocks) == (2 * MiB, 1)
    # device-level figures stay every pool together (reserved = allocated + free; 1 - largest / free)
    assert (d.reserved_bytes, d.allocated_bytes, d.free_bytes, d.free_blocks) == (62 * MiB, 20 * MiB,
                                                                                  42 * MiB, 3)
    assert (d.largest_free_block, d.free_scatter) == (30 * MiB, pytest.approx(1 - 30 / 42))
    assert (d.non_releasable_bytes, d.fragmentation) == (42 * MiB, pytest.approx(42 / 62))


def test_text_report_names_private_pools_pending_frees_and_room_for_a_general_request():
    text = report_text(analysed(three_pools()))
    assert "the largest request the cache can serve now 30.00 MiB; free scatter 28.6% (all pools)" in text
    assert "fragmentation  67.7%      non-releasable 42.00 MiB of 62.00 MiB reserved" in text
    assert "the largest gap lies in a private pool: a general request fits in at most 8.00 MiB" in text
    assert "pool (0, 0)" in text and "the general pool" in text
    assert text.count("a private pool (CUDA graph or torch.cuda.MemPool); general requests cannot use its free "
                      "memory") == 2
    assert "pool (1, 0)     2.00 MiB  in 1 segment, fully allocated" in text
    assert ("pending free 1 block (2.00 MiB) in pool (0, 0) freed but waiting for other streams "
            "(active_pending_free): they return to the cache when those streams' work completes") in text
    assert "pending frees included" in text


def test_a_snapshot_from_before_pool_ids_has_only_the_general_pool():
    seg = segment(G, [block(G, 2 * MiB), block(G + 2 * MiB, 18 * MiB, "inactive", 0)])
    del seg["segment_pool_id"]
    data = snapshot([seg])
    assert load_snapshot_bytes(pickle.dumps(data), "old.pickle").segments[0].pool_id is None
    d = report_of(analysed(data)).devices[0]
    assert d.as_dict()["pools"] == [{"pool": [0, 0], "reserved_bytes": 20 * MiB, "allocated_bytes": 2 * MiB,
                                     "free_bytes": 18 * MiB, "largest_free_block": 18 * MiB,
                                     "non_releasable_bytes": 18 * MiB, "fragmentation": 0.9, "free_scatter": 0.0}]
    text = report_text(analysed(data))
    assert "pool (" not in text and "all pools" not in text and "pending" not in text


def test_a_past_state_counts_the_pending_free_the_trace_left():
    # case_a after 5 events: the 3 MiB - 100 request (a 3 MiB block) is freed but not yet completed
    d = report_of(analysed(case_a()), at=5).devices[0]
    assert (d.pending_free_blocks, d.pending_free_bytes) == (1, 3 * MiB)
    assert d.pools[0].allocated_bytes == 4 * MiB + 3 * MiB + 2 * MiB
    assert report_of(analysed(case_a()), at=0).devices[0].pools == ()


def test_doctor_notes_name_private_pools_and_pending_frees():
    a = analysed(three_pools())
    (oom,) = diagnose(a, MESSAGE)
    private, pending = oom.notes
    assert "Private pools hold 42.00 MiB of the 62.00 MiB reserved" in private
    assert "pool (0, 3) 40.00 MiB with 30.00 MiB free, largest free block 30.00 MiB" in private
    assert "pool (1, 0) 2.00 MiB, fully allocated" in private
    assert "general pool's 12.00 MiB cached free (largest free block 8.00 MiB)" in private
    assert pending.startswith("1 block (2.00 MiB) was freed by the program but waits for work on other streams "
                              "(active_pending_free")


def test_doctor_notes_of_a_trace_oom_read_the_state_before_it():
    data = three_pools()
    data["device_traces"] = [[ev("oom", 0, 16 * MiB, device_free=4 * MiB)]]
    a = analysed(data)
    (oom,) = diagnose(a, simulate=False)
    assert oom.event == 0 and len(oom.notes) == 2
    room = request_pool_at(a, 0, 0)
    assert (room.pool, room.free_bytes, room.largest_free_block) == (GENERAL_POOL, 12 * MiB, 8 * MiB)
    assert request_pool_at(a, 0, None, (0, 3)).largest_free_block == 30 * MiB
    assert request_pool_at(a, 5, None) is None


def test_no_notes_without_private_pools_or_pending_frees():
    seg = segment(G, [block(G, 2 * MiB), block(G + 2 * MiB, 18 * MiB, "inactive", 0)])
    (oom,) = diagnose(analysed(snapshot([seg])), MESSAGE)
    assert oom.notes == ()


def test_segment_map_labels_private_pools_and_says_what_pending_frees_wait_for():
    segs = list(load_snapshot_bytes(pickle.dumps(three_pools()), "case.pickle").segments_of(0))
    fig = segment_map_figure(segs, lambda stack: "")
    traces = {t.name: t for t in fig.data}
    pending = traces["pending free"]
    assert pending.marker.color == COLORS["pending"] != traces["allocated"].marker.color
    assert len(pending.hovertext) == 1
    assert pending.hovertext[0].startswith("freed, waiting for stream work (active_pending_free): 2.00 MiB")
    rows = set(traces["allocated"].y)
    assert f"large·s0·pool (0, 3) {P3:#x}" in rows and f"small·s0·pool (1, 0) {P10:#x}" in rows
    assert f"large·s0 {G:#x}" in rows
    private_hover = [h for h in traces["free"].hovertext if "private pool (0, 3)" in h]
    assert len(private_hover) == 1 and "general requests cannot use it" in private_hover[0]


# -- the real file: vLLM's KV cache in a private pool, Megatron in the general pool, pending frees --------------

def raw_pools() -> dict[tuple[int, int], dict[str, int]]:
    """Per-pool figures walked from the raw unpickled segments, from PyTorch's own per-segment counters where it
    writes them (active_size: allocated + pending; allocated_size: allocated only)."""
    out: dict[tuple[int, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for seg in read_raw(VERL).data["segments"]:
        p = out[tuple(seg["segment_pool_id"])]
        p["segments"] += 1
        p["reserved"] += seg["total_size"]
        p["active"] += seg["active_size"]
        p["pending"] += seg["active_size"] - seg["allocated_size"]
        free = [b["size"] for b in seg["blocks"] if b["state"] == "inactive"]
        p["free"] += sum(free)
        p["largest"] = max([p["largest"], *free])
        if seg["active_size"] > 0:  # a segment holding an active block cannot be released: its free bytes stay
            p["stuck"] += sum(free)
        p["pending_blocks"] += sum(b["state"] == "active_pending_free" for b in seg["blocks"])
    return out


@pytest.fixture(scope="module")
def verl():
    return analyze(load_snapshot(VERL))


def test_real_file_pools_match_the_raw_segments(verl):
    want = raw_pools()
    assert {p: w["segments"] for p, w in want.items()} == {(0, 0): 59, (0, 1): 44, (0, 2): 24}
    d = report_of(verl).devices[0]
    assert [p.pool for p in d.pools] == [(0, 0), (0, 1), (0, 2)]
    for got in d.pools:
        w = want[got.pool]
        assert got.reserved_bytes == w["reserved"] == w["active"] + w["free"]
        assert (got.allocated_bytes, got.free_bytes, got.largest_free_block) == (w["active"], w["free"],
                                                                                           w["largest"])
        assert got.free_scatter == pytest.approx(1 - w["largest"] / w["free"] if w["free"] else 0.0)
        assert got.non_releasable_bytes == w["stuck"]
        assert got.fragmentation == pytest.approx(w["stuck"] / w["reserved"])
    kv = d.pools[2]
    assert kv.free_bytes == 0 and kv.reserved_bytes > 20 * 2**30  # the KV cache: 21.8 GB, fully allocated
    assert sum(p.reserved_bytes for p in d.pools) == d.reserved_bytes


def test_real_file_pending_frees(verl):
    want = raw_pools()
    d = report_of(verl).devices[0]
    assert (d.pending_free_blocks, d.pending_free_bytes) == (9, want[(0, 0)]["pending"])
    assert want[(0, 0)]["pending_blocks"] == 9 and round(want[(0, 0)]["pending"] / MiB) == 570
    assert want[(0, 1)]["pending"] == want[(0, 2)]["pending"] == 0
    text = report_text(verl)
    shown = f"{want[(0, 0)]['pending'] / MiB:.2f} MiB"
    assert f"pending free 9 blocks ({shown}) in pool (0, 0) freed but waiting for other streams" in text
    assert "pool (0, 2)" in text and "fully allocated" in text


def test_real_file_doctor_notes(verl):
    want = raw_pools()
    (oom,) = diagnose(verl, MESSAGE)
    private = oom.notes[0]
    held = want[(0, 1)]["reserved"] + want[(0, 2)]["reserved"]
    assert f"Private pools hold {held / 2**30:.2f} GiB" in private
    assert f"general pool's {want[(0, 0)]['free'] / MiB:.2f} MiB cached free" in private
    assert oom.notes[1].startswith(f"9 blocks ({want[(0, 0)]['pending'] / MiB:.2f} MiB) were freed")
    assert tuple(pool_notes(list(verl.snapshot.segments_of(0)))) == oom.notes
