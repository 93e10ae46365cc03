"""Expandable segments as the driver lays them out: follow mode and free-run on traces with a real run's layout.

The small pool's reservation begins 0x1644000000 bytes (89.06 GiB) above the large pool's, as on a real
PyTorch 2.8 run on an 80 GB device; a model that gave each pool a 1 TiB reservation put the small pool's
first map inside the large pool's range and predicted 16-61 % of these addresses.
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest

from tests.support.expandable_traces import A100_40GB_TOTAL, H100_TOTAL, MiB, expandable_snapshot, ring_buffer
from fragviz.allocator.reservations import ReservationPlan, reservation_bytes
from fragviz.replay.analysis import analyze
from fragviz.simulate import follow, recorded_capacity, run_free
from fragviz.simulate.records import Reservation
from fragviz.snapshot import load_snapshot_bytes
from tests.support.helpers import block, segment

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
L = 0x7F00_0000_0000  # the large pool's reservation
S = L + 0x1644000000  # the small pool's, right after it
GAP = 0x1644000000


def analysis_of(snap: dict, name: str = "expandable.pickle"):
    return analyze(load_snapshot_bytes(pickle.dumps(snap), name))


def event(action: str, addr: int | None, size: int, **extra) -> dict:
    e = {"action": action, "size": size, "stream": 0, "frames": []}
    if addr is not None:
        e["addr"] = addr
    e.update(extra)
    return e


def hand_trace() -> dict:
    """Both pools, a release-and-retry that moves the map into a hole, and an OOM without `addr`."""
    trace = [
        event("segment_map", L, 40 * MiB), event("alloc", L, 40 * MiB),              # A
        event("segment_map", S, 2 * MiB), event("alloc", S, 4096),
        event("alloc", S + 4096, 8192),                                               # from the cache
        event("segment_map", L + 40 * MiB, 20 * MiB), event("alloc", L + 40 * MiB, 20 * MiB),  # B
        event("segment_map", L + 60 * MiB, 20 * MiB), event("alloc", L + 60 * MiB, 20 * MiB),  # C
        event("free_requested", L, 40 * MiB), event("free_completed", L, 40 * MiB),
        event("free_requested", L + 60 * MiB, 20 * MiB), event("free_completed", L + 60 * MiB, 20 * MiB),
        # 50 MiB: before the release it would grow C's page by 40 MiB at L+80; the device is full, so every
        # wholly free page goes (C's, then A's), and the lowest run with room is C's place: 60 MiB mapped there.
        event("segment_unmap", L + 60 * MiB, 20 * MiB), event("segment_unmap", L, 40 * MiB),
        event("segment_map", L + 60 * MiB, 60 * MiB), event("alloc", L + 60 * MiB, 50 * MiB),
        event("oom", None, 100 * 1024 * MiB, device_free=0),
    ]
    large = segment(L + 40 * MiB, [block(L + 40 * MiB, 20 * MiB), block(L + 60 * MiB, 50 * MiB),
                                   block(L + 110 * MiB, 10 * MiB, "inactive", 0)], expandable=True)
    small = segment(S, [block(S, 4096), block(S + 4096, 8192), block(S + 12288, 2 * MiB - 12288, "inactive", 0)],
                    pool="small", expandable=True)
    settings = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "expandable_segments": True,
                "max_split_size": -1}
    return {"segments": [large, small], "device_traces": [trace], "allocator_settings": settings}


def test_the_hand_written_layout_is_followed_exactly():
    (d,) = follow(analysis_of(hand_trace())).devices
    assert d.alloc_events == 6 and d.alloc_address_matches == 6, d.mismatches
    assert (d.segment_allocs_recorded, d.segment_allocs_predicted, d.segment_allocs_matched) == (5, 5, 5)
    assert d.final_state_matches is True
    assert d.reservations == (Reservation(base=L, limit_bytes=GAP, pool="large", stream=0),
                              Reservation(base=S, limit_bytes=None, pool="small", stream=0))


def test_the_device_size_bounds_the_last_reservation():
    analysis = analysis_of(hand_trace())
    (d,) = follow(analysis, device_total=H100_TOTAL).devices
    # 1.125 × 81,050 MiB = 91,181.25 MiB: 45,591 pages of 2 MiB for the small pool, 4,560 of 20 MiB (= GAP)
    assert d.reservations[1].limit_bytes == 45_591 * 2 * MiB
    assert reservation_bytes(H100_TOTAL, small=False) == GAP
    assert d.alloc_address_matches == 6 and d.final_state_matches is True


@pytest.fixture(scope="module")
def three_devices():
    return expandable_snapshot(devices=3, seed=7)


def test_the_written_traces_have_the_real_runs_layout(three_devices):
    for device, trace in enumerate(three_devices["device_traces"]):
        maps = [e for e in trace if e["action"] == "segment_map" and e["stream"] == 0]
        large = min(e["addr"] for e in maps if e["size"] % (20 * MiB) == 0 and e["size"] != 2 * MiB)
        small = min(e["addr"] for e in maps if e["size"] == 2 * MiB)
        if device != 1:  # device 1 starts in the small pool, so its small reservation comes first
            assert small - large == GAP
        actions = {e["action"] for e in trace}
        assert {"segment_map", "segment_unmap", "oom"} <= actions
        assert all("addr" not in e and e["device_free"] >= 0 for e in trace if e["action"] == "oom")
        unmaps_then_oom = any(a["action"] == "segment_unmap" and b["action"] == "oom" for a, b in zip(trace, trace[1:]))
        assert unmaps_then_oom
        assert {e["stream"] for e in trace} == {0, 0x55D4_0A2B_9C10}
    assert {s["device"] for s in three_devices["segments"]} == {0, 1, 2}


@pytest.mark.parametrize("keep", [None, 2000], ids=["whole trace", "ring buffer of 2000"])
def test_follow_mode_predicts_every_device(three_devices, keep):
    snap = three_devices if keep is None else ring_buffer(three_devices, 0, keep)
    result = follow(analysis_of(snap)).devices
    assert [d.device for d in result] == [0, 1, 2]
    for d in result:
        assert d.alloc_address_matches / d.alloc_events >= 0.99, d.mismatches[:3]
        assert d.segment_allocs_matched / d.segment_allocs_recorded >= 0.99, d.mismatches[:3]
        assert d.segment_allocs_predicted == d.segment_allocs_recorded
        assert d.final_state_matches is True
        pools = {(r.pool, r.stream) for r in d.reservations}
        assert pools == {("large", 0), ("small", 0), ("large", 0x55D4_0A2B_9C10), ("small", 0x55D4_0A2B_9C10)}


def test_free_run_under_the_recorded_settings_replays_the_recorded_trace(three_devices):
    """Laid out the same way, at the recorded capacity, the model repeats every event: maps, unmaps, OOMs."""
    analysis = analysis_of(three_devices)
    for device in (0, 1, 2):
        recorded = [(e["action"], e.get("addr"), e["size"]) for e in three_devices["device_traces"][device]]
        result = run_free(analysis, device, analysis.settings, recorded_capacity(analysis, device), record=True)
        simulated = [(e["action"], e.get("addr"), e["size"]) for e in result.allocator.trace]
        assert simulated == recorded
        assert result.oom_count == sum(1 for e in recorded if e[0] == "oom") > 0


def test_a_second_shape_a_40_gb_device():
    snap = expandable_snapshot(devices=2, seed=3, total=A100_40GB_TOTAL)
    trace = snap["device_traces"][0]
    assert sum(e["action"] == "oom" for e in trace) > 0
    for d in follow(analysis_of(snap)).devices:
        assert d.alloc_address_matches / d.alloc_events >= 0.99, d.mismatches[:3]
        assert d.segment_allocs_matched == d.segment_allocs_recorded and d.final_state_matches is True


def test_reservations_are_read_from_the_addresses():
    analysis = analysis_of(hand_trace())
    replay = analysis.replays[0]
    plan = ReservationPlan.infer(replay.trace, replay.segments_at(0))
    assert [(r.base, r.limit, r.small) for r in plan.reservations] == [(L, GAP, False), (S, None, True)]
    assert plan.find(L + GAP - 1, False, 0) is not None and plan.find(S, False, 0) is None
    assert plan.find(S + 10 * GAP, True, 0) is not None  # nothing is known above the small reservation


def test_a_snapshot_without_allocator_settings_is_read_as_expandable_from_its_segments():
    """Before 2.4 snapshots carry no allocator_settings: expandable segments in them show the setting."""
    snap = hand_trace()
    del snap["allocator_settings"]
    analysis = analysis_of(snap)
    assert analysis.settings.expandable_segments is True
    (d,) = follow(analysis).devices
    assert d.alloc_address_matches == 6 and d.final_state_matches is True


def test_simulate_follow_takes_the_device_size(tmp_path):
    path = tmp_path / "hand.pickle"
    path.write_bytes(pickle.dumps(hand_trace()))
    out = subprocess.run([FRAGVIZ, "simulate", str(path), "--device-memory", "81050MiB", "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    (d,) = json.loads(out.stdout)["devices"]
    assert [r["limit_bytes"] for r in d["reservations"]] == [GAP, 45_591 * 2 * MiB]
    text = subprocess.run([FRAGVIZ, "simulate", str(path)], capture_output=True, text=True).stdout
    assert "alloc addresses 6/6 (100.0%)" in text and "final state matches" in text
