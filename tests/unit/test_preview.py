"""The first picture (fragviz.replay.preview): requested and reserved bytes over time from the trace alone, checked
against the replay's own series, an independent computation, on every real snapshot and a synthetic one."""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from fragviz.replay.analysis import analyze
from fragviz.replay.preview import POINTS, snapshot_preview
from fragviz.snapshot import load_snapshot
from fragviz.snapshot.parse import parse_snapshot
from fragviz.snapshot.loader import RawSnapshot
from fragviz.allocator.synth import synthetic_snapshot
from tests.support.helpers import REAL

FILES = sorted(glob.glob(os.path.join(REAL, "*.pickle")))


def envelope(series: np.ndarray, ends: list[int]) -> list[int]:
    out, start = [], 0
    for end in ends:
        out.append(int(max(series[start:end + 1])))
        start = end + 1
    return out


def check(snap, points: int) -> None:
    analysis = analyze(snap)
    previews = snapshot_preview(snap, points)
    assert [p.device for p in previews] == snap.devices()
    for p in previews:
        replay = analysis.replays[p.device]
        n = len(replay.trace)
        assert p.events == n and p.event[-1] == n and len(p.event) == min(points, n + 1)
        assert all(a < b for a, b in zip(p.event, p.event[1:]))
        for name in ("requested", "reserved"):
            series = np.asarray(replay.series[name])
            assert getattr(p, name) == envelope(series, p.event), name
            assert max(getattr(p, name)) == int(series.max()), "no peak is lost to the sampling"


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_the_preview_is_the_replay_s_envelope_on_real_snapshots(path):
    check(load_snapshot(path), 40)


def test_the_preview_of_a_long_trace_has_a_page_s_width_of_points():
    data = synthetic_snapshot(5000, seed=2)
    snap = parse_snapshot(RawSnapshot("s.pickle", data, "pickle", None, 4, "", 0))
    check(snap, POINTS)


def test_an_empty_snapshot_has_no_preview():
    assert snapshot_preview(load_snapshot(os.path.join(REAL, "hitsbe_empty.pickle"))) == []
