"""The allocator model against real traces: follow mode predicts the recorded allocator, free-run reproduces it."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest

from fragviz.replay.analysis import analyze, trace_totals
from fragviz.doctor.report import report_of
from fragviz.simulate import follow, run_free, simulated_snapshot, what_if
from fragviz.simulate.records import DeviceMemory
from fragviz.snapshot import load_snapshot, load_snapshot_bytes
from tests.support.helpers import REAL

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
SAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "sample_snapshots")
WITH_ALLOCS = ["cs336kk_ctx128_forward", "cs336kk_ctx128_fullstep", "cs336silmont_small", "ftcourse",
               "selectn_4dev", "sqattn_segment_free", "nuggets_nightly_mini", "hanmin_train_19k"]
INCONSISTENT = {"nuggets_nightly_mini": "its trace frees memory its segments never held"}


@pytest.fixture(scope="module")
def analyses():
    return {n: analyze(load_snapshot(os.path.join(REAL, n + ".pickle"))) for n in WITH_ALLOCS}


def test_the_list_of_real_files_with_allocs_is_complete():
    files = [f[:-7] for f in os.listdir(REAL) if f.endswith(".pickle")]
    with_allocs = [f for f in files
                   if "alloc" in load_snapshot(os.path.join(REAL, f + ".pickle")).trace_of(0).action_counts()]
    assert sorted(with_allocs) == sorted(WITH_ALLOCS)


@pytest.mark.parametrize("name", WITH_ALLOCS)
def test_follow_mode_predicts_the_recorded_allocator(analyses, name):
    (d,) = [x for x in follow(analyses[name]).devices if x.alloc_events]
    addr_rate = d.alloc_address_matches / d.alloc_events
    recorded = d.segment_allocs_recorded
    seg_rate = d.segment_allocs_matched / recorded if recorded else 1.0  # none recorded: none may be predicted
    assert addr_rate >= 0.99 and seg_rate >= 0.99, d.mismatches[:3]
    assert d.segment_allocs_predicted == d.segment_allocs_recorded
    if name in INCONSISTENT:
        # The cause, named: the trace and the final segments disagree, so no replay can end in that state.
        assert d.final_state_matches is False
        assert any("neither freed later nor in the final segments" in w for w in analyses[name].warnings)
    else:
        assert d.final_state_matches is True


@pytest.mark.parametrize("name", WITH_ALLOCS)
def test_free_run_under_the_recorded_settings_reproduces_the_recorded_peak(analyses, name):
    analysis = analyses[name]
    result = run_free(analysis, 0, analysis.settings, None)
    totals = trace_totals(analysis.snapshot, 0)
    assert result.allocator.peaks.reserved == totals.peak_reserved
    assert result.allocator.peaks.requested == totals.peak_requested
    assert result.oom_count == 0


def test_free_run_from_an_empty_device(analyses):
    analysis = analyses["cs336silmont_small"]
    assert analysis.replays[0].pre_trace_blocks == 0 and analysis.replays[0].pre_trace_segments == 0
    (d,) = what_if(analysis, "expandable_segments:True").devices
    assert d.recorded.peak_reserved_bytes == report_of(analysis).devices[0].peak_reserved_bytes
    assert d.given.settings.expandable_segments is True and d.recorded.settings.expandable_segments is False


def test_what_if_on_a_device_too_small(analyses):
    analysis = analyses["cs336kk_ctx128_fullstep"]
    (d,) = what_if(analysis, "expandable_segments:True", device_memory=40 * 1024**3).devices
    # "recorded" is the recording (no OOM on its real device); "baseline" the recorded settings on 40 GiB
    assert d.given.ooms and d.baseline.ooms and d.recorded.ooms == ()
    assert d.outcome == "still_ooms" and d.memory == DeviceMemory(40 * 1024**3, "given")
    first = d.given.ooms[0]
    assert first.reserved_bytes <= 40 * 1024**3 and first.requested_bytes > 0


def test_the_fragmentation_sample_is_saved_by_expandable_segments():
    analysis = analyze(load_snapshot(os.path.join(SAMPLES, "gpt_train_fragmentation_oom.pickle.gz")))
    (d,) = what_if(analysis, "expandable_segments:True").devices
    assert len(d.recorded.ooms) == 1 and len(d.baseline.ooms) == 1 and d.given.ooms == ()
    assert d.outcome == "gets_past_recorded_failure"  # the recording ends at its OOM
    capacity = d.given.device_memory_bytes
    assert capacity == 1024**3 and d.given.peak_reserved_bytes <= capacity


def test_a_simulated_snapshot_is_a_snapshot(analyses):
    analysis = analyses["ftcourse"]
    data = simulated_snapshot(analysis, "expandable_segments:True")
    sim = analyze(load_snapshot_bytes(pickle.dumps(data), "sim.pickle"))
    assert any("simulated by fragviz" in w for w in sim.warnings)
    (run,) = what_if(analysis, "expandable_segments:True").devices
    d = report_of(sim).devices[0]
    assert d.peak_reserved_bytes == run.given.peak_reserved_bytes
    assert "segment_map" in d.trace_actions and d.trace_actions["alloc"] == 3505
    assert [w for w in sim.warnings if "first at event" in w or "replaying" in w] == []


def test_simulate_command_json_shapes(tmp_path):
    path = os.path.join(REAL, "cs336silmont_small.pickle")
    out = subprocess.run([FRAGVIZ, "simulate", path, "--json"], capture_output=True, text=True)
    (d,) = json.loads(out.stdout)["devices"]
    assert set(d) == {"device", "mode", "alloc_events", "alloc_address_matches", "segment_allocs_recorded",
                      "segment_allocs_predicted", "segment_allocs_matched", "final_state_matches", "mismatches",
                      "reservations", "certain_oom"}
    assert d["certain_oom"] is None  # no single request of this file exceeds the device
    assert (d["mode"], d["alloc_events"], d["alloc_address_matches"]) == ("follow", 36, 36)
    assert d["reservations"] == []  # no expandable segments in this file
    sim_file = tmp_path / "sim.pickle"
    out = subprocess.run([FRAGVIZ, "simulate", path, "--alloc-conf", "expandable_segments:True,max_split_size_mb:128",
                          "--device-memory", "80GiB", "--json", "--out", str(sim_file)], capture_output=True, text=True)
    (d,) = json.loads(out.stdout)["devices"]
    keys = {"settings", "peak_reserved_bytes", "peak_allocated_bytes", "peak_requested_bytes", "final_fragmentation",
            "ooms", "fragmentation_at_peak_reserved"}
    what_if_keys = {"device", "mode", "status", "alloc_conf", "recorded", "baseline", "device_memory", "start",
                    "outcome", "claim", "certain_oom"}
    assert set(d) == what_if_keys | keys and set(d["recorded"]) == keys and set(d["baseline"]) == keys
    assert d["settings"]["max_split_size"] == 128 * 1024**2 and d["settings"]["device_memory_bytes"] == 80 * 1024**3
    report = json.loads(subprocess.run([FRAGVIZ, "report", str(sim_file), "--json"], capture_output=True,
                                       text=True).stdout)
    assert report["devices"][0]["peak_reserved_bytes"] == d["peak_reserved_bytes"]
    bad = subprocess.run([FRAGVIZ, "simulate", path, "--alloc-conf", "nonsense_key:1"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unrecognized key 'nonsense_key'" in bad.stderr
