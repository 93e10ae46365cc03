"""The compare page's aligned chart, built without a server: a side per colour, each side's selected state."""
from __future__ import annotations

import numpy as np

from fragviz.model.lod import Timeline
from fragviz.ui.figures.compare import SIDE_COLORS, SideSeries, aligned_figure

MiB = 2**20


def timeline(starts: list[int], allocated: list[int], reserved: list[int], bucket: int = 1) -> Timeline:
    maxs = {"allocated": np.array(allocated), "reserved": np.array(reserved)}
    return Timeline(bucket, np.array(starts), maxs, maxs)


def test_both_sides_on_the_shared_axis_with_their_selected_states():
    a = SideSeries("A", np.array([0.5, 1.0, 2.0]), timeline([0, 10, 30], [MiB, 3 * MiB, 2 * MiB], [4 * MiB] * 3),
                   10, 1.0)
    b = SideSeries("B", np.array([1.0, 2.5]), timeline([0, 64], [2 * MiB, 5 * MiB], [8 * MiB] * 2, bucket=64),
                   100, 2.2)
    fig = aligned_figure([a, b], "step")
    assert [t.name for t in fig.data] == ["A allocated", "A reserved", "B allocated", "B reserved"]
    assert [t.line.color for t in fig.data] == [SIDE_COLORS["A"]] * 2 + [SIDE_COLORS["B"]] * 2
    assert list(fig.data[0].x) == [0.5, 1.0, 2.0] and list(fig.data[0].y) == [1.0, 3.0, 2.0]  # MiB
    assert list(fig.data[3].customdata) == [0, 64]  # the states, for the hover
    assert "max" in fig.data[2].hovertemplate and "max" not in fig.data[0].hovertemplate  # B summarised
    assert [(s.name, s.x0) for s in fig.layout.shapes] == [("A selected", 1.0), ("B selected", 2.2)]
    assert fig.layout.xaxis.title.text == "step" and fig.layout.yaxis.title.text == "MiB"


def test_a_side_without_a_selected_state_has_no_line():
    a = SideSeries("A", np.array([0.0]), timeline([0], [0], [0]), None, None)
    assert aligned_figure([a], "event").layout.shapes == ()
