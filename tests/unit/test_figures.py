"""The figure builders: records in, figures out, checked against hand-made inputs."""
from __future__ import annotations

import numpy as np

from fragviz.model import Block, BlockState, Frame, Segment
from fragviz.ui import figures

MiB = 1024**2


def timeline_record(bucket: int, n: int) -> dict:
    rec = {"bucket": bucket, "start": np.arange(0, n * bucket, bucket)}
    for k in ("allocated", "requested", "reserved", "free"):
        rec[k + "_min"] = np.full(n, MiB)
        rec[k + "_max"] = np.full(n, 3 * MiB)
    rec["fragmentation_min"] = rec["fragmentation_max"] = np.full(n, 0.5)
    return rec


def test_timeline_draws_min_and_max_bands_when_summarised():
    raw = figures.timeline_figure(timeline_record(1, 10), {"oom": [4]}, event=7)
    lod = figures.timeline_figure(timeline_record(64, 10), {}, event=None)
    assert len(raw.data) == 4 + 1 + 1  # four lines, fragmentation, the OOM markers
    assert len(lod.data) == 4 * 2 + 1  # a min and a max trace per figure, fragmentation
    assert [t.fill for t in lod.data[:2]] == [None, "tonexty"]
    assert raw.layout.yaxis.title.text == "MiB" and list(raw.data[0].y) == [3.0] * 10  # scaled to the unit
    assert raw.layout.shapes[0].x0 == 7
    assert raw.data[-1].name == "OOM" and list(raw.data[-1].x) == [4]


def seg(addr: int, *blocks: tuple[int, int, BlockState, int]) -> Segment:
    out, cursor = [], addr
    for size, requested, state, stack in blocks:
        out.append(Block(cursor, size, requested, state, stack))
        cursor += size
    return Segment(0, addr, cursor - addr, 0, "large", tuple(out))


def test_segment_map_draws_blocks_to_scale_with_rounding_waste():
    a = seg(0x1000_0000, (4 * MiB, 4 * MiB - 512 * 1024, BlockState.ACTIVE_ALLOCATED, 0),
            (2 * MiB, 2 * MiB, BlockState.ACTIVE_PENDING_FREE, -1), (14 * MiB, 0, BlockState.INACTIVE, -1))
    b = seg(0x2000_0000, (2 * MiB, 2 * MiB, BlockState.ACTIVE_ALLOCATED, 1))
    fig = figures.segment_map_figure([b, a], lambda stack: f"site {stack}")
    traces = {t.name: t for t in fig.data}
    assert set(traces) == {"allocated", "rounding waste", "pending free", "free"}
    assert list(traces["free"].x) == [14.0] and list(traces["free"].base) == [6.0]
    assert list(traces["rounding waste"].x) == [0.5] and list(traces["rounding waste"].base) == [3.5]
    assert list(traces["pending free"].customdata) == ["1:1"]
    assert traces["allocated"].y[0].endswith("0x10000000")  # the larger segment first
    assert "site 0" in traces["allocated"].hovertext[0]


def test_hover_text_escapes_markup():
    a = seg(0x1000_0000, (2 * MiB, 2 * MiB, BlockState.ACTIVE_ALLOCATED, 0))
    fig = figures.segment_map_figure([a], lambda stack: "<script>x</script>")
    assert "<script>" not in fig.data[0].hovertext[0] and "&lt;script&gt;" in fig.data[0].hovertext[0]


def test_gap_histogram_buckets_by_log2_size():
    gaps = [512, 700, 3 * MiB, 5 * MiB, 6 * MiB]
    fig = figures.gap_histogram_figure(gaps, mark=4 * MiB, largest=6 * MiB)
    counts = dict(zip(fig.data[0].x, fig.data[0].y))
    assert counts["512 B–1.00 KiB"] == 2 and counts["2.00 MiB–4.00 MiB"] == 1 and counts["4.00 MiB–8.00 MiB"] == 2
    assert sum(fig.data[0].y) == len(gaps)
    assert dict(zip(fig.data[1].x, fig.data[1].y))["4.00 MiB–8.00 MiB"] == 11.0
    assert "6.00 MiB" in fig.layout.title.text


def test_icicle_values_add_up():
    f1, f2, f3 = Frame("a.py", 1, "main"), Frame("b.py", 2, "layer"), Frame("c.py", 3, "other")
    fig = figures.icicle_figure({(f2, f1): 10, (f3, f1): 5, (f1,): 1})
    values = dict(zip(fig.data[0].ids, fig.data[0].values))
    assert values["root"] == 16
    main = fig.data[0].ids[fig.data[0].labels.index("main (a.py:1)")]
    assert values[main] == 16


def test_timeline_by_time_carries_events_in_customdata():
    rec = timeline_record(1, 4)
    rec["time_us_min"] = np.array([10_000_000, 10_500_000, 12_000_000, 13_000_000])
    rec["t0_us"] = 10_000_000
    fig = figures.timeline_figure(rec, {"oom": [2]}, event=2, axis="time")
    assert list(fig.data[0].x) == [0.0, 0.5, 2.0, 3.0] and list(fig.data[0].customdata) == [0, 1, 2, 3]
    assert fig.layout.xaxis.title.text == "seconds since the first event"
    assert fig.layout.shapes[0].x0 == 2.0 and list(fig.data[-1].x) == [2.0]  # the line and the OOM by time
    by_event = figures.timeline_figure(rec, {}, event=None)
    assert list(by_event.data[0].x) == [0, 1, 2, 3] and list(by_event.data[0].customdata) == [0.0, 0.5, 2.0, 3.0]
