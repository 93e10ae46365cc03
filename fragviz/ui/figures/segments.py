"""The segment map: one row per segment, its blocks to scale and coloured by state; its size axis drawn apart."""
from __future__ import annotations

from html import escape
from typing import Callable

import plotly.graph_objects as go

from fragviz.base.units import format_bytes
from fragviz.model import BlockState, Segment
from fragviz.model.metrics import GENERAL_POOL, pool_key
from fragviz.ui.figures.style import COLORS, unit_for

BlockLabel = Callable[[int], str]
FREE_BLOCK = "#E8E8E8"  # a free block's colour: light, so that the live blocks stand out


def segment_rows(segments: list[Segment], max_rows: int | None = None) -> list[int]:
    """Indices of the segments drawn, top row first: the `max_rows` largest (all when None), grouped by pool
    (general first, then private pools; large before small) and stream, largest first whatever their state."""
    drawn = range(len(segments))
    if max_rows is not None and len(segments) > max_rows:
        drawn = sorted(drawn, key=lambda i: (-segments[i].total_size, segments[i].address))[:max_rows]
    return sorted(drawn, key=lambda i: (pool_key(segments[i]), segments[i].pool, segments[i].stream,
                                        -segments[i].total_size, segments[i].address))


def segment_map_figure(segments: list[Segment], label: BlockLabel, max_rows: int | None = 120) -> go.Figure:
    """One row per segment (see segment_rows for their order), its blocks to scale and coloured by state.

    customdata of every bar: "segment index:block index" into `segments`. Rows beyond `max_rows` are folded
    (the note says how many). The live page draws it; the snapshot page draws its own on a canvas
    (assets/state_draw.js), in the same order and colours.
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
              "free": FREE_BLOCK}
    fig = go.Figure()
    for name, rows in kinds.items():
        if not rows:
            continue
        y, base, width, text, si, bi = zip(*rows)
        fig.add_trace(go.Bar(y=y, x=width, base=base, orientation="h", name=name, marker=dict(
            color=colors[name], line=dict(color="#FFFFFF", width=0.5)), hovertext=text, hoverinfo="text",
            customdata=[f"{a}:{b}" for a, b in zip(si, bi)]))
    folded = len(segments) - len(order)
    top = 50 + (28 if folded else 0)
    # The rows in our order: a category axis otherwise orders rows by first appearance in the traces, and
    # segments without a live block (only in the last, "free", trace) sank to the bottom.
    fig.update_layout(barmode="overlay", height=max(220, 22 * len(order) + top + 40),
                      margin=dict(l=10, r=20, t=top, b=40), xaxis=_segment_xaxis(order, segments, scale, unit),
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


def _segment_xaxis(order: list[int], segments: list[Segment], scale: float, unit: str) -> dict:
    top = max((segments[i].total_size for i in order), default=0) / scale
    return dict(title=f"offset in segment ({unit})", range=[0, top or 1])


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
        lines.append(escape(site, quote=False))
    return "<br>".join(lines)
