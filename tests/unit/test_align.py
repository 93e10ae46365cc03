"""fragviz.replay.align: traces on a shared axis by event, time and step markers; every figure worked out by hand."""
from __future__ import annotations

import numpy as np
import pytest

from fragviz.replay.align import AlignmentRefused, by_event, by_markers, by_time, step_markers


def test_by_event_is_the_state_index():
    a = by_event(10)
    assert a.position([0, 5, 10]).tolist() == [0.0, 5.0, 10.0]
    assert a.state_at(4.7) == 4
    assert a.state_at(5.0) == 5
    assert a.state_at(-3) == 0 and a.state_at(99) == 10  # held within the trace


def test_by_time_every_state():
    # state K stamped with its time: positions 0, 0, 0.5 ms, 2 ms, 2 ms after t0
    a = by_time([0, 1, 2, 3, 4], [1000, 1000, 1500, 3000, 3000], 1000, last=4)
    assert np.allclose(a.position([0, 1, 2, 3, 4]), [0, 0, 0.0005, 0.002, 0.002])
    assert a.state_at(0.0) == 1  # the last state stamped at or before t0: states 0 and 1 share it
    assert a.state_at(0.0004) == 1  # 1 + 0.4 / 0.5 = 1.8: state 1 is still current
    assert a.state_at(0.0005) == 2
    assert a.state_at(0.0025) == 4  # past the last time: the last state
    assert a.state_at(-1.0) == 0


def test_by_time_from_summarised_points_is_linear_between_them():
    # one point per 16 states, as a summarised timeline gives: states 0, 16, 32 at 0, 160, 480 µs; 40 states
    a = by_time([0, 16, 32], [0, 160, 480], 0, last=40)
    assert np.allclose(a.position([8, 24]), [80e-6, 320e-6])
    assert np.isclose(a.position([40])[0], 480e-6)  # past the last point the position holds
    assert a.state_at(400e-6) == 28  # 16 + (400 - 160) / (480 - 160) * 16


def test_by_time_takes_times_that_go_back_as_the_latest_before():
    a = by_time([0, 1, 2, 3], [0, 200, 100, 300], 0, last=3)
    assert np.allclose(a.position([0, 1, 2, 3]), [0, 200e-6, 200e-6, 300e-6])


@pytest.mark.parametrize("times, t0", [(None, None), ([], 0), ([1, 2], None)])
def test_by_time_refuses_a_trace_without_times(times, t0):
    with pytest.raises(AlignmentRefused, match="no times"):
        by_time([0, 1], times, t0, last=1)


def test_by_markers_numbers_steps_from_one_and_interpolates():
    a = by_markers([10, 30, 70], last=100)
    assert a.position([10, 30, 70]).tolist() == [1.0, 2.0, 3.0]
    assert a.position([20, 50]).tolist() == [1.5, 2.5]  # halfway between markers 1 and 2, 2 and 3
    # outside the markers the axis goes on at the nearest interval's rate: 1/20 step a state before, 1/40 after
    assert a.position([0, 100]).tolist() == [0.5, 3.75]
    assert a.state_at(2.5) == 50
    assert a.state_at(2.49) == 49  # 30 + 0.49 * 40 = 49.6
    assert a.state_at(0.5) == 0 and a.state_at(3.75) == 100
    assert a.state_at(0.2) == 0 and a.state_at(5.0) == 100  # held within the trace


def test_the_kth_marker_of_a_meets_the_kth_of_b():
    a, b = by_markers([10, 30, 70], last=100), by_markers([100, 200, 300, 400], last=450)
    for step, state_a, state_b in ((1.0, 10, 100), (2.0, 30, 200), (2.5, 50, 250), (3.0, 70, 300)):
        assert (a.state_at(step), b.state_at(step)) == (state_a, state_b)


def test_by_markers_sorts_and_keeps_the_first_of_markers_at_one_state():
    assert by_markers([70, 10, 30], last=100).position([50]).tolist() == [2.5]
    a = by_markers([10, 10, 30], last=40)
    assert a.states.tolist() == [10, 30] and a.positions.tolist() == [1.0, 3.0]


@pytest.mark.parametrize("markers, said", [([5], "1 step marker "), ([], "0 step markers")])
def test_by_markers_refuses_fewer_than_two(markers, said):
    with pytest.raises(AlignmentRefused, match=said):
        by_markers(markers, last=10)


def test_step_markers_are_snapshot_actions_where_there_are_two():
    assert step_markers([40, 12], [("fwd", 3), ("fwd", 9)]) == ([12, 40], "`snapshot` actions")


def test_step_markers_else_the_most_frequent_repeated_annotation():
    starts = [("fwd", 3), ("step", 5), ("fwd", 9), ("step", 11), ("fwd", 15), ("opt", 20)]
    assert step_markers([7], starts) == ([3, 9, 15], "starts of 'fwd'")
    tie = [("b", 1), ("a", 2), ("b", 5), ("a", 6)]
    assert step_markers([], tie) == ([1, 5], "starts of 'b'")  # a tie goes to the name that starts first


def test_step_markers_without_repeats_are_the_few_snapshot_actions():
    markers, what = step_markers([8], [("x", 1), ("y", 2)])
    assert markers == [8] and what == "`snapshot` actions, and no record_function name used twice"
    with pytest.raises(AlignmentRefused, match=r"^it has 1 step marker \(`snapshot` actions, and no record_func"):
        by_markers(markers, last=10, what=what)
