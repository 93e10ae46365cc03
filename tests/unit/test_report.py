"""The report object: its exact shape, and its figures on hand-worked cases."""
from __future__ import annotations

import pickle

import pytest

from fragviz.replay.analysis import analyze
from fragviz.base.errors import UsageError
from fragviz.doctor.records import Report
from fragviz.doctor.report import report_of, report_text
from fragviz.snapshot import load_snapshot_bytes
from fragviz.usage.kinds import KINDS
from fragviz.usage.stackless import NO_STACKS, REASON_TEXT
from tests.support.helpers import MiB, block, ev, frames, segment, snapshot
from tests.support.cases import S, case_a

DEVICE_KEYS = {"device", "reserved_bytes", "allocated_bytes", "requested_bytes", "free_bytes", "free_blocks",
               "largest_free_block", "non_releasable_bytes", "fragmentation", "free_scatter", "at_peak", "segments",
               "blocks", "allocations", "trace_events",
               "trace_actions", "start_requested_bytes", "peak_requested_bytes", "start_reserved_bytes",
               "peak_reserved_bytes", "pools", "pending_free_bytes", "pending_free_blocks", "kinds", "kinds_at_peak",
               "kind_notes", "peak_requested_state"}


def report(data: dict, **kw) -> Report:
    return report_of(analyze(load_snapshot_bytes(pickle.dumps(data), "case.pickle")), **kw)


def test_report_shape_is_exactly_the_interface():
    r = report(case_a()).as_dict()  # the `fragviz report --json` object
    assert set(r) == {"source", "format", "warnings", "devices"}
    assert r["source"] == "case.pickle"
    assert [set(d) for d in r["devices"]] == [DEVICE_KEYS]
    assert isinstance(r["devices"][0]["fragmentation"], float)


def test_final_figures_of_case_a():
    d = report(case_a()).devices[0].as_dict()
    assert d == {
        "device": 0, "reserved_bytes": 20 * MiB, "allocated_bytes": 4 * MiB, "requested_bytes": 4 * MiB,
        "free_bytes": 16 * MiB, "free_blocks": 1, "largest_free_block": 16 * MiB,
        # the 16 MiB gap shares its segment with a live block: all of it is non-releasable, 16 of 20 MiB
        "non_releasable_bytes": 16 * MiB, "fragmentation": 0.8, "free_scatter": 0.0,
        # the first state of most reserved bytes: the fresh segment, whole and free (releasable)
        "at_peak": {"state": 1, "reserved_bytes": 20 * MiB, "allocated_bytes": 0, "non_releasable_bytes": 0,
                    "fragmentation": 0.0, "largest_free_block": 20 * MiB},
        "segments": 1, "blocks": 2, "allocations": 1, "trace_events": 8,
        "trace_actions": {"alloc": 3, "free_requested": 2, "free_completed": 2, "segment_alloc": 1},
        # start = 4 MiB - (allocs 9 MiB - 100 - frees 5 MiB - 100) = 0; peak after the third alloc
        "start_requested_bytes": 0, "peak_requested_bytes": 9 * MiB - 100,
        "start_reserved_bytes": 0, "peak_reserved_bytes": 20 * MiB,
        "pools": [{"pool": [0, 0], "reserved_bytes": 20 * MiB, "allocated_bytes": 4 * MiB, "free_bytes": 16 * MiB,
                   "largest_free_block": 16 * MiB, "non_releasable_bytes": 16 * MiB, "fragmentation": 0.8,
                   "free_scatter": 0.0}],
        "pending_free_bytes": 0, "pending_free_blocks": 0,
        # no stacks recorded: every live byte is of kind no_stack, and the note says why; the peak of requested
        # bytes is after the third alloc (state 4), when 4 + 3 + 2 MiB of blocks are live
        "kinds": {**dict.fromkeys(KINDS, 0), "no_stack": 4 * MiB},
        "kinds_at_peak": {**dict.fromkeys(KINDS, 0), "no_stack": 9 * MiB},
        "kind_notes": {"no_stack": REASON_TEXT[NO_STACKS]}, "peak_requested_state": 4,
    }


def test_at_k_gives_the_state_after_k_events():
    d = report(case_a(), at=6).devices[0]
    assert (d.reserved_bytes, d.requested_bytes, d.segments, d.allocations) == (20 * MiB, 6 * MiB, 1, 2)
    assert (d.free_bytes, d.free_blocks, d.largest_free_block) == (14 * MiB, 2, 11 * MiB)
    assert (d.non_releasable_bytes, d.fragmentation) == (14 * MiB, pytest.approx(14 / 20))
    assert d.free_scatter == pytest.approx(3 / 14)
    assert d.blocks == 4
    assert d.trace_events == 8  # trace figures stay whole-trace
    assert report(case_a(), at=8).devices == report(case_a()).devices
    zero = report(case_a(), at=0).devices[0]
    assert (zero.reserved_bytes, zero.segments, zero.blocks, zero.fragmentation) == (0, 0, 0, 0.0)


@pytest.mark.parametrize("k", [-1, 9, 1000])
def test_at_k_out_of_range(k):
    with pytest.raises(UsageError, match="out of range for device 0 .* 8 events"):
        report(case_a(), at=k)


def test_start_and_peak_of_a_mid_run_trace():
    data = case_a()
    data["device_traces"] = [data["device_traces"][0][5:]]
    d = report(data).devices[0]
    # requested: 4 MiB at the end, the window frees (3 MiB - 100) + 2 MiB and allocates nothing
    assert d.start_requested_bytes == 9 * MiB - 100 and d.peak_requested_bytes == 9 * MiB - 100
    assert d.start_reserved_bytes == 20 * MiB and d.peak_reserved_bytes == 20 * MiB


def test_start_that_would_be_negative_is_zero_with_a_warning():
    final = segment(S, [block(S, 20 * MiB, "inactive", 0)])
    trace = [ev("alloc", S, 5 * MiB), ev("segment_free", S + 64 * MiB, 20 * MiB)]
    r = report(snapshot([final], trace))
    d = r.devices[0]
    # requested: 0 - 5 MiB < 0 -> start 0, walk from 0: peak 5 MiB
    assert (d.start_requested_bytes, d.peak_requested_bytes) == (0, 5 * MiB)
    # reserved: 20 MiB - (0 - 20 MiB) = 40 MiB at the start, never higher
    assert (d.start_reserved_bytes, d.peak_reserved_bytes) == (40 * MiB, 40 * MiB)
    assert any("start_requested_bytes is reported as 0" in w for w in r.warnings)


def test_devices_listed_with_a_segment_or_a_non_empty_trace():
    seg1 = segment(S, [block(S, 2 * MiB, "inactive", 0)], device=1, pool="small")
    trace2 = [ev("oom", 0, 30 * MiB, device_free=1234)]
    data = {"segments": [seg1], "device_traces": [[], [], trace2, []]}
    r = report(data)
    assert [d.device for d in r.devices] == [1, 2]
    oom_device = r.devices[1]
    assert oom_device.trace_actions == {"oom": 1} and oom_device.reserved_bytes == 0
    assert [d.device for d in report(data, device=2).devices] == [2]
    with pytest.raises(UsageError, match="no device 3"):
        report(data, device=3)


def test_pending_free_blocks_count_as_allocations():
    seg = segment(S, [block(S, 2 * MiB, "active_pending_free", 2 * MiB - 1), block(S + 2 * MiB, 1 * MiB),
                      block(S + 3 * MiB, 17 * MiB, "inactive", 0)])
    d = report(snapshot([seg])).devices[0]
    assert (d.allocations, d.allocated_bytes, d.requested_bytes) == (2, 3 * MiB, 3 * MiB - 1)


def test_text_report_is_readable():
    data = case_a()
    data["segments"][0]["blocks"][0]["frames"] = frames("forward", "train_step")
    text = report_text(analyze(load_snapshot_bytes(pickle.dumps(data), "case.pickle")), at=6)
    assert "20.00 MiB" in text and "state after 6 of 8 events" in text
    assert "fragmentation  70.0%      non-releasable 14.00 MiB of 20.00 MiB reserved" in text
    assert "free scatter 21.4%" in text
    assert "inferred" in text
    final_text = report_text(analyze(load_snapshot_bytes(pickle.dumps(data), "case.pickle")))
    assert "/home/u/train.py:10 forward" in final_text
