"""The compare page's alignment on real snapshots in a real store: step markers put into real traces where the
test chooses them (no real file marks steps), times read from the files themselves, peaks from the replay."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from fragviz.replay.align import AlignmentRefused
from fragviz.replay.analysis import analyze
from fragviz.library import Library
from fragviz.snapshot import load_snapshot
from fragviz.ui.data.compare import CompareViews
from fragviz.ui.data.views import Views
from tests.support.helpers import real
from tests.support.step_traces import STEP, step_starts, with_snapshot_actions, with_step_annotations

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMED = "hanmin_train_19k.pickle"  # 19,464 timed events and two annotations used once each
UNTIMED = "ftcourse.pickle"  # 10,307 events without times
OTHER_RUN = "cs336kk_ctx128_fullstep.pickle"  # 19,052 timed events
SNAPSHOTS_AFTER = [999, 2499, 4999, 7499, 9999]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    where = tmp_path_factory.mktemp("align")
    a_path, a_markers = with_step_annotations(TIMED, step_starts(TIMED, 6), str(where / "steps_annotated.pickle"))
    b_path, b_markers = with_snapshot_actions(UNTIMED, SNAPSHOTS_AFTER, str(where / "steps_snapshots.pickle"))
    db = str(where / "store.sqlite")
    for path in (a_path, b_path, real(OTHER_RUN)):
        subprocess.run([sys.executable, "-m", "fragviz", "ingest", "--db", db, path], cwd=ROOT, check=True,
                       capture_output=True)
    reader = Library.open(db)  # what the dashboard reads through
    ids = {os.path.basename(r.name): r.id for r in reader.list_snapshots()}
    yield {"cv": CompareViews(Views(reader)), "a": ids["steps_annotated.pickle"], "b": ids["steps_snapshots.pickle"],
           "c": ids[OTHER_RUN], "a_markers": a_markers, "b_markers": b_markers, "a_path": a_path}
    reader.close()


def test_step_markers_are_the_ones_put_into_the_traces(built):
    cv = built["cv"]
    a, b = cv.side("A", built["a"], 0, "step"), cv.side("B", built["b"], 0, "step")
    assert a.alignment.states.tolist() == built["a_markers"]
    assert a.markers == f"starts of '{STEP}'"  # used 6 times; the file's own names once each
    assert b.alignment.states.tolist() == [i + 1 + k + 1 for k, i in enumerate(SNAPSHOTS_AFTER)]
    assert b.alignment.states.tolist() == built["b_markers"]
    assert b.markers == "`snapshot` actions"


def test_step_k_of_a_meets_step_k_of_b_and_halfway_between_markers(built):
    cv = built["cv"]
    sides = {s: cv.side(s, built[s.lower()], 0, "step") for s in ("A", "B")}
    for side, markers in ((sides["A"], built["a_markers"]), (sides["B"], built["b_markers"])):
        for k, (m, nxt) in enumerate(zip(markers, markers[1:]), start=1):
            assert cv.state_at(side, float(k)) == m
            assert cv.state_at(side, k + 0.5) == m + (nxt - m) // 2
        # every drawn point between two markers sits at k + its share of the way to the next
        for s, x in zip(side.timeline.start.tolist(), side.x.tolist()):
            k = next((k for k in range(len(markers) - 1) if markers[k] <= s <= markers[k + 1]), None)
            if k is not None:
                assert x == pytest.approx(k + 1 + (s - markers[k]) / (markers[k + 1] - markers[k]))


def test_time_alignment_is_refused_where_a_side_has_no_times(built):
    with pytest.raises(AlignmentRefused, match="no times"):
        built["cv"].side("B", built["b"], 0, "time")


def test_time_alignment_finds_the_state_current_at_a_time(built):
    cv = built["cv"]
    side = cv.side("C", built["c"], 0, "time")
    assert side.timeline.bucket > 1  # summarised: the state is looked up again among its bucket's
    with open(real(OTHER_RUN), "rb") as fh:
        times = np.array([e["time_us"] for e in pickle.load(fh)["device_traces"][0]], np.int64)
    stamped = np.concatenate([times[:1], times])  # state K is stamped with event K - 1's time, state 0 with event 0's
    for j in (0, 1, 777, 5000, 12345, len(times) - 2):
        x = (times[j] - times[0] + 0.5) / 1e6  # half a microsecond after event j
        expected = int(np.nonzero(stamped <= times[j])[0][-1])
        assert cv.state_at(side, x) == expected, j


def test_each_side_defaults_to_its_peak_of_allocated_bytes(built):
    allocated = analyze(load_snapshot(built["a_path"])).replays[0].series["allocated"]
    peak = built["cv"].peak_or_none(built["a"], 0)
    assert peak == int(np.argmax(allocated))
    _, figures, _ = built["cv"].views.state(built["a"], 0, peak)
    assert figures.allocated_bytes == int(allocated.max())
    assert built["cv"].peak_or_none(built["a"], 7) is None  # no such device


def test_step_alignment_is_refused_where_a_trace_marks_no_steps(built):
    # the real file as recorded: two annotations used once each, no `snapshot` action
    with pytest.raises(AlignmentRefused, match=r"^it has 0 step markers \(`snapshot` actions, and no record_function"):
        built["cv"].side("B", built["c"], 0, "step")
