"""The what-if page's figure: the recorded run and a simulated one over the same events."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from fragviz.model.lod import Timeline
from fragviz.ui.figures.style import COLORS, FRACTION_TICKS, unit_for

RUN_COLORS = {"recorded": "#E69F00", "simulated": "#0072B2"}  # one colour per run; the figure by line style
MAX_OOM_LINES = 50


def overlay_figure(recorded: Timeline, simulated: Timeline | None, label: str,
                   recorded_ooms: Sequence[int] = ()) -> go.Figure:
    """Reserved bytes (solid) and fragmentation (dotted) of the recorded run and of a simulated one, over the
    same events, each run in its own colour; a dashed line at each recorded OOM (`recorded_ooms`: the trace
    indices of its `oom` events, the first labelled)."""
    top = max([float(np.max(run.maxs["reserved"])) for run in (recorded, simulated)
               if run is not None and len(run.maxs["reserved"])] or [0.0])
    scale, unit = unit_for(top)
    fig = go.Figure()
    for run, name, color in ((recorded, "recorded", RUN_COLORS["recorded"]), (simulated, label, RUN_COLORS["simulated"])):
        if run is None:
            continue
        fig.add_trace(go.Scatter(x=run.start, y=np.asarray(run.maxs["reserved"]) / scale, name=f"reserved, {name}",
                                   line=dict(color=color, width=2)))
        fig.add_trace(go.Scatter(x=run.start, y=run.maxs["fragmentation"], name=f"fragmentation, {name}",
                                   yaxis="y2", line=dict(color=color, dash="dot", width=1.5)))
    for i, k in enumerate(list(recorded_ooms)[:MAX_OOM_LINES]):
        named = {"annotation": dict(text=f"recorded OOM (event {k})", font=dict(color=COLORS["oom"]),
                                    xanchor="right", yanchor="top")} if i == 0 else {}
        fig.add_vline(x=k, line=dict(color=COLORS["oom"], width=1.5, dash="dash"), **named)
    fig.update_layout(height=360, margin=dict(l=60, r=60, t=30, b=40), xaxis=dict(title="workload event"),
                      yaxis=dict(title=unit, rangemode="tozero"), legend=dict(orientation="h", y=1.15),
                      yaxis2=dict(title="fragmentation", overlaying="y", side="right", range=[0, 1], **FRACTION_TICKS))
    return fig
