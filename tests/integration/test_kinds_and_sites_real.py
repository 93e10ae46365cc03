"""Kinds and sites that own their gaps, on the real snapshots: memory without a recorded stack is its own kind
(or parameters (inferred) in a training step) with the reason the snapshot gives, worked out here from the raw
pickles; and no site label of any real snapshot names one of the allocator's own frames."""
from __future__ import annotations

import os
import pickle

import pytest

from fragviz.replay.analysis import analyze
from fragviz.library.ingest import ingest_file
from fragviz.library import Library
from fragviz.doctor.records import DeviceReport
from fragviz.doctor.report import report_of, report_text
from fragviz.snapshot import load_snapshot
from fragviz.snapshot.frames import is_allocator_frame
from fragviz.store.engine import open_store
from fragviz.ui.data.views import Views
from fragviz.usage.sites import ONLY_ALLOCATOR_SITE, site_frame, site_label
from fragviz.usage.stackless import BEFORE_RECORDING, INFERRED_TEXT, NO_STACKS, REASON_TEXT
from tests.support.helpers import REAL

FILES = sorted(f for f in os.listdir(REAL) if f.endswith(".pickle"))
# Recorded with stacks='all': their stacks begin with the unwinder's and the allocator's C++ frames
WITH_CPP = {"cs336kk_ctx128_forward.pickle", "cs336kk_ctx128_fullstep.pickle", "cs336kk_notrace_75gb.pickle",
            "cs336silmont_small.pickle", "ftcourse.pickle", "hanmin_train_19k.pickle", "nuggets_nightly_mini.pickle",
            "selectn_4dev.pickle", "sqattn_segment_free.pickle", "verl_mempools_pending.pickle"}
# Whole training steps (the trace shows gradients and optimizer state): their stackless memory is inferred
TRAINING = ("hanmin_train_19k.pickle", "cs336kk_ctx128_fullstep.pickle")
# A forward pass alone, and a fine-tuning trace without optimizer state: their stackless memory stays unnamed
NOT_TRAINING = ("cs336kk_ctx128_forward.pickle", "ftcourse.pickle")


def raw(name: str) -> dict:
    with open(os.path.join(REAL, name), "rb") as fh:
        return pickle.load(fh)  # these files hold builtins only (SOURCES.md)


def stackless_from_before_the_trace(name: str) -> int:
    """Bytes of the final state's live blocks without frames that no trace entry touches, in a trace whose every
    entry carries frames: allocated before recording started and live from the first state to the last."""
    data = raw(name)
    trace = data["device_traces"][0]
    assert trace and all(e.get("frames") for e in trace)
    touched = {e["addr"] for e in trace}
    return sum(b["size"] for s in data["segments"] for b in s["blocks"]
               if b["state"] != "inactive" and not b.get("frames") and b["address"] not in touched)


def allocator_labels(snap) -> set[str]:
    """What a site label naming one of the allocator's frames would read."""
    return {f"{f.filename}:{f.line} {f.name}" for f in snap.frames if is_allocator_frame(f)}


def device_report(name: str, device: int = 0) -> DeviceReport:
    return next(d for d in report_of(analyze(load_snapshot(os.path.join(REAL, name)))).devices
                if d.device == device)


@pytest.mark.parametrize("name", TRAINING)
def test_a_real_training_steps_memory_without_stacks_is_parameters_inferred(name):
    d = device_report(name)
    expected = stackless_from_before_the_trace(name)
    assert expected > 2**30
    assert d.kinds["parameters_inferred"] == expected and d.kinds_at_peak["parameters_inferred"] == expected
    assert d.kinds["no_stack"] == 0 and d.kinds["gradients"] > 0 and d.kinds["optimizer_state"] > 0
    assert d.kind_notes == {"parameters_inferred": INFERRED_TEXT}


@pytest.mark.parametrize("name", NOT_TRAINING)
def test_without_a_training_step_it_is_no_stack_recorded_from_before_the_recording(name):
    d = device_report(name)
    expected = stackless_from_before_the_trace(name)
    assert d.kinds["no_stack"] == expected and d.kinds_at_peak["no_stack"] == expected
    assert d.kinds["parameters_inferred"] == 0 and d.kinds_at_peak["optimizer_state"] == 0
    assert d.kind_notes == {"no_stack": REASON_TEXT[BEFORE_RECORDING]}


def test_a_real_snapshot_without_any_stack_says_it_was_recorded_without_them():
    data = raw("selectn_dev1_notrace.pickle")
    live = [b for s in data["segments"] for b in s["blocks"] if b["state"] != "inactive"]
    assert not any(b.get("frames") for b in live) and not any(s.get("frames") for s in data["segments"])
    d = device_report("selectn_dev1_notrace.pickle", device=1)
    assert d.kinds["no_stack"] == sum(b["size"] for b in live) and d.kinds["other"] == 0
    assert d.kind_notes == {"no_stack": REASON_TEXT[NO_STACKS]}
    # blocks without frames beside segments with them: allocated while no stacks were recorded
    assert device_report("cs336kk_notrace_75gb.pickle").kind_notes == {"no_stack": REASON_TEXT[BEFORE_RECORDING]}


@pytest.mark.parametrize("name", FILES)
def test_no_site_of_a_real_snapshot_is_an_allocator_frame(name):
    snap = load_snapshot(os.path.join(REAL, name))
    stacks = [[snap.frames[i] for i in stack] for stack in snap.stacks]
    assert (name in WITH_CPP) == any(is_allocator_frame(f) for f in snap.frames)
    for frames in stacks:
        chosen = site_frame(frames)
        assert chosen is not None and not is_allocator_frame(chosen), site_label(frames)
    text = report_text(analyze(snap))
    sites = [line.split(" blocks  ", 1)[1] for line in text.splitlines() if " blocks  " in line]  # every device's
    assert not set(sites) & (allocator_labels(snap) | {ONLY_ALLOCATOR_SITE})


def test_backward_allocations_are_named_by_their_autograd_node():
    # before, the allocator's malloc named 3,629 allocations of this trace: the backward pass, on its own thread
    snap = load_snapshot(os.path.join(REAL, "hanmin_train_19k.pickle"))
    trace = snap.trace_of(0)
    allocs = trace.stack[trace.action == 0]
    labels = {s: site_label(snap.stack_frames(int(s))) for s in set(allocs.tolist())}
    backward = sum(1 for s in allocs.tolist() if "torch::autograd::" in labels[s])
    assert backward == 3629
    assert any("::BmmBackward0::apply(" in label for label in labels.values())


def test_the_dashboards_top_sites_never_list_an_allocator_frame(tmp_path):
    db = str(tmp_path / "store.sqlite")
    conn = open_store(db)
    sid = ingest_file(conn, os.path.join(REAL, "cs336silmont_small.pickle")).id
    conn.close()
    views = Views(Library.open(db))
    forbidden = allocator_labels(load_snapshot(os.path.join(REAL, "cs336silmont_small.pickle")))
    assert len(forbidden) > 2
    shown = set()
    for event in (None, 40, 60):
        segments, _, _ = views.state(sid, 0, event)
        shown.update(r["site"] for r in views.top_sites(sid, segments, limit=100))
    assert shown and not shown & forbidden
    assert any("torch::autograd::" in site for site in shown)  # the backward pass, named by its own frames
