"""The live chart's builders: points appended per trace, gaps as breaks, long recordings thinned."""
from __future__ import annotations

from fragviz.store.live import SAMPLE_COLUMNS
from fragviz.ui.figures.live import LIVE_TRACES, OOM_TRACE, live_figure, live_points, thin

MiB = 2**20


def samples(n: int, gap_at: int | None = None, nvml: bool = False) -> dict[str, list]:
    cols = {c: [] for c in SAMPLE_COLUMNS}
    for i in range(n):
        row = {"id": i + 1, "t": 1_700_000_000.0 + i, "device": 0, "pid": 7, "gap": int(i == gap_at),
               "allocated": (i + 1) * MiB, "requested": (i + 1) * MiB - 100, "reserved": 2 * (i + 1) * MiB,
               "active": (i + 1) * MiB, "inactive_split": 0, "alloc_retries": 0, "ooms": 0, "device_total": 64 * MiB,
               "device_free": 64 * MiB - 2 * (i + 1) * MiB, "nvml_used": 3 * (i + 1) * MiB if nvml else None,
               "largest_free": MiB, "fragmentation": 0.5, "non_releasable": (i + 1) * MiB}
        for c in SAMPLE_COLUMNS:
            cols[c].append(row[c])
    return cols


def test_points_per_trace_in_mib_and_percent():
    pts = live_points(samples(3))
    names = [name for name, _, _ in LIVE_TRACES]
    reserved = pts[names.index("reserved")]
    assert reserved[1] == [2.0, 4.0, 6.0]
    assert len(reserved[0]) == 3 and reserved[0][0].startswith("20")
    assert pts[[c for _, c, _ in LIVE_TRACES].index("fragmentation")][1] == [50.0, 50.0, 50.0]
    assert pts[OOM_TRACE] == ([], [])


def test_a_gap_breaks_every_line():
    pts = live_points(samples(4, gap_at=2))
    for k in range(OOM_TRACE):
        xs, ys = pts[k]
        assert len(xs) == 5 and ys[2] is None and xs[2] == xs[3]


def test_an_oom_is_marked_at_the_reserved_figure_nearest_in_time():
    s = samples(5)
    pts = live_points(s, [s["t"][3] + 0.2])
    assert pts[OOM_TRACE][1] == [8.0]


def test_the_figure_has_every_trace_in_order_and_says_when_nvml_is_missing():
    fig = live_figure(samples(3), [], simulated=True, nvml=False)
    assert len(fig.data) == len(LIVE_TRACES)
    assert "simulated" in fig.data[3].name and fig.data[3].fill == "tonexty"
    assert fig.data[5].yaxis == "y2"
    with_nvml = live_figure(samples(3, nvml=True), [], simulated=False, nvml=True)
    assert list(with_nvml.data[3].y) == [3.0, 6.0, 9.0] and "outside PyTorch" in with_nvml.data[3].name


def test_thinning_keeps_gaps_and_the_newest_sample():
    s = samples(1000, gap_at=501)
    t = thin(s, 100)
    assert len(t["t"]) <= 102 and t["id"][-1] == 1000 and 502 in t["id"]
    assert thin(s, 5000) is s
