"""Honest what-ifs: a refusal where there is no workload, the inherited start said, the recording next to the
simulation, claims about OOMs only where the simulation covered them; the series the what-if page draws; the
app's job runner."""
from __future__ import annotations

import gzip
import os
import pickle
import threading
import time

import numpy as np
import pytest

from fragviz.allocator.config import parse_alloc_conf
from fragviz.allocator.state import snapshot_dict
from fragviz.replay.analysis import analyze
from fragviz.model.lod import per_event
from fragviz.simulate.records import DeviceMemory
from fragviz.simulate.whatif import NothingToSimulate, simulate_device, what_if
from fragviz.snapshot import load_snapshot, load_snapshot_bytes
from fragviz.snapshot.loader import RawSnapshot
from fragviz.snapshot.parse import parse_snapshot
from fragviz.ui.data.whatif_runs import Busy, WhatIfRuns
from tests.support.helpers import REAL, MiB, block, ev, segment, snapshot

GiB = 1024**3
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FRAG_SAMPLE = os.path.join(ROOT, "sample_snapshots", "gpt_train_fragmentation_oom.pickle.gz")
EXPANDABLE = "expandable_segments:True"


def real(name: str):
    return analyze(load_snapshot(os.path.join(REAL, name + ".pickle")))


def raw(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as fh:
        return pickle.load(fh)  # the real files hold plain builtins only


def analysed(data: dict):
    return analyze(load_snapshot_bytes(pickle.dumps(data), "case.pickle"))


# -- nothing to simulate ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,device", [("cs336kk_notrace_75gb", 0), ("selectn_dev1_notrace", 1)])
def test_a_snapshot_without_a_trace_is_refused_with_the_reason(name, device):
    analysis = real(name)
    with pytest.raises(NothingToSimulate) as refused:
        what_if(analysis, EXPANDABLE)
    assert f"cannot simulate: device {device} has no trace (memory history was off" in str(refused.value)
    (r,) = simulate_device(analysis, device, [(EXPANDABLE, parse_alloc_conf(EXPANDABLE))])
    assert r.status == "cannot_answer" and r.avoids_oom is None
    assert (r.given, r.baseline, r.recorded, r.memory, r.certain_oom) == (None,) * 5  # no figure at all
    assert set(r.as_dict()) == {"device", "mode", "status", "alloc_conf", "reason", "certain_oom"}


def test_a_trace_without_an_alloc_is_refused():
    analysis = real("layoutedit_dump_2dev")  # one `snapshot` / `free_completed` entry per device
    with pytest.raises(NothingToSimulate) as refused:
        what_if(analysis, EXPANDABLE)
    assert "device 0's trace holds 1 events but no alloc" in str(refused.value)
    assert "device 1's trace holds 1 events but no alloc" in str(refused.value)


# -- the start state ---------------------------------------------------------------------------------------------

def test_a_trace_that_starts_mid_run_says_what_it_inherits():
    analysis = real("hanmin_train_19k")
    segments = [s for s in raw(os.path.join(REAL, "hanmin_train_19k.pickle"))["segments"] if s["device"] == 0]
    # the trace has no segment_alloc or segment_free: every segment of the final state predates it
    (d,) = what_if(analysis, EXPANDABLE).devices
    start = d.start
    assert start.inherited is True and start.segments == len(segments) == 999
    assert start.reserved_bytes == sum(s["total_size"] for s in segments)
    (note,) = start.notes
    assert note.startswith(f"The trace starts mid-run: 999 segments ({start.reserved_bytes / GiB:.2f} GiB reserved)")
    assert "their placement is as recorded, not as the simulated settings would have laid it out" in note
    # no OOM recorded and no device size given: no claim about OOMs
    assert d.outcome == "unknown" and d.memory == DeviceMemory(None, "unknown")
    assert d.claim.startswith("the device size is unknown")


def test_a_device_smaller_than_the_inherited_start_is_refused():
    analysis = real("hanmin_train_19k")  # 22.21 GiB reserved before its first event
    (r,) = simulate_device(analysis, 0, [(EXPANDABLE, parse_alloc_conf(EXPANDABLE))], given_memory=20 * GiB)
    assert r.status == "cannot_answer"
    assert r.reason == ("the trace starts with 22.21 GiB already reserved on device 0, more than the 20.00 GiB device "
                        "asked about: that start state cannot exist on it")
    (r,) = simulate_device(analysis, 0, [(EXPANDABLE, parse_alloc_conf(EXPANDABLE))], given_memory=80 * GiB)
    assert (r.outcome, r.claim) == ("no_oom", "with expandable_segments:True the run fits a device of 80.00 GiB: no OOM")


def test_memory_reserved_before_the_recording_is_said():
    a = 0x7F0000000000
    cached = segment(a, [block(a, 20 * MiB, "inactive", 0)])  # a cached segment: no trace event made it
    trace = [ev("alloc", a, 20 * MiB), ev("free_requested", a, 20 * MiB), ev("free_completed", a, 20 * MiB)]
    (d,) = what_if(analysed(snapshot([cached], trace)), EXPANDABLE).devices
    start = d.start
    assert (start.inherited, start.segments, start.blocks, start.reserved_bytes) == (True, 1, 0, 20 * MiB)
    assert start.notes[0].startswith("The trace starts mid-run: 1 segments (20.00 MiB) were reserved before its "
                                     "first event, with no live block. The simulation starts from them as recorded")
    assert d.recorded.peak_reserved_bytes == 20 * MiB  # the recording's peak counts the inherited segment


def test_a_trace_that_disagrees_with_its_final_state_says_so():
    (d,) = what_if(real("nuggets_nightly_mini"), EXPANDABLE).devices
    assert d.start.consistent is False and d.start.inherited is False
    (note,) = d.start.notes
    assert note.startswith("The trace and the final state disagree (24 alloc events whose block is neither freed "
                           "later nor in the final segments")


# -- the recording next to the simulation -------------------------------------------------------------------------

def recorded_by_hand(path: str) -> dict:
    """Peaks and the OOM of device 0, walking the raw trace from an empty device (this sample starts empty)."""
    trace = raw(path)["device_traces"][0]
    reserved = requested = peak_reserved = peak_requested = 0
    oom = None
    for k, e in enumerate(trace):
        reserved += {"segment_alloc": e["size"], "segment_free": -e["size"]}.get(e["action"], 0)
        requested += {"alloc": e["size"], "free_completed": -e["size"]}.get(e["action"], 0)
        peak_reserved, peak_requested = max(peak_reserved, reserved), max(peak_requested, requested)
        if e["action"] == "oom" and oom is None:
            oom = {"event": k, "requested_bytes": e["size"], "reserved_bytes": reserved,
                   "capacity": reserved + e["device_free"]}
    return {"peak_reserved": peak_reserved, "peak_requested": peak_requested, "oom": oom}


def test_the_recorded_oom_and_peaks_stand_next_to_the_simulated_ones():
    want = recorded_by_hand(FRAG_SAMPLE)
    (d,) = what_if(analyze(load_snapshot(FRAG_SAMPLE)), EXPANDABLE).devices
    rec = d.recorded
    assert (rec.peak_reserved_bytes, rec.peak_requested_bytes) == (want["peak_reserved"], want["peak_requested"])
    (oom,) = rec.ooms
    assert (oom.event, oom.requested_bytes, oom.reserved_bytes) == \
        (want["oom"]["event"], want["oom"]["requested_bytes"], want["oom"]["reserved_bytes"])
    assert d.memory == DeviceMemory(want["oom"]["capacity"], "the first recorded OOM")
    assert len(d.baseline.ooms) == 1 and d.given.ooms == ()
    # the sample ends at its OOM: the run that gets past it is not shown to avoid it
    assert d.outcome == "gets_past_recorded_failure" and d.given.peak_reserved_bytes <= want["oom"]["capacity"]
    assert d.avoids_oom is None and "the rest of the run was not recorded" in d.claim and "avoids" not in d.claim


# A tiny trace: a 20 MiB segment with a 20 MiB block, then a 20 MiB request fails with `device_free` free.
def tiny(device_free: int) -> dict:
    trace = [ev("segment_alloc", 0x7F0000000000, 20 * MiB), ev("alloc", 0x7F0000000000, 20 * MiB),
             {"action": "oom", "device_free": device_free, "size": 20 * MiB, "stream": 0}]
    return snapshot([], trace)  # empty final state: the trace says what happened


def test_no_claim_when_the_model_does_not_reproduce_the_recorded_oom():
    # 100 MiB were free at the OOM: the model's device (20 + 100 MiB) holds a second 20 MiB segment
    (d,) = what_if(analysed(tiny(100 * MiB)), EXPANDABLE).devices
    assert d.memory.bytes == 120 * MiB and d.baseline.ooms == ()
    assert d.outcome == "unknown" and d.claim == (
        "the model does not reproduce the recorded OOM (event 2) under the recorded settings, so it cannot tell "
        "whether expandable_segments:True would avoid it")


def test_would_not_help_only_when_the_model_reproduces_the_oom():
    # nothing free: 20 MiB more cannot be had under any setting
    (d,) = what_if(analysed(tiny(0)), EXPANDABLE).devices
    assert len(d.baseline.ooms) == 1 and len(d.given.ooms) == 1
    assert d.outcome == "still_ooms" and d.claim.startswith(
        "expandable_segments:True would not help: simulated, the run still runs out of memory (1 OOM(s), the first at "
        "event 2)")


def went_on(after: int) -> dict:
    """`tiny(0)`, its 20 MiB block then freed and `after` more 4 MiB tensors made and freed: the OOM was caught and
    the program went on."""
    a = 0x7F0000000000
    data = tiny(0)
    trace = data["device_traces"][0] + [ev("free_requested", a, 20 * MiB), ev("free_completed", a, 20 * MiB)]
    for _ in range(after):
        trace += [ev("alloc", a, 4 * MiB), ev("free_requested", a, 4 * MiB), ev("free_completed", a, 4 * MiB)]
    data["device_traces"] = [trace]
    return data


@pytest.mark.parametrize("after, outcome", [(0, "gets_past_recorded_failure"), (5, "avoids_oom")])
def test_avoids_the_oom_only_where_the_recording_goes_on_past_it(after, outcome):
    """Halved, both 20 MiB requests fit the 20 MiB device. With nothing after the OOM the recording cannot show
    what the changed program does next; with most of its allocations after it (the program caught the OOM and
    went on), it can."""
    from fragviz.simulate.reshape import parse_scale

    (d,) = what_if(analysed(went_on(after)), None, changes=[parse_scale("no_stack=0.5")]).devices
    assert len(d.baseline.ooms) == 1 and d.given.ooms == () and d.outcome == outcome
    assert d.avoids_oom is (True if after else None)
    assert ("avoids the recorded OOM" in d.claim) is bool(after)
    assert ("gets past the recorded failure" in d.claim) is not bool(after)


# -- the series the page draws -----------------------------------------------------------------------------------

def test_the_series_is_min_and_max_per_bucket():
    a = 0x7F0000000000
    trace = [ev("segment_alloc", a, 20 * MiB), ev("alloc", a, 4 * MiB), ev("alloc", a + 4 * MiB, 4 * MiB),
             ev("free_requested", a, 4 * MiB), ev("free_completed", a, 4 * MiB)]
    analysis = analysed(snapshot([], trace))
    settings = parse_alloc_conf("")
    # states by hand: 0 empty; after event 1 a 20 MiB segment with 4 MiB live (one 16 MiB gap, pinned by the live
    # block: 16 of 20 MiB non-releasable); after event 2 one 12 MiB gap; after event 3 (the free, done at once: its
    # free_completed follows) gaps of 4 and 12 MiB, 16 MiB; event 4 (that free_completed) asks nothing of it
    (r,) = simulate_device(analysis, 0, [("default", settings)], series_points=10**6)
    s = r.series
    assert s.start.tolist() == [0, 2, 3, 4]
    assert s.maxs["reserved"].tolist() == [0, 20 * MiB, 20 * MiB, 20 * MiB]
    assert s.maxs["fragmentation"].tolist() == [0.0, 0.8, 0.6, 0.8]
    (r,) = simulate_device(analysis, 0, [("default", settings)], series_points=2)
    s = r.series  # 6 states in buckets of 3: states 0 and 2, then 3 and 4
    assert s.start.tolist() == [0, 3] and s.bucket == 3
    assert (s.mins["reserved"].tolist(), s.maxs["reserved"].tolist()) == ([0, 20 * MiB], [20 * MiB, 20 * MiB])
    assert (s.mins["fragmentation"].tolist(), s.maxs["fragmentation"].tolist()) == ([0.0, 0.6], [0.8, 0.8])


def old_detour(analysis, conf: str, capacity):
    """What the page did before: the run as a PyTorch snapshot dict, parsed and analysed again."""
    (r,) = simulate_device(analysis, 0, [(conf, parse_alloc_conf(conf))], capacity)
    from fragviz.simulate.whatif import run_free

    result = run_free(analysis, 0, parse_alloc_conf(conf), r.memory.bytes, record=True)
    data = snapshot_dict([result.allocator], analysis.snapshot.frames, analysis.snapshot.stacks, {"origin": "simulated"})
    events = np.array([e["event"] for e in result.allocator.trace], np.int64)
    figures = per_event(analyze(parse_snapshot(RawSnapshot("sim", data, "pickle", None, 4, "", 0))).replays[0].series)
    return np.concatenate([[0], events + 1]), figures


@pytest.mark.parametrize("path,conf", [(FRAG_SAMPLE, EXPANDABLE), (FRAG_SAMPLE, ""),
                                       (os.path.join(REAL, "ftcourse.pickle"), "max_split_size_mb:128")])
def test_the_series_has_the_figures_of_the_old_detour(path, conf):
    analysis = analyze(load_snapshot(path))
    x, old = old_detour(analysis, conf, None)
    last = {int(v): i for i, v in enumerate(x)}  # the state after the last trace entry of each event
    (r,) = simulate_device(analysis, 0, [(conf, parse_alloc_conf(conf))], series_points=10**9)
    new = r.series
    assert set(last) <= set(new.start.tolist())  # every state the detour drew is drawn
    at = [last[int(v)] for v in new.start if int(v) in last]
    kept = [j for j, v in enumerate(new.start) if int(v) in last]
    assert len(at) > 1000
    assert new.maxs["reserved"][kept].tolist() == old["reserved"][at].tolist()
    assert np.allclose(new.maxs["fragmentation"][kept], old["fragmentation"][at], rtol=0, atol=1e-12)


def test_the_series_starts_from_the_recorded_start():
    # The detour re-inferred inherited block sizes under the simulated settings; the series reads the simulation
    # itself, so its start is the recorded start.
    analysis = real("hanmin_train_19k")
    (r,) = simulate_device(analysis, 0, [(EXPANDABLE, parse_alloc_conf(EXPANDABLE))], series_points=100)
    recorded = per_event(analysis.replays[0].series)
    s = r.series
    assert s.mins["reserved"][0] <= recorded["reserved"][0] <= s.maxs["reserved"][0]
    assert s.mins["fragmentation"][0] <= recorded["fragmentation"][0] <= s.maxs["fragmentation"][0]


# -- the app's job runner --------------------------------------------------------------------------------------

def wait_done(runner: WhatIfRuns, job_id: str):
    deadline = time.monotonic() + 60
    while not runner.peek(job_id).done:
        assert time.monotonic() < deadline, "the job did not finish"
        time.sleep(0.01)
    return runner.read(job_id)


def test_the_runner_is_bounded_and_forgets_what_was_read():
    now = [0.0]
    runner = WhatIfRuns(max_running=1, clock=lambda: now[0])
    gate = threading.Event()
    first = runner.start(lambda job: gate.wait(60) and "done")
    with pytest.raises(Busy):
        runner.start(lambda job: "second")
    assert runner.read(first).done is False and runner.read(first).read_at is None  # running: not read yet
    gate.set()
    job = wait_done(runner, first)
    assert (job.result, job.error) == ("done", None)
    now[0] = 29.0  # a poll whose answer the browser dropped asks again: the result is still there
    assert runner.read(first) is job
    now[0] = 31.0
    assert runner.peek(first) is None and runner.read(first) is None and runner.held() == 0
    second = runner.start(lambda job: 1 / 0)  # room again
    assert wait_done(runner, second).error == "the simulation failed (ZeroDivisionError: division by zero)"


def test_the_runner_drops_results_nobody_read():
    now = [0.0]
    runner = WhatIfRuns(keep_seconds=600, clock=lambda: now[0])
    job_id = runner.start(lambda job: "result")
    while not runner.peek(job_id).done:
        time.sleep(0.01)
    now[0] = 599.0
    assert runner.peek(job_id) is not None
    now[0] = 601.0
    assert runner.peek(job_id) is None and runner.held() == 0
