"""Replay on small traces whose every state was worked out by hand."""
from __future__ import annotations

import pickle

import pytest

from fragviz.replay.analysis import analyze
from fragviz.model.metrics import fragmentation
from fragviz.model import BlockState
from fragviz.snapshot import load_snapshot_bytes
from tests.support.cases import S, case_a
from tests.support.helpers import MiB, block, ev, segment, snapshot


def analysed(data: dict):
    return analyze(load_snapshot_bytes(pickle.dumps(data), "case.pickle"))


def problems(analysis) -> list[str]:
    """Warnings other than the capture-health note that these hand-made cases record no stacks."""
    return [w for w in analysis.warnings if "no stacks were recorded" not in w]


# State after K events, K = 0..8: (allocated, requested, reserved, free gaps, largest gap), in MiB
# (requested in bytes where the 100-byte difference shows).
CASE_A_SERIES = [
    (0, 0, 0, 0, 0),
    (0, 0, 20, 1, 20),
    (4, 4 * MiB, 20, 1, 16),
    (7, 7 * MiB - 100, 20, 1, 13),
    (9, 9 * MiB - 100, 20, 1, 11),
    (9, 9 * MiB - 100, 20, 1, 11),  # free_requested: still active (pending), nothing merges
    (6, 6 * MiB, 20, 2, 11),        # gaps [4, 7) and [9, 20)
    (6, 6 * MiB, 20, 2, 11),
    (4, 4 * MiB, 20, 1, 16),        # [4, 20) merged
]


def test_series_after_every_event():
    replay = analysed(case_a()).replays[0]
    got = list(zip(*(replay.series[k].tolist() for k in
                     ("allocated", "requested", "reserved", "free_gaps", "largest_gap"))))
    expected = [(a * MiB, r, s * MiB, g, l * MiB) for a, r, s, g, l in CASE_A_SERIES]
    assert got == expected
    frag = replay.fragmentation_series()
    assert frag[6] == pytest.approx(14 / 20)  # 14 MiB free, all of it pinned by the live blocks, of 20 reserved
    assert frag[0] == 0.0 and frag[1] == 0.0


def test_past_states_block_by_block():
    replay = analysed(case_a()).replays[0]
    layout = [(b.address - S, b.size, b.state) for b in replay.segments_at(6)[0].blocks]
    assert layout == [(0, 4 * MiB, BlockState.ACTIVE_ALLOCATED), (4 * MiB, 3 * MiB, BlockState.INACTIVE),
                      (7 * MiB, 2 * MiB, BlockState.ACTIVE_ALLOCATED), (9 * MiB, 11 * MiB, BlockState.INACTIVE)]
    pending = replay.segments_at(5)[0].blocks[1]
    assert (pending.size, pending.requested_size, pending.state) == (3 * MiB, 3 * MiB - 100,
                                                                     BlockState.ACTIVE_PENDING_FREE)
    assert replay.segments_at(0) == []
    fig = replay.figures_at(6)
    assert (fig.free_bytes, fig.free_blocks, fig.largest_free_block) == (14 * MiB, 2, 11 * MiB)
    assert fig.free_scatter == pytest.approx(1 - 11 / 14)
    assert (fig.non_releasable_bytes, fig.fragmentation) == (14 * MiB, pytest.approx(14 / 20))


def test_final_replayed_state_is_the_recorded_one():
    analysis = analysed(case_a())
    assert problems(analysis) == []
    replayed, recorded = analysis.replays[0].segments_at(8), analysis.snapshot.segments_of(0)
    assert [(s.address, s.total_size, s.blocks) for s in replayed] == \
        [(s.address, s.total_size, s.blocks) for s in recorded]


def test_trace_that_starts_mid_run_is_undone_to_its_start():
    data = case_a()
    data["device_traces"] = [data["device_traces"][0][5:]]  # only the last three events were kept
    analysis = analysed(data)
    replay = analysis.replays[0]
    assert (replay.pre_trace_blocks, replay.pre_trace_segments) == (3, 1)
    start = replay.figures_at(0)
    # B1 (4 MiB, live at the end), B2 pending (3 MiB - 100 requested), B3 (2 MiB), one gap [9, 20)
    assert (start.allocations, start.requested_bytes, start.allocated_bytes) == (3, 9 * MiB - 100, 9 * MiB)
    assert (start.free_blocks, start.largest_free_block) == (1, 11 * MiB)
    states = [b.state for b in replay.segments_at(0)[0].blocks]
    assert states[1] is BlockState.ACTIVE_PENDING_FREE and states[2] is BlockState.ACTIVE_ALLOCATED
    assert any("covers only the last 3 events" in w and "3 blocks and 1 segments" in w for w in analysis.warnings)


def test_unsplit_large_block_keeps_the_remainder():
    # 19.5 MiB into a fresh 20 MiB segment: 0.5 MiB left is not > 1 MiB, so the block is the whole segment.
    final = segment(S, [block(S, 20 * MiB, "inactive", 0)])
    trace = [ev("segment_alloc", S, 20 * MiB), ev("alloc", S, 19 * MiB + MiB // 2),
             ev("free_requested", S, 19 * MiB + MiB // 2), ev("free_completed", S, 19 * MiB + MiB // 2)]
    replay = analysed(snapshot([final], trace)).replays[0]
    assert replay.block_size[1] == 20 * MiB
    assert replay.figures_at(2).free_blocks == 0
    assert replay.figures_at(2).allocated_bytes == 20 * MiB


def case_expandable() -> dict:
    final = segment(S + 20 * MiB, [block(S + 20 * MiB, 5 * MiB, "inactive", 0), block(S + 25 * MiB, 10 * MiB),
                                   block(S + 35 * MiB, 5 * MiB, "inactive", 0)], expandable=True)
    trace = [
        ev("segment_map", S, 40 * MiB),
        ev("alloc", S, 25 * MiB),
        ev("alloc", S + 25 * MiB, 10 * MiB),
        ev("free_requested", S, 25 * MiB),
        ev("free_completed", S, 25 * MiB),
        ev("segment_unmap", S, 20 * MiB),
    ]
    return snapshot([final], trace, allocator_settings={"expandable_segments": True})


def test_expandable_segments_map_and_unmap():
    analysis = analysed(case_expandable())
    assert problems(analysis) == []
    replay = analysis.replays[0]
    s = replay.series
    assert s["reserved"].tolist() == [0, 40 * MiB, 40 * MiB, 40 * MiB, 40 * MiB, 40 * MiB, 20 * MiB]
    assert s["free_gaps"].tolist() == [0, 1, 1, 1, 1, 2, 2]
    assert s["largest_gap"].tolist() == [0, 40 * MiB, 15 * MiB, 5 * MiB, 5 * MiB, 25 * MiB, 5 * MiB]
    seg = replay.segments_at(6)[0]
    assert (seg.address, seg.total_size, seg.is_expandable) == (S + 20 * MiB, 20 * MiB, True)
    before_unmap = replay.segments_at(5)
    assert [(x.address, x.total_size) for x in before_unmap] == [(S, 40 * MiB)]


def test_unmap_splits_a_mapped_range_in_two():
    final = [segment(S, [block(S, 20 * MiB)], expandable=True),
             segment(S + 40 * MiB, [block(S + 40 * MiB, 20 * MiB)], expandable=True)]
    trace = [ev("segment_unmap", S + 20 * MiB, 20 * MiB)]
    replay = analysed(snapshot(final, trace)).replays[0]
    assert [(x.address - S, x.total_size) for x in replay.segments_at(0)] == [(0, 60 * MiB)]
    assert replay.figures_at(0).free_blocks == 1 and replay.figures_at(0).largest_free_block == 20 * MiB


def test_pending_frees_and_several_streams():
    a, b = S, S + 100 * MiB
    final = [segment(a, [block(a, 2 * MiB, "active_pending_free", 2 * MiB - 7), block(a + 2 * MiB, 18 * MiB,
                                                                                      "inactive", 0)]),
             segment(b, [block(b, 1024, requested=1000), block(b + 1024, 2 * MiB - 1024, "inactive", 0)],
                     stream=0x55AA, pool="small")]
    trace = [ev("segment_alloc", a, 20 * MiB), ev("alloc", a, 2 * MiB - 7),
             ev("segment_alloc", b, 2 * MiB, stream=0x55AA), ev("alloc", b, 1000, stream=0x55AA),
             ev("free_requested", a, 2 * MiB - 7)]
    analysis = analysed(snapshot(final, trace))
    assert problems(analysis) == []
    replay = analysis.replays[0]
    seg_b = replay.segments_at(4)[1]
    assert (seg_b.stream, seg_b.pool, seg_b.blocks[0].size) == (0x55AA, "small", 1024)
    assert replay.segments_at(5)[0].blocks[0].state is BlockState.ACTIVE_PENDING_FREE
    assert replay.segments_at(4)[0].blocks[0].state is BlockState.ACTIVE_ALLOCATED
    assert replay.figures_at(5).allocated_bytes == 2 * MiB + 1024


def test_inconsistent_trace_warns_and_never_goes_negative():
    final = segment(S, [block(S, 20 * MiB, "inactive", 0)])
    trace = [ev("free_completed", S + 400 * MiB, 8 * MiB), ev("alloc", S, 1 * MiB)]  # frees memory never held
    analysis = analysed(snapshot([final], trace))
    text = " | ".join(analysis.warnings)
    assert "lie on no segment" in text
    assert "neither freed later nor in the final segments" in text
    series = analysis.replays[0].series
    assert min(series["allocated"].min(), series["requested"].min(), series["reserved"].min()) >= 0


def test_fragmentation_definition():
    assert fragmentation(0, 0) == 0.0
    assert fragmentation(10, 10) == 1.0
    assert fragmentation(3, 14) == pytest.approx(3 / 14)
