"""The figure builders: records in, figures out, checked against hand-made inputs."""
from __future__ import annotations

import pytest

import numpy as np

from fragviz.model import Block, BlockState, Frame, Segment
from fragviz.model.lod import Timeline
from fragviz.library import AnnotationSpan
from fragviz.ui.figures.gaps import gap_histogram_figure, pow2_label
from fragviz.ui.figures.style import round_ticks
from fragviz.ui.figures.segments import segment_map_figure
from fragviz.ui.figures.stacks import icicle_figure
from fragviz.ui.figures.timeline import timeline_figure

MiB = 1024**2


def timeline_record(bucket: int, n: int, time_us: list[int] | None = None) -> Timeline:
    figures = ("allocated", "requested", "reserved", "free")
    mins = {k: np.full(n, MiB) for k in figures} | {"fragmentation": np.full(n, 0.5)}
    maxs = {k: np.full(n, 3 * MiB) for k in figures} | {"fragmentation": np.full(n, 0.5)}
    times, t0 = (None, None) if time_us is None else (np.array(time_us), time_us[0])
    return Timeline(bucket, np.arange(0, n * bucket, bucket), mins, maxs, times, t0)


def test_timeline_draws_min_and_max_bands_when_summarised():
    raw = timeline_figure(timeline_record(1, 10), {"oom": [4]})
    lod = timeline_figure(timeline_record(64, 10), {})
    assert len(raw.data) == 4 + 1 + 1  # four lines, fragmentation, the OOM markers
    assert len(lod.data) == 4 * 2 + 1  # a min and a max trace per figure, fragmentation
    assert [t.fill for t in lod.data[:2]] == [None, "tonexty"]
    assert raw.layout.yaxis.title.text == "MiB" and list(raw.data[0].y) == [3.0] * 10  # scaled to the unit
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
    fig = segment_map_figure([b, a], lambda stack: f"site {stack}")
    traces = {t.name: t for t in fig.data}
    assert set(traces) == {"allocated", "rounding waste", "pending free", "free"}
    assert list(traces["free"].x) == [14.0] and list(traces["free"].base) == [6.0]
    assert list(traces["rounding waste"].x) == [0.5] and list(traces["rounding waste"].base) == [3.5]
    assert list(traces["pending free"].customdata) == ["1:1"]
    assert traces["allocated"].y[0].endswith("0x10000000")  # the larger segment first
    assert "site 0" in traces["allocated"].hovertext[0]


def test_hover_text_escapes_markup():
    a = seg(0x1000_0000, (2 * MiB, 2 * MiB, BlockState.ACTIVE_ALLOCATED, 0))
    fig = segment_map_figure([a], lambda stack: "<script>x</script>")
    assert "<script>" not in fig.data[0].hovertext[0] and "&lt;script&gt;" in fig.data[0].hovertext[0]


def test_gap_histogram_buckets_by_log2_size():
    gaps = [512, 700, 3 * MiB, 5 * MiB, 6 * MiB]
    fig = gap_histogram_figure(gaps, mark=4 * MiB, largest=6 * MiB)
    counts = dict(zip(fig.data[0].customdata, fig.data[0].y))
    assert counts["512 B–1.00 KiB"] == 2 and counts["2.00 MiB–4.00 MiB"] == 1 and counts["4.00 MiB–8.00 MiB"] == 2
    assert sum(fig.data[0].y) == len(gaps)
    assert dict(zip(fig.data[1].customdata, fig.data[1].y))["4.00 MiB–8.00 MiB"] == 11.0
    assert "6.00 MiB" in fig.layout.title.text
    # bucket e (2**e to 2**(e+1) bytes) is drawn over e..e+1 on a log2 axis: 512 B is 9, 4 MiB is 22
    assert list(fig.data[0].x) == [e + 0.5 for e in range(9, 23)] and list(fig.layout.xaxis.range) == [9, 23]
    assert fig.layout.shapes[0].x0 == 22.0 and fig.layout.annotations[0].text == "request 4.00 MiB (dashed line)"


def test_icicle_values_add_up():
    f1, f2, f3 = Frame("a.py", 1, "main"), Frame("b.py", 2, "layer"), Frame("c.py", 3, "other")
    fig = icicle_figure({(f2, f1): 10, (f3, f1): 5, (f1,): 1})
    values = dict(zip(fig.data[0].ids, fig.data[0].values))
    assert values["root"] == 16
    # main, shared by every stack, is folded into the root: layer and other are the first level drawn
    assert fig.data[0].labels[0] == "all (via a.py:1 main)"
    by_label = dict(zip(fig.data[0].labels, fig.data[0].values))
    assert by_label["layer (b.py:2)"] == 10 and by_label["other (c.py:3)"] == 5
    assert set(fig.data[0].parents[1:]) == {"root"}


def test_timeline_by_time_carries_events_in_customdata():
    rec = timeline_record(1, 4, [10_000_000, 10_500_000, 12_000_000, 13_000_000])
    fig = timeline_figure(rec, {"oom": [2]}, axis="time")
    assert list(fig.data[0].x) == [0.0, 0.5, 2.0, 3.0] and list(fig.data[0].customdata) == [0, 1, 2, 3]
    assert fig.layout.xaxis.title.text == "seconds since the first event"
    assert list(fig.data[-1].x) == [2.0]  # the OOM by time
    by_event = timeline_figure(rec, {})
    assert list(by_event.data[0].x) == [0, 1, 2, 3] and list(by_event.data[0].customdata) == [0.0, 0.5, 2.0, 3.0]


def test_gap_histogram_ticks_are_few_round_powers_of_two():
    # 512 B to 1 GiB: 2**9 .. 2**30, 22 powers; every 5th (2**10, 2**15, ...) keeps 1 KiB, 1 MiB, 1 GiB
    fig = gap_histogram_figure([512, 1024**3 - 1], mark=None, largest=0)
    assert list(fig.layout.xaxis.tickvals) == [10, 15, 20, 25, 30]
    assert list(fig.layout.xaxis.ticktext) == ["1 KiB", "32 KiB", "1 MiB", "32 MiB", "1 GiB"]
    assert fig.layout.xaxis.tickangle == 0 and fig.layout.xaxis.automargin
    narrow = gap_histogram_figure([3 * MiB, 5 * MiB], mark=None, largest=0)  # 2**21 .. 2**23
    assert list(narrow.layout.xaxis.ticktext) == ["2 MiB", "4 MiB", "8 MiB"]
    assert fig.layout.legend.yanchor == "bottom" and fig.layout.legend.y >= 1  # above the plot, off the ticks
    assert [pow2_label(e) for e in (0, 9, 10, 29, 40)] == ["1 B", "512 B", "1 KiB", "512 MiB", "1 TiB"]


def test_gap_histogram_s_mib_axis_ticks_at_round_values():
    # two gaps of 3.7 MiB in one bucket (7.4 MiB in it): its MiB axis ticks 0, 2, 4, 6, 8, spanning that point
    gaps = [int(3.7 * MiB), int(3.7 * MiB)] + [int(1.2 * MiB)] * 3
    fig = gap_histogram_figure(gaps, mark=None, largest=0)
    highest = max(fig.data[1].y)
    assert highest == pytest.approx(7.4, abs=0.01)
    assert list(fig.layout.yaxis2.tickvals) == [0, 2, 4, 6, 8] and fig.layout.yaxis2.range[1] >= 8 > highest
    for top, step in ((0.37, 0.1), (99, 20), (1234.5, 500)):
        ticks = round_ticks(top)["tickvals"]
        assert ticks[-1] >= top and all(t == pytest.approx(i * step) for i, t in enumerate(ticks))


def test_timeline_draws_steps_and_round_fragmentation_ticks():
    for bucket in (1, 64):
        fig = timeline_figure(timeline_record(bucket, 5), {})
        assert {t.line.shape for t in fig.data} == {"hv"}
        assert list(fig.layout.yaxis2.tickvals) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
        assert fig.layout.yaxis2.tickformat == ".0%" and fig.layout.yaxis2.tickmode == "array"


def test_timeline_draws_annotated_spans_by_event_and_by_time():
    rec = timeline_record(1, 6, [10_000_000 + t for t in (0, 1_000, 2_000, 3_000, 4_000, 5_000)])
    spans = [AnnotationSpan("forward", 1, 3, 10_000_500, 10_002_500),
             AnnotationSpan("Optimizer.step#AdamW.step", 4, 6, 10_003_500, 10_005_000, closed=False)]
    by_event = timeline_figure(rec, {}, spans=spans)
    band, labels = by_event.data[0], by_event.data[1]
    assert band.fill == "toself" and band.name == "annotated spans (record_function)" and band.showlegend is not False
    assert list(band.x) == [1, 3, 3, 1, 1, None, 4, 6, 6, 4, 4, None] and band.yaxis == "y2"
    assert list(labels.text) == ["forward", "Optimizer.step#AdamW.step"] and list(labels.x) == [1, 4]
    assert "no END recorded" in labels.hovertext[1] and "2.000 ms" in labels.hovertext[0]
    by_time = timeline_figure(rec, {}, spans=spans, axis="time")
    band, labels = by_time.data[0], by_time.data[1]
    assert list(band.x)[:5] == [0.0005, 0.0025, 0.0025, 0.0005, 0.0005]  # their own times, in seconds
    assert list(labels.customdata) == [1, 4]  # a click on a name selects the span's first state
    assert all(t.name != "annotation" for t in by_time.data)  # no more ticks on the axis


def test_segment_map_orders_rows_by_pool_stream_and_size_whatever_their_state():
    free_big = Segment(0, 0x9000_0000, 64 * MiB, 0, "large", (Block(0x9000_0000, 64 * MiB, 0, BlockState.INACTIVE, -1),))
    used = seg(0x1000_0000, (2 * MiB, 2 * MiB, BlockState.ACTIVE_ALLOCATED, 0))
    used_big = seg(0x2000_0000, (20 * MiB, 20 * MiB, BlockState.ACTIVE_ALLOCATED, 0))
    other_stream = Segment(0, 0x3000_0000, 80 * MiB, 7, "large",
                           (Block(0x3000_0000, 80 * MiB, 0, BlockState.INACTIVE, -1),))
    small = Segment(0, 0x4000_0000, 2 * MiB, 0, "small", (Block(0x4000_0000, 2 * MiB, 512, BlockState.ACTIVE_ALLOCATED, 0),))
    private = Segment(0, 0x5000_0000, 200 * MiB, 0, "large",
                      (Block(0x5000_0000, 200 * MiB, 0, BlockState.INACTIVE, -1),), pool_id=(0, 1))
    segments = [used, private, free_big, small, other_stream, used_big]
    fig = segment_map_figure(segments, lambda s: "")
    rows = list(fig.layout.yaxis.categoryarray)
    # general pool: large stream 0 by size (the free one first), large stream 7, small; then the private pool
    assert [r.split()[-1] for r in rows] == ["0x90000000", "0x20000000", "0x10000000", "0x30000000", "0x40000000",
                                             "0x50000000"]
    assert fig.layout.yaxis.categoryorder == "array" and fig.layout.yaxis.autorange == "reversed"
    assert not fig.layout.annotations  # nothing folded


def test_segment_map_folds_the_smallest_and_says_how_many():
    segments = [seg(0x1000_0000 + i * 0x100_0000, ((i + 1) * MiB, 0, BlockState.INACTIVE, -1)) for i in range(10)]
    fig = segment_map_figure(segments, lambda s: "", max_rows=4)
    drawn = {int(r.split()[-1], 16) for r in fig.layout.yaxis.categoryarray}
    assert drawn == {0x1000_0000 + i * 0x100_0000 for i in (6, 7, 8, 9)}  # the four largest
    assert fig.layout.annotations[0].text.startswith("6 smaller segments folded: showing the 4 largest of 10")
    assert list(fig.layout.xaxis.range) == [0, 10.0] and fig.layout.xaxis.title.text == "offset in segment (MiB)"
    everything = segment_map_figure(segments, lambda s: "", max_rows=None)
    assert len(everything.layout.yaxis.categoryarray) == 10 and not everything.layout.annotations


def test_difference_rows_keep_the_end_of_long_sites_and_the_whole_in_the_hover():
    from fragviz.ui.figures.compare import SITE_LABEL_CHARS, difference_figure

    long = ("/home/user/projects/training/.venv/lib/python3.11/site-packages/transformers/models/llama/"
            "modeling_llama.py:412 LlamaAttention.forward")
    twin = long.replace(":412", ":413")  # shortened alike or not, two sites stay two rows
    rows = [{"site": long, "bytes_a": 2 * MiB, "bytes_b": 6 * MiB}, {"site": twin, "bytes_a": 0, "bytes_b": MiB}]
    fig = difference_figure(rows, "A", "B")
    labels = list(fig.layout.yaxis.ticktext)
    assert len(labels) == 2 and all(len(t) <= SITE_LABEL_CHARS for t in labels)
    assert labels[0].endswith("modeling_llama.py:412 LlamaAttention.forward")  # the end kept, the middle cut
    assert list(fig.data[0].customdata) == [long, twin] and list(fig.data[1].x) == [6.0, 1.0]
    assert list(fig.data[0].y) == [0, 1] and list(fig.layout.yaxis.tickvals) == [0, 1]
