"""Every real snapshot in ../shared/real_snapshots: loads, reports, replays, against an independent inspection."""
from __future__ import annotations

import json
import os
import random
from collections import Counter

import pytest

from fragviz.replay.analysis import analyze
from fragviz.base.errors import SnapshotFormatError
from fragviz.model.metrics import state_figures
from fragviz.doctor.report import report_of
from fragviz.snapshot import load_snapshot
from tests.support.helpers import REAL

INSPECTION = json.load(open(os.path.join(REAL, "inspect_summary.json")))
FILES = sorted(INSPECTION)

GENERATIONS = {
    "flexgen_opt13b_oom": "2.0", "flexgen_opt13b": "2.0", "selectn_4dev": "2.1", "selectn_dev1_notrace": "2.1",
    "layoutedit_segments_only": "segments-list", "layoutedit_dump_2dev": "2.2+", "ftcourse": "2.1",
    "diffusion_tiny": "2.2+", "sketchkv": "2.4+", "cs336kk_notrace_75gb": "2.5+", "cs336kk_ctx128_forward": "2.5+",
    "cs336kk_ctx128_fullstep": "2.5+", "sqattn_segment_free": "2.5+", "cs336silmont_small": "2.5+",
    "nuggets_nightly_mini": "2.10+", "verl_mempools_pending": "2.5+", "hanmin_train_19k": "2.5+",
    "hitsbe_empty": "2.5+",
}
INCONSISTENT = {"nuggets_nightly_mini"}  # trimmed by its authors: its trace frees memory its segments never held


@pytest.fixture(scope="module")
def analyses():
    return {name: analyze(load_snapshot(os.path.join(REAL, INSPECTION[name]["file"]))) for name in FILES}


def test_every_real_file_is_covered():
    on_disk = {f[:-7] for f in os.listdir(REAL) if f.endswith(".pickle")}
    assert on_disk == set(FILES)


@pytest.mark.parametrize("name", FILES)
def test_matches_the_independent_inspection(analyses, name):
    snap, want = analyses[name].snapshot, INSPECTION[name]
    assert len(snap.segments) == want["n_segments"]
    assert sum(len(s.blocks) for s in snap.segments) == want["n_blocks"]
    assert Counter(b.state.value for s in snap.segments for b in s.blocks) == Counter(want["block_states"])
    assert sum(s.total_size for s in snap.segments) == want["total_reserved"]
    assert sorted({s.device for s in snap.segments}) == want["devices_in_segments"]
    per_device = want.get("trace_entries_per_device") or []
    assert [len(snap.trace_of(d)) for d in range(len(per_device))] == per_device
    actions: Counter = Counter()
    for t in snap.traces.values():
        actions.update(t.action_counts())
    assert actions == Counter(want.get("trace_actions") or {})
    assert snap.format.generation == GENERATIONS[name]


@pytest.mark.parametrize("name", FILES)
def test_report_figures_add_up(analyses, name):
    r = report_of(analyses[name])
    want = INSPECTION[name]
    assert sum(d.reserved_bytes for d in r.devices) == want["total_reserved"]
    for d in r.devices:
        assert d.reserved_bytes >= d.allocated_bytes >= 0
        assert d.free_bytes + d.allocated_bytes == d.reserved_bytes
        assert 0.0 <= d.fragmentation <= 1.0
        assert d.peak_requested_bytes >= max(d.start_requested_bytes, d.requested_bytes)
        assert d.peak_reserved_bytes >= max(d.start_reserved_bytes, d.reserved_bytes)
    json.dumps(r.as_dict())


@pytest.mark.parametrize("name", FILES)
def test_replay_reaches_the_recorded_final_state(analyses, name):
    analysis = analyses[name]
    for device, replay in analysis.replays.items():
        n = len(replay.trace)
        final = state_figures(analysis.snapshot.segments_of(device))
        if name in INCONSISTENT:
            assert replay.figures_at(n) != final
            continue
        assert replay.figures_at(n) == final
        assert replay.series["reserved"][n] == final.reserved_bytes
        assert replay.series["requested"][n] == final.requested_bytes
        assert replay.series["free_gaps"][n] == final.free_blocks
        assert replay.series["largest_gap"][n] == final.largest_free_block


@pytest.mark.parametrize("name", [n for n in FILES if sum(INSPECTION[n].get("trace_entries_per_device") or [0]) > 50])
def test_series_agree_with_restored_states(analyses, name):
    analysis = analyses[name]
    rng = random.Random(name)
    for replay in analysis.replays.values():
        n = len(replay.trace)
        if not n:
            continue
        for k in sorted(rng.sample(range(n + 1), min(25, n + 1))):
            fig = replay.figures_at(k)
            got = tuple(int(replay.series[s][k]) for s in ("allocated", "requested", "reserved", "free_gaps",
                                                           "largest_gap"))
            assert got == (fig.allocated_bytes, fig.requested_bytes, fig.reserved_bytes, fig.free_blocks,
                           fig.largest_free_block), k
            assert min(got) >= 0


def test_consistent_files_have_no_consistency_warnings(analyses):
    for name in FILES:
        if name in INCONSISTENT:
            continue
        noisy = [w for w in analyses[name].warnings if "replaying" in w or "first at event" in w]
        assert noisy == [], name


def test_the_trimmed_nightly_file_says_what_is_wrong(analyses):
    warnings = " | ".join(analyses["nuggets_nightly_mini"].warnings)
    assert "neither freed later nor in the final segments" in warnings
    assert "does not reproduce the final segments" in warnings
    assert "start_requested_bytes is reported as 0" in warnings
    d = report_of(analyses["nuggets_nightly_mini"]).devices[0]
    assert d.start_requested_bytes == 0


def test_capture_health(analyses):
    assert any("no trace was recorded" in w for w in analyses["cs336kk_notrace_75gb"].warnings)
    assert any("covers only the last 19052 events" in w for w in analyses["cs336kk_ctx128_fullstep"].warnings)
    assert any("no stacks were recorded" in w for w in analyses["selectn_dev1_notrace"].warnings)
    assert not any("no stacks were recorded" in w for w in analyses["flexgen_opt13b"].warnings)  # in history
    assert not any("covers only" in w for w in analyses["cs336silmont_small"].warnings)  # starts empty


def test_private_pools_and_pending_frees_are_read(analyses):
    snap = analyses["verl_mempools_pending"].snapshot
    pools = Counter(s.pool_id for s in snap.segments)
    assert pools == Counter({(0, 0): 59, (0, 1): 44, (0, 2): 24})
    pending = [b for s in snap.segments for b in s.blocks if b.state.value == "active_pending_free"]
    assert len(pending) == 9 and all(b.state.is_active for b in pending)


def test_a_trace_without_segment_allocs_starts_from_inherited_segments(analyses):
    replay = analyses["hanmin_train_19k"].replays[0]
    assert replay.pre_trace_segments == 999
    assert any("covers only the last 19464 events" in w for w in analyses["hanmin_train_19k"].warnings)


def test_an_empty_snapshot_says_it_is_empty(analyses):
    r = report_of(analyses["hitsbe_empty"])
    assert r.devices == ()
    assert any("the snapshot is empty" in w for w in analyses["hitsbe_empty"].warnings)


def test_a_real_file_that_is_not_a_snapshot_is_refused_by_name():
    path = os.path.join(REAL, "negative", "mygpt_not_a_snapshot.pickle")
    with pytest.raises(SnapshotFormatError) as info:
        load_snapshot(path)
    message = str(info.value)
    assert path in message and "is not a PyTorch memory snapshot" in message and "\n" not in message


def test_legacy_block_addresses_are_derived(analyses):
    snap = analyses["flexgen_opt13b"].snapshot
    for seg in snap.segments:
        cursor = seg.address
        for b in seg.blocks:
            assert b.address == cursor
            cursor += b.size
        assert cursor == seg.end
