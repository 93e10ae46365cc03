"""The free gaps of a state: how many and how many bytes per power-of-two size, a request's size marked."""
from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from fragviz.base.units import MiB, format_bytes
from fragviz.ui.figures.style import COLORS, round_ticks

def gap_histogram_figure(gaps: list[int], mark: int | None, largest: int, mark_label: str = "request") -> go.Figure:
    """Free gaps by log2 size bucket: how many, and how many bytes; the request (or a chosen size) marked.

    The x axis is log2 of the size: bucket e spans e..e+1 (2**e to 2**(e+1) bytes), ticked at powers of two.
    """
    fig = go.Figure()
    title = f"largest allocation that fits without a new segment: {format_bytes(largest)}"
    xaxis: dict[str, Any] = dict(title="free gap size", automargin=True)
    volume: list[int] = []
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
        fig.add_trace(go.Scatter(x=centres, y=[v / MiB for v in volume], name="MiB in gaps", yaxis="y2",
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
                      yaxis2=dict(title="MiB", overlaying="y", side="right", showgrid=False, automargin=True,
                                  **round_ticks(max(volume, default=0) / MiB if gaps else 0)),
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
