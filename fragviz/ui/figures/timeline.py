"""Figure builders: records in, go.Figure out. Pure, so they are tested without a server."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import plotly.graph_objects as go

from fragviz.model.metrics import GENERAL_POOL, pool_key
from fragviz.model import BlockState, Frame, Segment
from fragviz.base.units import format_bytes

if TYPE_CHECKING:
    from fragviz.library import AnnotationSpan

# Okabe-Ito: distinguishable with every common colour-vision deficiency.
COLORS = {"allocated": "#0072B2", "requested": "#56B4E9", "reserved": "#E69F00", "free": "#009E73",
          "fragmentation": "#CC79A7", "oom": "#D55E00", "pending": "#F0E442", "waste": "#003F63",
          "segment": "#999999", "selected": "#000000"}
LABELS = {"allocated": "allocated", "requested": "requested", "reserved": "reserved", "free": "cached free"}


def unit_for(max_bytes: float) -> tuple[float, str]:
    for scale, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if max_bytes >= scale:
            return float(scale), name
    return 1.0, "B"


def timeline_figure(tl: dict[str, Any], markers: dict[str, list[int]], event: int | None,
                    x_range: Sequence[float] | None = None, axis: str = "event",
                    spans: Sequence[AnnotationSpan] = ()) -> go.Figure:
    """Memory over the trace (min/max per bucket where summarised), fragmentation on a second axis, the
    annotated spans (record_function ranges) shaded and named. Steps: a value holds until the next point.

    `axis` "time" draws against seconds since the trace's first event where the trace has time_us; every
    point's customdata is then its event index (clicks select events either way).
    """
    starts = np.asarray(tl["start"])
    top = max([float(np.max(tl[k + "_max"])) for k in LABELS if len(tl[k + "_max"])] or [0.0])
    scale, unit = unit_for(top)
    seconds = None
    if tl.get("t0_us") is not None and "time_us_min" in tl:
        seconds = (np.asarray(tl["time_us_min"]) - tl["t0_us"]) / 1e6
    timed = axis == "time" and seconds is not None
    # A plain list: plotly.js hands typed-array customdata to click events as nothing at all
    x, custom = (seconds, starts.tolist()) if timed else (starts, seconds)
    when = "t+%{x:.3f} s, event %{customdata}" if timed else (
        "event %{x}, t+%{customdata:.3f} s" if seconds is not None else "event %{x}")
    fig = go.Figure()
    extent = (float(x_range[0]), float(x_range[1])) if x_range else (
        (float(x[0]), float(x[-1])) if len(x) else (0.0, 1.0))
    _add_spans(fig, spans, tl.get("t0_us") if timed else None, extent)
    for key, label in LABELS.items():
        hi = np.asarray(tl[key + "_max"]) / scale
        lo = np.asarray(tl[key + "_min"]) / scale
        if tl["bucket"] > 1:
            fig.add_trace(go.Scatter(x=x, y=lo, mode="lines", line=dict(width=0, color=COLORS[key], shape="hv"),
                                     showlegend=False, hoverinfo="skip", legendgroup=key, customdata=custom))
            fig.add_trace(go.Scatter(x=x, y=hi, mode="lines", name=label,
                                     line=dict(width=1.5, color=COLORS[key], shape="hv"), fill="tonexty", legendgroup=key, customdata=custom,
                                     hovertemplate=f"{label} max %{{y:.3f}} {unit}<extra>{when}</extra>"))
        else:
            fig.add_trace(go.Scatter(x=x, y=hi, mode="lines", name=label, line=dict(width=1.5, color=COLORS[key],
                                     shape="hv"), customdata=custom,
                                     hovertemplate=f"{label} %{{y:.3f}} {unit}<extra>{when}</extra>"))
    fig.add_trace(go.Scatter(x=x, y=np.asarray(tl["fragmentation_max"]), mode="lines", name="fragmentation",
                             yaxis="y2", line=dict(width=1, color=COLORS["fragmentation"], dash="dot", shape="hv"),
                             customdata=custom,
                             hovertemplate=f"fragmentation %{{y:.1%}} of reserved is free but non-releasable"
                                           f"<extra>{when}</extra>"))
    to_x = (lambda events: np.interp(events, starts, seconds)) if timed else (lambda events: events)
    _add_markers(fig, {k: list(to_x(np.asarray(v))) if v else [] for k, v in markers.items()},
                 {k: v for k, v in markers.items()} if timed else None)
    if event is not None:
        fig.add_vline(x=float(to_x(np.asarray([event]))[0]), line=dict(color=COLORS["selected"], width=1))
    fig.update_layout(
        margin=dict(l=60, r=60, t=30, b=40), height=320, hovermode="x", uirevision=f"timeline-{axis}",
        legend=dict(orientation="h", y=1.12, x=0), clickmode="event",
        xaxis=dict(title="seconds since the first event" if timed else "event",
                   range=list(x_range) if x_range else None),
        yaxis=dict(title=unit, rangemode="tozero"),
        yaxis2=dict(title="fragmentation", overlaying="y", side="right", range=[0, 1], showgrid=False,
                    **FRACTION_TICKS))
    return fig


# Round ticks for a 0..1 axis: an overlaying axis otherwise takes its ticks from the primary's (19 %, 37 %, ...)
FRACTION_TICKS = dict(tickmode="array", tickvals=[0, 0.2, 0.4, 0.6, 0.8, 1.0], tickformat=".0%")
SPAN_COLOR = "rgba(86, 180, 233, 0.16)"
SPAN_ROWS = 3  # label rows, so that the names of neighbouring spans do not write over each other


def _add_spans(fig: go.Figure, spans: Sequence[AnnotationSpan], t0_us: int | None,
               extent: tuple[float, float]) -> None:
    """Each span a shaded band over the plot's height (the fragmentation axis runs 0..1) with its name at the
    top, written leftwards from its end when it starts in the last fifth of `extent` (the x range drawn), so
    that it stays inside the plot; one legend entry for them all. `t0_us` given: placed by their own times in
    seconds, else by event."""
    if not spans:
        return
    ends = [((s.start_us - t0_us) / 1e6, (s.end_us - t0_us) / 1e6) if t0_us is not None else
            (s.start_event, s.end_event) for s in spans]
    xs: list = []
    ys: list = []
    for a, b in ends:
        xs += [a, b, b, a, a, None]
        ys += [0, 0, 1, 1, 0, None]
    fig.add_trace(go.Scatter(x=xs, y=ys, yaxis="y2", mode="lines", fill="toself", fillcolor=SPAN_COLOR,
                             line=dict(width=1, color="#56B4E9"), name="annotated spans (record_function)",
                             legendgroup="spans", hoverinfo="skip"))
    rows = [0.97 - 0.09 * (i % SPAN_ROWS) for i in range(len(spans))]
    text = [_escape(s.name if len(s.name) <= 40 else s.name[:39] + "…") for s in spans]
    hover = [f"{_escape(s.name)}: events {s.start_event}–{s.end_event}, {(s.end_us - s.start_us) / 1e3:.3f} ms"
             + ("" if s.closed else " (no END recorded)") for s in spans]
    lo, hi = extent
    late = [hi > lo and (a - lo) / (hi - lo) > 0.8 for a, _ in ends]
    fig.add_trace(go.Scatter(x=[min(b, hi) if right else a for (a, b), right in zip(ends, late)], y=rows,
                             yaxis="y2", mode="text", text=text, textfont=dict(size=11, color="#1F4E79"),
                             textposition=["middle left" if right else "middle right" for right in late],
                             customdata=[s.start_event for s in spans] if t0_us is not None else None,
                             hovertext=hover, hovertemplate="%{hovertext}<extra></extra>", showlegend=False,
                             legendgroup="spans", name="annotated spans"))


def _add_markers(fig: go.Figure, markers: dict[str, list], events: dict[str, list[int]] | None = None) -> None:
    styles = {"oom": ("OOM", "x", COLORS["oom"], 12), "segment_alloc": ("device alloc", "triangle-up", "#555", 6),
              "segment_free": ("device free", "triangle-down", "#555", 6), "snapshot": ("snapshot", "diamond", "#000", 7)}
    for kind, xs in markers.items():
        if not len(xs) or kind not in styles:
            continue
        name, symbol, color, size = styles[kind]
        custom = list(events[kind]) if events else None
        fig.add_trace(go.Scatter(x=xs, y=[0] * len(xs), mode="markers", name=name, yaxis="y2", customdata=custom,
                                 marker=dict(symbol=symbol, color=color, size=size),
                                 hovertemplate=f"{name}<extra>event %{{{'x' if custom is None else 'customdata'}}}</extra>"))


BlockLabel = Callable[[int], str]


def segment_rows(segments: list[Segment], max_rows: int | None = None) -> list[int]:
    """Indices of the segments drawn, top row first: the `max_rows` largest (all when None), grouped by pool
    (general first, then private pools; large before small) and stream, largest first whatever their state."""
    drawn = range(len(segments))
    if max_rows is not None and len(segments) > max_rows:
        drawn = sorted(drawn, key=lambda i: (-segments[i].total_size, segments[i].address))[:max_rows]
    return sorted(drawn, key=lambda i: (pool_key(segments[i]), segments[i].pool, segments[i].stream,
                                        -segments[i].total_size, segments[i].address))


def segment_map_figure(segments: list[Segment], label: BlockLabel, max_rows: int | None = 120,
                       own_axis: bool = True) -> go.Figure:
    """One row per segment (see segment_rows for their order), its blocks to scale and coloured by state.

    customdata of every bar: "segment index:block index" into `segments`. Rows beyond `max_rows` are folded
    (the note says how many). `own_axis` False leaves the size axis to segment_axis_figure, drawn apart.
    """
    order = segment_rows(segments, max_rows)
    scale, unit = unit_for(max((segments[i].total_size for i in order), default=0))
    ylabels = [_segment_label(segments[i]) for i in order]
    kinds = {"allocated": [], "rounding waste": [], "pending free": [], "free": []}
    for ylabel, i in zip(ylabels, order):
        seg = segments[i]
        for j, b in enumerate(seg.blocks):
            offset = (b.address - seg.address) / scale
            info = _block_text(seg, b, label(b.stack))
            if b.state is BlockState.INACTIVE:
                kinds["free"].append((ylabel, offset, b.size / scale, info, i, j))
            elif b.state is BlockState.ACTIVE_PENDING_FREE:
                kinds["pending free"].append((ylabel, offset, b.size / scale, info, i, j))
            else:
                used = min(b.requested_size, b.size) if b.requested_size else b.size
                kinds["allocated"].append((ylabel, offset, used / scale, info, i, j))
                if b.size > used:
                    kinds["rounding waste"].append((ylabel, offset + used / scale, (b.size - used) / scale, info, i, j))
    colors = {"allocated": COLORS["allocated"], "rounding waste": COLORS["waste"], "pending free": COLORS["pending"],
              "free": "#E8E8E8"}
    fig = go.Figure()
    for name, rows in kinds.items():
        if not rows:
            continue
        y, base, width, text, si, bi = zip(*rows)
        fig.add_trace(go.Bar(y=y, x=width, base=base, orientation="h", name=name, marker=dict(
            color=colors[name], line=dict(color="#FFFFFF", width=0.5)), hovertext=text, hoverinfo="text",
            customdata=[f"{a}:{b}" for a, b in zip(si, bi)]))
    folded = len(segments) - len(order)
    top = (50 if own_axis else 30) + (28 if folded else 0)
    # The rows in our order: a category axis otherwise orders rows by first appearance in the traces, and
    # segments without a live block (only in the last, "free", trace) sank to the bottom.
    fig.update_layout(barmode="overlay", height=max(220, 22 * len(order) + top + (40 if own_axis else 10)),
                      margin=dict(l=10, r=20, t=top, b=40 if own_axis else 10),
                      xaxis=_segment_xaxis(order, segments, scale, unit, own_axis),
                      yaxis=dict(autorange="reversed", type="category", automargin=True, categoryorder="array",
                                 categoryarray=ylabels, tickfont=SEGMENT_TICK_FONT),
                      legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0), bargap=0.25, clickmode="event",
                      hovermode="closest")
    if folded:
        fig.add_annotation(text=f"{folded} smaller segments folded: showing the {len(order)} largest of "
                           f"{len(segments)}", xref="paper", yref="paper", x=0, y=1.0, yanchor="bottom",
                           yshift=30, xanchor="left", showarrow=False, name="folded")  # a row above the legend
    return fig


SEGMENT_TICK_FONT = dict(family="DejaVu Sans Mono, Menlo, Consolas, monospace", size=11)


def _segment_xaxis(order: list[int], segments: list[Segment], scale: float, unit: str, shown: bool) -> dict:
    top = max((segments[i].total_size for i in order), default=0) / scale
    axis = dict(title=f"offset in segment ({unit})", range=[0, top or 1])
    return axis if shown else dict(axis, title=None, showticklabels=False, ticks="")


def segment_axis_figure(segments: list[Segment], max_rows: int | None = 120) -> go.Figure:
    """The size axis of segment_map_figure(segments, max_rows=max_rows) alone, to keep in sight (sticky)
    above a tall map that scrolls.

    Same range, title and ticks; its left margin made as wide as the map's by one invisible row label as long
    as the map's longest (the labels are monospaced), so that both plot areas line up.
    """
    order = segment_rows(segments, max_rows)
    scale, unit = unit_for(max((segments[i].total_size for i in order), default=0))
    axis = _segment_xaxis(order, segments, scale, unit, True)
    longest = max((_segment_label(segments[i]) for i in order), key=len, default="")
    fig = go.Figure(go.Scatter(x=[0], y=[longest], mode="markers", marker=dict(opacity=0), hoverinfo="skip",
                               showlegend=False))
    fig.update_layout(height=50, margin=dict(l=10, r=20, t=44, b=2), plot_bgcolor="rgba(0,0,0,0)",
                      paper_bgcolor="#FFFFFF", showlegend=False,
                      xaxis=dict(axis, side="top", fixedrange=True, showgrid=False, ticks="outside", zeroline=False),
                      yaxis=dict(type="category", automargin=True, fixedrange=True, showgrid=False,
                                 tickfont=dict(SEGMENT_TICK_FONT, color="rgba(0,0,0,0)")))
    return fig


def _segment_label(seg: Segment) -> str:
    private = _private_pool(seg)
    return f"{seg.pool}·s{_short_stream(seg.stream)}{'·' + private if private else ''} {seg.address:#x}"


def _short_stream(stream: int) -> str:
    return "0" if stream == 0 else f"{stream & 0xFFFF:x}"


def _private_pool(seg: Segment) -> str:
    """The name of a private pool (CUDA graph or MemPool) a segment belongs to; "" for the general pool."""
    pool = pool_key(seg)
    return "" if pool == GENERAL_POOL else f"pool ({pool[0]}, {pool[1]})"


_STATE_TEXT = {"active_allocated": "allocated", "inactive": "free",
               "active_pending_free": "freed, waiting for stream work (active_pending_free):"}


def _block_text(seg: Segment, b, site: str) -> str:
    lines = [f"{_STATE_TEXT[b.state.value]} {format_bytes(b.size)} at {b.address:#x}"]
    if b.state is not BlockState.INACTIVE:
        lines.append(f"requested {format_bytes(b.requested_size)}")
    private = _private_pool(seg)
    lines.append(f"stream {seg.stream}, {seg.pool} pool" + (f"; private {private} (CUDA graph or MemPool): general "
                                                           "requests cannot use it" if private else ""))
    if site:
        lines.append(_escape(site))
    return "<br>".join(lines)


def _escape(text: str) -> str:
    # Plotly hover text is HTML-like: a frame named <script> must show as text.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def gap_histogram_figure(gaps: list[int], mark: int | None, largest: int, mark_label: str = "request") -> go.Figure:
    """Free gaps by log2 size bucket: how many, and how many bytes; the request (or a chosen size) marked.

    The x axis is log2 of the size: bucket e spans e..e+1 (2**e to 2**(e+1) bytes), ticked at powers of two.
    """
    fig = go.Figure()
    title = f"largest allocation that fits without a new segment: {format_bytes(largest)}"
    xaxis: dict[str, Any] = dict(title="free gap size", automargin=True)
    if gaps:
        exps = np.floor(np.log2(np.maximum(gaps, 1))).astype(int)
        lo, hi = int(exps.min()), int(exps.max())
        edges = list(range(lo, hi + 1))
        counts = [int((exps == e).sum()) for e in edges]
        volume = [int(np.asarray(gaps)[exps == e].sum()) for e in edges]
        ranges = [f"{format_bytes(2 ** e)}–{format_bytes(2 ** (e + 1))}" for e in edges]
        centres = [e + 0.5 for e in edges]
        fig.add_trace(go.Bar(x=centres, y=counts, width=0.9, name="gaps", marker_color=COLORS["free"],
                             customdata=ranges, hovertemplate="%{customdata}: %{y} gaps<extra></extra>"))
        fig.add_trace(go.Scatter(x=centres, y=[v / 2**20 for v in volume], name="MiB in gaps", yaxis="y2",
                                 mode="lines+markers", line=dict(color=COLORS["reserved"]), customdata=ranges,
                                 hovertemplate="%{customdata}: %{y:.2f} MiB<extra></extra>"))
        ticks = _pow2_ticks(lo, hi + 1)
        # outside ticks of 8 px keep the labels in the corners clear of the y axes' "0"
        xaxis.update(range=[lo, hi + 1], tickmode="array", tickvals=ticks, ticktext=[pow2_label(e) for e in ticks],
                     tickangle=0, ticks="outside", ticklen=8)
        if mark:
            where = float(np.log2(max(mark, 1)))
            inside = lo <= where <= hi + 1
            if inside:
                fig.add_vline(x=where, line=dict(color=COLORS["oom"], width=2, dash="dash"))
            # on the legend's row, at the left: off the bars and the ticks
            fig.add_annotation(text=f"{mark_label} {format_bytes(mark)}"
                               f"{' (dashed line)' if inside else ', beyond the gaps drawn'}", name="mark",
                               xref="paper", yref="paper", x=0, xanchor="left", y=1.02, yanchor="bottom",
                               showarrow=False, font=dict(color=COLORS["oom"]))
    # the title at the top of the figure, the legend (and the mark) on the row below it, over the plot
    fig.update_layout(title=dict(text=title, font=dict(size=13), x=0, xanchor="left", xref="paper", y=0.985,
                                 yref="container", yanchor="top"),
                      height=320, margin=dict(l=50, r=60, t=64, b=40), xaxis=xaxis,
                      yaxis=dict(title="gaps", rangemode="tozero", automargin=True),
                      yaxis2=dict(title="MiB", overlaying="y", side="right", showgrid=False, rangemode="tozero",
                                  automargin=True),
                      legend=dict(orientation="h", x=1, xanchor="right", y=1.02, yanchor="bottom"))
    return fig


def pow2_label(e: int) -> str:
    """2**e bytes, short: '512 B', '1 KiB', '64 MiB', '2 GiB'."""
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    return f"{2 ** (e % 10)} {units[min(e // 10, len(units) - 1)]}" if e < 60 else f"2^{e} B"


def _pow2_ticks(lo: int, hi: int, most: int = 7) -> list[int]:
    """Powers of two to tick between 2**lo and 2**hi: every one, or every 2nd, 5th or 10th (so that 1 KiB,
    1 MiB, 1 GiB stay among them), at most `most`."""
    for step in (1, 2, 5, 10, 20):
        ticks = [e for e in range(lo, hi + 1) if e % step == 0]
        if len(ticks) <= most:
            return ticks
    return ticks


def icicle_figure(weights: dict[tuple[Frame, ...], int], max_depth: int = 10) -> go.Figure:
    """Live bytes by stack (frames innermost first, as recorded), drawn root first: where in the program the
    memory was allocated.

    The frames every stack shares are folded into the root's label, so that the first level drawn is the first
    branch; `max_depth` levels are drawn below it. Bytes of a stack that ends where others go on stay in its
    node (a parent's box wider than its children's).
    """
    stacks = {tuple(reversed(stack)): size for stack, size in weights.items()}
    shared = _shared_prefix(list(stacks))
    ids, parents, values = ["root"], [""], [sum(stacks.values())]
    labels, hover = [_root_label(shared)], [_root_hover(shared)]
    index: dict[tuple, int] = {(): 0}
    for stack, size in sorted(stacks.items(), key=lambda kv: -kv[1]):
        path: tuple = ()
        for frame in stack[len(shared):len(shared) + max_depth]:
            parent = index[path]
            path = path + (frame,)
            node = index.get(path)
            if node is None:
                node = index[path] = len(ids)
                ids.append(f"n{node}")
                parents.append(ids[parent])
                labels.append(_escape(_frame_label(frame)))
                hover.append(_escape(_frame_text(frame)))
                values.append(0)
            values[node] += size
    fig = go.Figure(go.Icicle(ids=ids, parents=parents, labels=labels, values=values, branchvalues="total",
                              hovertext=hover, hovertemplate="%{hovertext}<br>%{value:,} bytes<extra></extra>",
                              marker=dict(colorscale="Blues"), root=dict(color="#DDDDDD"),
                              tiling=dict(orientation="v")))  # root on top, across the width: its label fits
    fig.update_layout(height=420, margin=dict(l=10, r=10, t=10, b=10))
    return fig


def _shared_prefix(stacks: list[tuple[Frame, ...]]) -> tuple[Frame, ...]:
    """The frames all root-first `stacks` start with; short of the whole of the longest, so something is drawn."""
    if not stacks:
        return ()
    first, n = stacks[0], min(len(s) for s in stacks)
    k = next((i for i in range(n) if any(s[i] != first[i] for s in stacks)), n)
    return first[:min(k, max(len(s) for s in stacks) - 1)]


def _frame_label(frame: Frame) -> str:
    """A box's label: function (file:line); a pseudo-frame without a file (a group of frames) by its name."""
    return f"{frame.name} ({frame.filename.rsplit('/', 1)[-1]}:{frame.line})" if frame.filename else frame.name


def _frame_text(frame: Frame) -> str:
    return f"{frame.filename}:{frame.line} {frame.name}" if frame.filename else frame.name


def _root_label(shared: tuple[Frame, ...]) -> str:
    if not shared:
        return "all"
    short = [_escape(f"{f.filename.rsplit('/', 1)[-1]}:{f.line} {f.name}") for f in shared]
    chain = " → ".join(short) if len(short) <= 2 else f"{short[0]} → … → {short[-1]}"
    return f"all (via {chain})"


def _root_hover(shared: tuple[Frame, ...]) -> str:
    if not shared:
        return "all live blocks with a recorded stack"
    frames = "<br>".join(_escape(_frame_text(f)) for f in shared)
    return f"all live blocks with a recorded stack, through {len(shared)} shared frames (outermost first):<br>{frames}"


RUN_COLORS = {"recorded": "#E69F00", "simulated": "#0072B2"}  # one colour per run; the figure by line style
MAX_OOM_LINES = 50


def overlay_figure(recorded: dict[str, Any], simulated: dict[str, Any] | None, label: str,
                   recorded_ooms: Sequence[int] = ()) -> go.Figure:
    """Reserved bytes (solid) and fragmentation (dotted) of the recorded run and of a simulated one, over the
    same events, each run in its own colour; a dashed line at each recorded OOM (`recorded_ooms`: the trace
    indices of its `oom` events, the first labelled)."""
    top = max(float(np.max(recorded["reserved_max"])) if len(recorded["reserved_max"]) else 0.0,
              float(np.max(simulated["reserved_max"])) if simulated and len(simulated["reserved_max"]) else 0.0)
    scale, unit = unit_for(top)
    fig = go.Figure()
    for run, name, color in ((recorded, "recorded", RUN_COLORS["recorded"]), (simulated, label, RUN_COLORS["simulated"])):
        if not run:
            continue
        fig.add_trace(go.Scatter(x=run["start"], y=np.asarray(run["reserved_max"]) / scale, name=f"reserved, {name}",
                                   line=dict(color=color, width=2)))
        fig.add_trace(go.Scatter(x=run["start"], y=run["fragmentation_max"], name=f"fragmentation, {name}",
                                   yaxis="y2", line=dict(color=color, dash="dot", width=1.5)))
    for i, k in enumerate(list(recorded_ooms)[:MAX_OOM_LINES]):
        named = {"annotation": dict(text=f"recorded OOM (event {k})", font=dict(color=COLORS["oom"]),
                                    xanchor="right", yanchor="top")} if i == 0 else {}
        fig.add_vline(x=k, line=dict(color=COLORS["oom"], width=1.5, dash="dash"), **named)
    fig.update_layout(height=360, margin=dict(l=60, r=60, t=30, b=40), xaxis=dict(title="workload event"),
                      yaxis=dict(title=unit, rangemode="tozero"), legend=dict(orientation="h", y=1.15),
                      yaxis2=dict(title="fragmentation", overlaying="y", side="right", range=[0, 1], **FRACTION_TICKS))
    return fig


def difference_figure(rows: list[dict[str, Any]], label_a: str, label_b: str) -> go.Figure:
    """Live bytes per allocation site in two states, the sites that changed most first."""
    rows = rows[:25]
    fig = go.Figure()
    sites = [_escape(r["site"])[:80] for r in rows]
    fig.add_trace(go.Bar(y=sites, x=[r["bytes_a"] / 2**20 for r in rows], name=label_a, orientation="h",
                         marker_color=COLORS["requested"]))
    fig.add_trace(go.Bar(y=sites, x=[r["bytes_b"] / 2**20 for r in rows], name=label_b, orientation="h",
                         marker_color=COLORS["allocated"]))
    fig.update_layout(barmode="group", height=max(260, 28 * len(rows) + 80), xaxis=dict(title="MiB live"),
                      yaxis=dict(autorange="reversed", automargin=True), margin=dict(l=10, r=10, t=30, b=40),
                      legend=dict(orientation="h", y=1.05))
    return fig
