"""The headline fragmentation figure: non-releasable bytes (free memory `torch.cuda.empty_cache()` could not give
back) over reserved bytes, worked out by hand on small states, in the replay's series after every event, in the
allocator simulator, and on a constructed fragmentation OOM against a healthy run."""
from __future__ import annotations

import pickle

import pytest

from fragviz.allocator.config import AllocatorSettings, parse_alloc_conf
from fragviz.allocator.sim import DeviceAllocator
from fragviz.allocator.state import snapshot_dict
from fragviz.replay.analysis import analyze
from fragviz.model.metrics import fragmentation, free_scatter, state_figures, stuck_in_gap
from fragviz.snapshot import load_snapshot_bytes
from tests.support.helpers import MiB, block, ev, segment, snapshot

S = 0x7F00_0000_0000


def figures(segments: list[dict]):
    snap = load_snapshot_bytes(pickle.dumps(snapshot(segments, [])), "case.pickle")
    return state_figures(snap.segments_of(0))


def test_an_ordinary_segment_is_stuck_only_while_it_holds_an_active_block():
    live = figures([segment(S, [block(S, 4 * MiB), block(S + 4 * MiB, 16 * MiB, "inactive", 0)])])
    assert (live.non_releasable_bytes, live.fragmentation) == (16 * MiB, pytest.approx(16 / 20))
    whole_free = figures([segment(S, [block(S, 20 * MiB, "inactive", 0)])])
    assert (whole_free.non_releasable_bytes, whole_free.fragmentation) == (0, 0.0)
    assert whole_free.free_scatter == 0.0  # one gap
    pending = figures([segment(S, [block(S, 2 * MiB, "active_pending_free"), block(S + 2 * MiB, 18 * MiB, "inactive", 0)])])
    assert pending.non_releasable_bytes == 18 * MiB  # a pending free is still active: the segment cannot go


def test_a_healthy_cache_of_whole_free_segments_has_no_fragmentation_but_high_scatter():
    segs = [segment(S + i * 40 * MiB, [block(S + i * 40 * MiB, 20 * MiB, "inactive", 0)]) for i in range(9)]
    segs.append(segment(S + 9 * 40 * MiB, [block(S + 9 * 40 * MiB, 20 * MiB)]))
    fig = figures(segs)
    assert fig.fragmentation == 0.0
    assert fig.free_scatter == pytest.approx(1 - 20 / 180)  # what the old headline read: 89 %
    assert fig.largest_free_block == 20 * MiB


def test_an_expandable_segment_keeps_only_the_partial_pages_at_a_free_blocks_ends():
    # Large-pool pages are 20 MiB from the mapped range's start: [0, 5) | live [5, 15) | free [15, 60)
    seg = segment(S, [block(S, 5 * MiB, "inactive", 0), block(S + 5 * MiB, 10 * MiB),
                      block(S + 15 * MiB, 45 * MiB, "inactive", 0)], expandable=True)
    fig = figures([seg])
    # [0, 5): no whole page; [15, 60): pages [20, 40) and [40, 60) unmap, [15, 20) stays
    assert fig.non_releasable_bytes == 5 * MiB + 5 * MiB
    small = segment(S, [block(S, 512), block(S + 512, 2 * MiB - 512, "inactive", 0),
                        block(S + 2 * MiB, 2 * MiB, "inactive", 0)], pool="small", expandable=True)
    # a 2 MiB page: the free run [512, 4 MiB) holds one whole page, [2, 4) MiB
    assert figures([small]).non_releasable_bytes == 2 * MiB - 512


def test_stuck_in_gap_rounds_in_to_whole_pages():
    page = 20 * MiB
    assert stuck_in_gap(0, 60 * MiB, 0, page) == 0
    assert stuck_in_gap(MiB, 60 * MiB, 0, page) == 19 * MiB
    assert stuck_in_gap(MiB, 39 * MiB, 0, page) == 38 * MiB  # it crosses a page boundary but holds no whole page
    assert stuck_in_gap(21 * MiB, 45 * MiB, MiB, page) == 4 * MiB  # pages from 1 MiB: [21, 41) unmaps
    assert stuck_in_gap(3 * MiB, 7 * MiB, 0, page) == 4 * MiB


def test_the_figures_definitions():
    assert fragmentation(0, 0) == 0.0
    assert fragmentation(5, 20) == 0.25
    assert free_scatter(0, 0) == 0.0
    assert free_scatter(14, 11) == pytest.approx(3 / 14)


def replayed(data: dict):
    return analyze(load_snapshot_bytes(pickle.dumps(data), "case.pickle")).replays[0]


def test_the_series_after_every_event_of_an_ordinary_segment():
    final = segment(S, [block(S, 4 * MiB), block(S + 4 * MiB, 16 * MiB, "inactive", 0)])
    trace = [ev("segment_alloc", S, 20 * MiB), ev("alloc", S, 4 * MiB), ev("alloc", S + 4 * MiB, 3 * MiB - 100),
             ev("alloc", S + 7 * MiB, 2 * MiB), ev("free_requested", S + 4 * MiB, 3 * MiB - 100),
             ev("free_completed", S + 4 * MiB, 3 * MiB - 100), ev("free_requested", S + 7 * MiB, 2 * MiB),
             ev("free_completed", S + 7 * MiB, 2 * MiB)]
    replay = replayed(snapshot([final], trace))
    # a fresh segment is whole and free (0), then its free bytes are stuck behind the live blocks
    assert replay.series["non_releasable"].tolist() == [x * MiB for x in (0, 0, 16, 13, 11, 11, 14, 14, 16)]
    assert replay.fragmentation_series().tolist() == pytest.approx([x / 20 for x in (0, 0, 16, 13, 11, 11, 14, 14, 16)])


def test_the_series_after_every_event_of_an_expandable_segment():
    final = segment(S + 20 * MiB, [block(S + 20 * MiB, 5 * MiB, "inactive", 0), block(S + 25 * MiB, 10 * MiB),
                                   block(S + 35 * MiB, 5 * MiB, "inactive", 0)], expandable=True)
    trace = [ev("segment_map", S, 40 * MiB), ev("alloc", S, 25 * MiB), ev("alloc", S + 25 * MiB, 10 * MiB),
             ev("free_requested", S, 25 * MiB), ev("free_completed", S, 25 * MiB), ev("segment_unmap", S, 20 * MiB)]
    replay = replayed(snapshot([final], trace, allocator_settings={"expandable_segments": True}))
    # mapped [0, 40) free: both pages unmap (0); live [0, 25): [25, 40) is in no whole page (15); live [25, 35):
    # [35, 40) (5); [0, 25) freed: page [0, 20) unmaps, [20, 25) stays (5 + 5); after the unmap the same 10
    assert replay.series["non_releasable"].tolist() == [x * MiB for x in (0, 0, 15, 5, 5, 10, 10)]


def test_the_simulator_counts_what_the_snapshot_of_its_state_counts():
    for conf in ("", "expandable_segments:True"):
        alloc = DeviceAllocator(parse_alloc_conf(conf), capacity=4096 * MiB)
        live = []
        for i in range(60):
            b = alloc.malloc((i % 7 + 1) * 3 * MiB + (i % 3) * 100 * 1024)
            live.append(b)
            if i % 3 == 1:
                alloc.free(live.pop(len(live) // 2))
        small = [alloc.malloc(4096 * (i + 1)) for i in range(20)]
        for b in small[::2]:
            alloc.free(b)
        snap = load_snapshot_bytes(pickle.dumps(snapshot_dict([alloc], (), (), {})), "sim.pickle")
        fig = state_figures(snap.segments_of(0))
        assert fig.non_releasable_bytes > 0, conf
        assert alloc.non_releasable_bytes() == fig.non_releasable_bytes, conf
        alloc.empty_cache()  # what empty_cache keeps is exactly what was counted as non-releasable
        assert alloc.reserved == fig.allocated_bytes + fig.non_releasable_bytes, conf


def fragmentation_oom() -> tuple[DeviceAllocator, float]:
    """A fragmentation OOM built as it happens: a 600 MiB cached block split into 20 tensors of 30 MiB, every
    other one freed (300 MiB free in 30 MiB gaps between live tensors), then a 40 MiB request on a device that
    can hold 620 MiB: no gap fits, nothing can be released, the new segment does not fit."""
    alloc = DeviceAllocator(AllocatorSettings(), capacity=620 * MiB)
    alloc.free(alloc.malloc(600 * MiB))
    tensors = [alloc.malloc(30 * MiB) for _ in range(20)]
    for t in tensors[::2]:
        alloc.free(t)
    at_oom = fragmentation(alloc.non_releasable_bytes(), alloc.reserved)
    assert alloc.malloc(40 * MiB) is None
    return alloc, at_oom


def healthy_step() -> DeviceAllocator:
    """A training step's pattern: activations allocated in the forward pass and freed in the backward pass, the
    same sizes every step, parameters and optimizer state alive throughout."""
    alloc = DeviceAllocator(AllocatorSettings(), capacity=4096 * MiB)
    [alloc.malloc(64 * MiB) for _ in range(4)]  # parameters
    [alloc.malloc(64 * MiB) for _ in range(8)]  # optimizer state
    for _ in range(3):
        acts = [alloc.malloc((24 + 8 * (i % 4)) * MiB) for i in range(12)]
        grads = [alloc.malloc(64 * MiB) for _ in range(4)]
        for a in reversed(acts):
            alloc.free(a)
        for g in grads:
            alloc.free(g)
    return alloc


def test_a_fragmentation_oom_reads_high_and_a_healthy_run_reads_low():
    alloc, at_oom = fragmentation_oom()
    assert at_oom == pytest.approx(300 / 600)
    assert at_oom >= 0.4
    healthy = healthy_step()
    frag = fragmentation(healthy.non_releasable_bytes(), healthy.reserved)
    assert frag <= 0.05
    # the old headline calls the healthy cache fragmented: its free memory is many whole segments
    assert free_scatter(healthy.free_bytes(), healthy.largest_free_block()) > 0.5


def test_the_doctor_gives_the_figure_of_the_state_at_the_oom():
    import os

    from fragviz.doctor.text import doctor_text
    from fragviz.doctor.verdicts import diagnose
    from fragviz.snapshot import load_snapshot

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    analysis = analyze(load_snapshot(os.path.join(root, "sample_snapshots", "gpt_train_fragmentation_oom.pickle.gz")))
    (oom,) = diagnose(analysis, simulate=False)
    state = state_figures(analysis.replays[0].segments_at(oom.event))
    assert (oom.non_releasable_bytes, oom.fragmentation) == (state.non_releasable_bytes,
                                                             pytest.approx(state.fragmentation))
    assert oom.fragmentation > 0.15
    assert f"fragmentation {state.fragmentation:.1%} of reserved" in doctor_text("x", [oom])
