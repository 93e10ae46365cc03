"""The allocator model rule by rule, with the worked examples of the reference (Part C) and hand-worked numbers."""
from __future__ import annotations

import pickle

import pytest

from fragviz.allocator.config import AllocatorSettings, parse_alloc_conf
from fragviz.allocator.sim import DeviceAllocator
from fragviz.allocator.state import snapshot_dict
from fragviz.replay.analysis import analyze
from fragviz.doctor.report import report_of
from fragviz.snapshot import load_snapshot_bytes
from tests.support.helpers import MiB

DEFAULT = AllocatorSettings()


def actions(a: DeviceAllocator) -> list[tuple[str, int]]:
    return [(e["action"], e["size"]) for e in a.trace]


@pytest.mark.parametrize("request_size,segment,block", [
    (1000, 2 * MiB, 1024),                       # small pool, 2 MiB segment, split
    (5 * MiB, 20 * MiB, 5 * MiB),                # 1-10 MiB: a 20 MiB segment, split
    (10 * MiB + 1, 12 * MiB, 10 * MiB + 512),    # >= 10 MiB: rounded to 2 MiB, 2 MiB - 512 left is split off
    (11 * MiB + MiB // 2, 12 * MiB, 12 * MiB),   # 0.5 MiB left is not > 1 MiB: the block keeps it
])
def test_worked_examples_of_new_segments(request_size, segment, block):
    a = DeviceAllocator(DEFAULT)
    b = a.malloc(request_size)
    assert a.reserved == segment and b.size == block and b.requested == request_size
    assert actions(a) == [("segment_alloc", segment), ("alloc", request_size)]


def test_reusing_a_free_20_mib_block_for_19_5_mib_keeps_it_whole():
    a = DeviceAllocator(DEFAULT)
    a.free(a.malloc(20 * MiB))
    b = a.malloc(19 * MiB + MiB // 2)
    assert b.size == 20 * MiB and a.reserved == 20 * MiB


def test_best_fit_smallest_block_then_lowest_address():
    a = DeviceAllocator(DEFAULT)
    big = a.malloc(8 * MiB)   # segment 1: [8 | 12 free]
    a.malloc(12 * MiB)        # fills segment 1's remainder (no split: 0 left)
    six = a.malloc(6 * MiB)   # segment 2: [6 | 14 free]
    a.malloc(14 * MiB)
    big_addr, six_addr = big.addr, six.addr  # blocks are reused objects: keep the addresses
    a.free(big)
    a.free(six)
    got = a.malloc(5 * MiB)
    assert (got.addr, got.size) == (six_addr, 6 * MiB)  # the 6 MiB block is the best fit; 1 MiB left stays on it
    also = a.malloc(5 * MiB)
    assert (also.addr, also.size) == (big_addr, 5 * MiB)


def test_blocks_are_never_shared_between_streams():
    a = DeviceAllocator(DEFAULT)
    a.free(a.malloc(4 * MiB, stream=1))
    b = a.malloc(4 * MiB, stream=2)
    assert a.reserved == 40 * MiB and b.stream == 2


def test_frees_merge_neighbours_but_not_pending_blocks():
    a = DeviceAllocator(DEFAULT)
    x, y, z = a.malloc(4 * MiB), a.malloc(4 * MiB), a.malloc(4 * MiB)  # [x 4][y 4][z 4][free 8]
    base = x.addr
    a.free(y, pending=True)  # a record_stream'd block: active until its events complete
    a.free(x)
    a.free(z)
    assert sorted(k[1] for k in a.large.keys) == [4 * MiB, 12 * MiB]  # x alone; z merged with the free tail
    a.complete(y)
    assert [(k[1], k[2]) for k in a.large.keys] == [(20 * MiB, base)]
    assert [(e["action"], e["addr"] - base) for e in a.trace[-2:]] == [("free_completed", 8 * MiB),
                                                                        ("free_completed", 4 * MiB)]


def test_max_split_size_keeps_oversize_blocks_whole_and_for_large_requests():
    a = DeviceAllocator(parse_alloc_conf("max_split_size_mb:64"))
    a.free(a.malloc(100 * MiB))
    small = a.malloc(30 * MiB)  # below M: an oversize cached block is not used, a new segment is made
    assert small.size == 30 * MiB and a.reserved == 100 * MiB + 30 * MiB
    a.free(small)
    fit = a.malloc(90 * MiB)  # >= M: the 100 MiB block is within 90 + 20 MiB, so it is taken whole
    assert fit.size == 100 * MiB and a.reserved == 130 * MiB
    a.free(fit)
    far = a.malloc(70 * MiB)  # 100 >= 70 + 20: too wasteful, a new 70 MiB segment instead
    assert far.size == 70 * MiB and a.reserved == 200 * MiB


def test_release_of_oversize_blocks_before_the_full_flush():
    a = DeviceAllocator(parse_alloc_conf("max_split_size_mb:64"), capacity=200 * MiB)
    a.free(a.malloc(100 * MiB))
    keep = a.malloc(4 * MiB)  # a split 20 MiB segment stays: only oversize blocks go first
    b = a.malloc(150 * MiB)
    assert b is not None and a.reserved == 170 * MiB and keep.allocated
    assert actions(a)[-3:] == [("segment_free", 100 * MiB), ("segment_alloc", 150 * MiB), ("alloc", 150 * MiB)]


def test_failed_device_allocation_flushes_the_cache_and_retries():
    a = DeviceAllocator(DEFAULT, capacity=60 * MiB)
    a.free(a.malloc(30 * MiB))
    hold = a.malloc(1000)  # a 2 MiB small segment stays allocated
    got = a.malloc(40 * MiB)
    assert got is not None and a.num_alloc_retries == 1
    assert actions(a)[-3:] == [("segment_free", 30 * MiB), ("segment_alloc", 40 * MiB), ("alloc", 40 * MiB)]
    assert hold.allocated and a.reserved == 42 * MiB


def test_oom_when_nothing_can_be_released():
    a = DeviceAllocator(DEFAULT, capacity=50 * MiB)
    x = a.malloc(30 * MiB)
    a.malloc(20 * MiB)  # a segment of its own, wholly used
    assert a.reserved == 50 * MiB
    x_addr = x.addr
    a.free(x)
    gap = a.malloc(4 * MiB)  # carved from the free 30 MiB segment: split now, it cannot be released
    assert gap.addr == x_addr
    assert a.malloc(31 * MiB) is None  # needs a 32 MiB segment; 26 MiB are cached but not in one piece to free
    oom = a.trace[-1]
    assert (oom["action"], oom["size"], oom["device_free"]) == ("oom", 31 * MiB, 0) and "addr" not in oom
    assert a.num_ooms == 1 and a.num_alloc_retries == 1


def test_empty_cache_releases_only_whole_free_segments():
    a = DeviceAllocator(DEFAULT)
    live = a.malloc(5 * MiB)     # a 20 MiB segment, split, with a live block
    a.free(a.malloc(30 * MiB))   # a 30 MiB segment, wholly free
    a.free(a.malloc(2 * MiB))    # carved from the 15 MiB remainder of the first segment, freed again
    a.empty_cache()
    assert a.reserved == 20 * MiB and live.allocated
    assert [x for x in actions(a) if x[0] == "segment_free"] == [("segment_free", 30 * MiB)]


def test_expandable_segments_map_pages_and_unmap_whole_free_pages():
    a = DeviceAllocator(parse_alloc_conf("expandable_segments:True"))
    c1, c2 = a.malloc(25 * MiB), a.malloc(10 * MiB)  # two 20 MiB pages mapped
    base = c1.addr
    assert c2.addr == base + 25 * MiB and a.reserved == 40 * MiB
    a.free(c1)
    a.empty_cache()  # page 0 is wholly free: unmapped; [20, 25) stays mapped and free
    assert a.reserved == 20 * MiB
    unmap = a.trace[-1]
    assert (unmap["action"], unmap["addr"] - base, unmap["size"]) == ("segment_unmap", 0, 20 * MiB)
    refill = a.malloc(18 * MiB)  # the lowest address that fits: the unmapped hole, mapped again
    assert refill.addr == base and a.reserved == 40 * MiB
    assert (a.trace[-2]["action"], a.trace[-2]["addr"]) == ("segment_map", base)


def test_expandable_small_pool_uses_2_mib_pages():
    a = DeviceAllocator(parse_alloc_conf("expandable_segments:True"))
    a.malloc(1000)
    assert actions(a) == [("segment_map", 2 * MiB), ("alloc", 1000)]


def test_garbage_collection_under_a_memory_fraction():
    a = DeviceAllocator(parse_alloc_conf("per_process_memory_fraction:0.5,garbage_collection_threshold:0.5"),
                        capacity=200 * MiB)
    blocks = [a.malloc(24 * MiB) for _ in range(3)]
    for b in blocks:
        a.free(b)  # 72 MiB reserved, all cached; allowed 100 MiB, GC threshold 50 MiB
    big = a.malloc(30 * MiB)  # no free block fits: GC frees cached segments until reserved <= 50 MiB
    assert big is not None
    freed = [s for act, s in actions(a) if act == "segment_free"]
    assert freed and a.reserved - 30 * MiB <= 50 * MiB


def test_roundup_power2_divisions_change_block_sizes():
    a = DeviceAllocator(parse_alloc_conf("roundup_power2_divisions:4"))
    assert a.malloc(5000).size == 5120
    assert a.malloc(int(1.2 * MiB)).size == int(1.25 * MiB)


def test_a_simulated_snapshot_reads_back_with_the_same_figures():
    a = DeviceAllocator(DEFAULT, capacity=100 * MiB)
    x = a.malloc(5 * MiB)
    y = a.malloc(1000)
    a.malloc(12 * MiB)
    a.free(x)
    a.free(y, pending=True)
    data = snapshot_dict([a], (), (), {"origin": "simulated"})
    analysis = analyze(load_snapshot_bytes(pickle.dumps(data), "sim.pickle"))
    d = report_of(analysis).devices[0]
    assert (d.reserved_bytes, d.peak_reserved_bytes) == (a.reserved, a.peaks.reserved)
    assert (d.allocated_bytes, d.requested_bytes) == (a.active_bytes, a.requested)
    assert d.peak_requested_bytes == a.peaks.requested
    assert d.largest_free_block == a.largest_free_block()
    assert [w for w in analysis.warnings if "first at event" in w or "replaying" in w] == []
