"""The what-if page's prediction figure: peak requested and peak reserved bytes at each recorded size of the knob
and at the predicted one."""
from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from fragviz.predict.runs import as_number
from fragviz.ui.data.predict import SizePoint
from fragviz.ui.figures.style import COLORS, unit_for

PREDICTED_PATTERN = "/"  # the predicted bars are hatched: a figure computed, not recorded


def size_label(knob: str, point: SizePoint) -> str:
    return f"{knob} {as_number(point.knob)}" + (" (predicted)" if point.predicted else " (recorded)")


def prediction_figure(knob: str, points: Sequence[SizePoint]) -> go.Figure:
    """A group of two bars per size (peak requested, peak reserved), the predicted size's hatched."""
    scale, unit = unit_for(max([max(p.peak_requested, p.peak_reserved) for p in points] or [0]))
    x = [size_label(knob, p) for p in points]
    patterns = [PREDICTED_PATTERN if p.predicted else "" for p in points]
    fig = go.Figure()
    for name, key, color in (("peak requested", "peak_requested", COLORS["requested"]),
                             ("peak reserved", "peak_reserved", COLORS["reserved"])):
        fig.add_trace(go.Bar(x=x, y=[getattr(p, key) / scale for p in points], name=name,
                             marker=dict(color=color, pattern=dict(shape=patterns)),
                             hovertemplate=f"%{{x}}<br>{name} %{{y:.2f}} {unit}<extra></extra>"))
    fig.update_layout(barmode="group", height=320, margin=dict(l=60, r=20, t=30, b=40),
                      yaxis=dict(title=unit, rangemode="tozero"), legend=dict(orientation="h", y=1.15))
    return fig
