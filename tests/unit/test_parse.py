"""Parsing details: optional keys, legacy forms, unknown actions, format detection."""
from __future__ import annotations

import copy
import pickle

from fragviz.replay.analysis import analyze
from fragviz.doctor.report import report_of
from fragviz.snapshot import load_snapshot, load_snapshot_bytes, read_raw
from tests.support.helpers import MiB, block, ev, real, segment, snapshot

OPTIONAL_TOP = ("allocator_settings", "external_annotations")
OPTIONAL_SEGMENT = ("segment_pool_id", "is_expandable", "frames")
OPTIONAL_ENTRY = ("frames", "time_us", "compile_context", "user_metadata")


def strip(data: dict) -> dict:
    data = copy.deepcopy(data)
    for k in OPTIONAL_TOP:
        data.pop(k, None)
    for s in data["segments"]:
        for k in OPTIONAL_SEGMENT:
            s.pop(k, None)
        for b in s["blocks"]:
            b.pop("frames", None)
    for trace in data["device_traces"]:
        for e in trace:
            for k in OPTIONAL_ENTRY:
                e.pop(k, None)
    return data


def figures(report: dict) -> list[dict]:
    # kinds are read from stacks, which the stripped copy lacks: only their totals must agree, and the notes that
    # say why memory has no stack differ by design (the copy was recorded without stacks)
    return [{k: (sum(v.values()) if k.startswith("kinds") else v) for k, v in d.items() if k != "kind_notes"}
            for d in report["devices"]]


def test_every_optional_key_missing_gives_the_same_figures():
    for name in ("nuggets_nightly_mini.pickle", "cs336silmont_small.pickle"):
        data = read_raw(real(name)).data
        full = analyze(load_snapshot(real(name)))
        bare = analyze(load_snapshot_bytes(pickle.dumps(strip(data)), name))
        assert figures(report_of(bare).as_dict()) == figures(report_of(full).as_dict())
        assert bare.snapshot.allocator_settings is None and bare.snapshot.external_annotations is None
        assert all(s.pool_id is None and s.is_expandable is None for s in bare.snapshot.segments)
        assert not bare.snapshot.trace_of(0).has_time


def test_legacy_block_takes_requested_size_and_frames_from_history():
    seg = {"device": 0, "address": 4 * MiB, "total_size": 2 * MiB, "allocated_size": 0, "active_size": 0,
           "stream": 0, "segment_type": "small",
           "blocks": [{"size": 1024, "state": "active_allocated",
                       "history": [{"addr": 4 * MiB, "real_size": 1000,
                                    "frames": [{"filename": "a.py", "line": 3, "name": "f"}]}]},
                      {"size": 2 * MiB - 1024, "state": "inactive"}]}
    snap = load_snapshot_bytes(pickle.dumps({"segments": [seg], "device_traces": [[]]}), "legacy.pickle")
    first, second = snap.segments[0].blocks
    assert (first.address, first.requested_size) == (4 * MiB, 1000)
    assert snap.stack_frames(first.stack)[0].name == "f"
    assert (second.address, second.requested_size) == (4 * MiB + 1024, 2 * MiB - 1024)
    assert snap.format.generation == "2.0"


def test_bare_segment_list():
    seg = segment(8 * MiB, [block(8 * MiB, 2 * MiB)], device=1)
    snap = load_snapshot_bytes(pickle.dumps([seg]), "list.pickle")
    assert snap.format.generation == "segments-list" and snap.devices() == [1] and snap.traces == {}


def test_unknown_actions_are_kept_and_named():
    seg = segment(8 * MiB, [block(8 * MiB, 20 * MiB, "inactive", 0)])
    trace = [ev("annotate", 8 * MiB, 0), ev("brand_new_action", 0, 0)]
    snap = load_snapshot_bytes(pickle.dumps(snapshot([seg], trace)), "new.pickle")
    assert snap.trace_of(0).action_counts() == {"annotate": 1, "brand_new_action": 1}
    assert any("does not know: 'brand_new_action'" in w for w in snap.warnings)


def test_pending_state_spelled_as_in_the_docstring():
    seg = segment(8 * MiB, [block(8 * MiB, 2 * MiB, "active_awaiting_free")])
    snap = load_snapshot_bytes(pickle.dumps(snapshot([seg])), "docstring.pickle")
    assert snap.segments[0].blocks[0].state.value == "active_pending_free"


def test_blocks_that_do_not_cover_their_segment_are_reported():
    seg = segment(8 * MiB, [block(8 * MiB, 2 * MiB)])
    seg["total_size"] = 20 * MiB
    snap = load_snapshot_bytes(pickle.dumps(snapshot([seg])), "short.pickle")
    assert any("cover 2097152 bytes of its total_size 20971520" in w for w in snap.warnings)


def test_oom_entries_keep_device_free():
    seg = segment(8 * MiB, [block(8 * MiB, 20 * MiB)])
    trace = [ev("oom", 0, 40 * MiB, device_free=123456)]
    del trace[0]["addr"]
    snap = load_snapshot_bytes(pickle.dumps(snapshot([seg], trace)), "oom.pickle")
    t = snap.trace_of(0)
    assert (t.action_names[t.action[0]], int(t.addr[0]), int(t.size[0])) == ("oom", 123456, 40 * MiB)
