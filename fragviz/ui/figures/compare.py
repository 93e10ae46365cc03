"""The compare page's figures: both sides' timelines on a shared axis, and the difference by allocation site."""
from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any, Sequence

import numpy as np
import plotly.graph_objects as go

from fragviz.model.lod import Timeline
from fragviz.replay.align import AXIS_TITLES
from fragviz.base.units import MiB
from fragviz.ui.data.sites import short_site
from fragviz.ui.figures.style import COLORS, unit_for

SIDE_COLORS = {"A": "#0072B2", "B": "#D55E00"}  # Okabe-Ito blue and vermillion: one colour per side
FIGURE_DASH = {"allocated": "solid", "reserved": "dash"}  # the figure by line style


@dataclass(frozen=True)
class SideSeries:
    """One side's timeline points at their shared-axis positions, and its selected state there."""

    label: str  # "A" or "B"
    x: np.ndarray
    timeline: Timeline
    event: int | None
    event_x: float | None


def aligned_figure(sides: Sequence[SideSeries], axis: str) -> go.Figure:
    """Allocated (solid) and reserved (dashed) bytes of each side over the shared axis (the max of each bucket
    where the timeline is summarised), a side per colour; a dotted line at each side's selected state.
    Every point's customdata is its state, so a click says where it is on its own trace."""
    top = max([float(np.max(s.timeline.maxs[f])) for s in sides for f in FIGURE_DASH
               if len(s.timeline.maxs[f])] or [0.0])
    scale, unit = unit_for(top)
    fig = go.Figure()
    for side in sides:
        for figure, dash in FIGURE_DASH.items():
            fig.add_trace(_line(side, figure, dash, scale, unit, axis))
    for side in sides:
        if side.event_x is not None:
            fig.add_vline(x=side.event_x, name=f"{side.label} selected",
                          line=dict(color=SIDE_COLORS[side.label], width=1.5, dash="dot"),
                          annotation=dict(text=f"{side.label}: event {side.event}", xanchor="left",
                                          yanchor="top", font=dict(color=SIDE_COLORS[side.label])),
                          annotation_y=1.0 if side.label == "A" else 0.92)
    fig.update_layout(margin=dict(l=60, r=20, t=30, b=40), height=340, hovermode="x", clickmode="event",
                      legend=dict(orientation="h", y=1.14, x=0), uirevision=f"aligned-{axis}",
                      xaxis=dict(title=AXIS_TITLES[axis]), yaxis=dict(title=unit, rangemode="tozero"))
    return fig


def _line(side: SideSeries, figure: str, dash: str, scale: float, unit: str, axis: str) -> go.Scatter:
    where = {"event": "event %{x}", "time": "t+%{x:.3f} s", "step": "step %{x:.2f}"}[axis]
    summarised = side.timeline.bucket > 1
    return go.Scatter(
        x=side.x, y=np.asarray(side.timeline.maxs[figure]) / scale, mode="lines",
        name=f"{side.label} {figure}", legendgroup=side.label,
        line=dict(color=SIDE_COLORS[side.label], dash=dash, width=1.5, shape="hv"),
        customdata=np.asarray(side.timeline.start).tolist(),  # a plain list: clicks lose typed arrays
        hovertemplate=f"{side.label} {figure}{' max' if summarised else ''} %{{y:.3f}} {unit}"
                      f"<extra>{side.label}: {where}, state %{{customdata}}</extra>")


def difference_figure(rows: list[dict[str, Any]], label_a: str, label_b: str) -> go.Figure:
    """Live bytes per allocation site in two states, the sites that changed most first. A row's label is its
    site shortened in the middle (the file and function stay readable), the whole site in its hover."""
    rows = rows[:25]
    fig = go.Figure()
    where = list(range(len(rows)))  # rows by position: two sites shortened alike stay two rows
    whole = [escape(r["site"], quote=False) for r in rows]
    for label, key, color in ((label_a, "bytes_a", COLORS["requested"]), (label_b, "bytes_b", COLORS["allocated"])):
        fig.add_trace(go.Bar(y=where, x=[r[key] / MiB for r in rows], name=label, orientation="h", marker_color=color,
                             customdata=whole, hovertemplate=f"%{{customdata}}<br>{escape(label, quote=False)}: "
                             "%{x:.2f} MiB live<extra></extra>"))
    fig.update_layout(barmode="group", height=max(260, 28 * len(rows) + 80), xaxis=dict(title="MiB live"),
                      yaxis=dict(autorange="reversed", automargin=True, tickmode="array", tickvals=where,
                                 ticktext=[escape(short_site(r["site"], SITE_LABEL_CHARS), quote=False) for r in rows]),
                      margin=dict(l=10, r=10, t=30, b=40), legend=dict(orientation="h", y=1.05))
    return fig


SITE_LABEL_CHARS = 56  # a row label's most characters: the bars keep most of a 1024 px page
