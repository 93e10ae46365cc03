"""The headline fragmentation figure (non-releasable / reserved bytes) on every real snapshot, against an
independent computation from the file's own dicts, at the end and at the reserved peak; and the figure that
tells a healthy run from a failing one."""
from __future__ import annotations

import os

import numpy as np
import pytest

from fragviz.replay.analysis import analyze
from fragviz.model.metrics import state_figures
from fragviz.doctor.report import report_of
from fragviz.snapshot import load_snapshot
from fragviz.snapshot.loader import read_raw
from tests.support.helpers import REAL

SMALL_PAGE, LARGE_PAGE = 2 << 20, 20 << 20
REAL_FILES = sorted(f for f in os.listdir(REAL) if f.endswith(".pickle")) if os.path.isdir(REAL) else []


def independent_non_releasable(raw: dict | list) -> dict[int, tuple[int, int]]:
    """(non-releasable, reserved) per device, from PyTorch's own segment dicts: written from the allocator's
    release rules, not from fragviz's model."""
    segments = raw["segments"] if isinstance(raw, dict) else raw
    out: dict[int, list[int]] = {}
    for seg in segments:
        totals = out.setdefault(int(seg["device"]), [0, 0])
        totals[1] += seg["total_size"]
        address = seg["address"]
        if seg.get("is_expandable"):
            page = SMALL_PAGE if seg["segment_type"] == "small" else LARGE_PAGE
            cursor = address
            for b in seg["blocks"]:
                if b["state"] == "inactive":
                    lo, hi = cursor, cursor + b["size"]
                    whole = ((hi - address) // page - -(-(lo - address) // page)) * page
                    totals[0] += b["size"] - max(0, whole)
                cursor += b["size"]
        elif any(b["state"] != "inactive" for b in seg["blocks"]):
            totals[0] += sum(b["size"] for b in seg["blocks"] if b["state"] == "inactive")
    return {d: (v[0], v[1]) for d, v in out.items()}


@pytest.mark.parametrize("name", REAL_FILES)
def test_final_figure_matches_an_independent_computation(name):
    path = os.path.join(REAL, name)
    expected = independent_non_releasable(read_raw(path).data)
    report = report_of(analyze(load_snapshot(path)))
    got = {d.device: d for d in report.devices}
    for device, (stuck, reserved) in expected.items():
        assert got[device].non_releasable_bytes == stuck, (name, device)
        assert got[device].reserved_bytes == reserved
        assert got[device].fragmentation == pytest.approx(stuck / reserved if reserved else 0.0)


@pytest.mark.parametrize("name", REAL_FILES)
def test_the_series_is_the_state_figure_at_every_checked_state(name):
    """The replay's running total equals the figure computed from the state's own segments (at the end, at the
    reserved peak and at states spread over the trace)."""
    analysis = analyze(load_snapshot(os.path.join(REAL, name)))
    for device, replay in analysis.replays.items():
        series = replay.series
        n = len(replay.trace)
        if not n:
            continue
        peak = int(np.argmax(series["reserved"]))
        for k in sorted({0, n, peak, *np.linspace(0, n, 7).astype(int)}):
            fig = state_figures(replay.segments_at(k))
            assert series["non_releasable"][k] == fig.non_releasable_bytes, (name, device, k)
        at_peak = report_of(analysis, device=device).devices[0].at_peak
        assert at_peak.state == peak
        assert at_peak.non_releasable_bytes == state_figures(replay.segments_at(peak)).non_releasable_bytes


@pytest.mark.parametrize("name", ["hanmin_train_19k.pickle", "cs336kk_ctx128_fullstep.pickle"])
def test_a_healthy_real_training_run_reads_low(name):
    """Two real training steps that ran to their end: a few percent of reserved memory is non-releasable, at the
    end and at the reserved peak, while the old headline (free scatter) read 98-99 % on them."""
    (device,) = report_of(analyze(load_snapshot(os.path.join(REAL, name)))).devices
    assert device.fragmentation < 0.05 and device.at_peak.fragmentation < 0.05
    assert device.free_scatter > 0.95
