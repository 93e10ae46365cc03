"""Memory over the trace: the snapshot page's timeline (annotated spans shaded, markers). The selected event's
line is laid over it in the browser (timelineEventLine in assets/clientside.js)."""
from __future__ import annotations

from html import escape
from typing import Protocol, Sequence

import numpy as np
import plotly.graph_objects as go

from fragviz.model.lod import Timeline
from fragviz.ui.figures.style import COLORS, FRACTION_TICKS, TRACE_X_MARGIN, unit_for


class Span(Protocol):
    """An annotated span (a record_function range) as the timeline draws it: fragviz.library's AnnotationSpan."""

    name: str
    start_event: int
    end_event: int
    start_us: int
    end_us: int
    closed: bool


LABELS = {"allocated": "allocated", "requested": "requested", "reserved": "reserved", "free": "cached free"}


def timeline_figure(tl: Timeline, markers: dict[str, list[int]], x_range: Sequence[float] | None = None,
                    axis: str = "event", spans: Sequence[Span] = ()) -> go.Figure:
    """Memory over the trace (min/max per bucket where summarised), fragmentation on a second axis, the
    annotated spans (record_function ranges) shaded and named. Steps: a value holds until the next point.

    `axis` "time" draws against seconds since the trace's first event where the trace has time_us; every
    point's customdata is then its event index (clicks select events either way), and layout.meta.event_seconds
    holds each point's event and seconds, for the browser to turn one into the other (assets/clientside.js).
    """
    starts = np.asarray(tl.start)
    top = max([float(np.max(tl.maxs[k])) for k in LABELS if len(tl.maxs[k])] or [0.0])
    scale, unit = unit_for(top)
    seconds = None
    if tl.t0_us is not None and tl.time_us is not None:
        seconds = (np.asarray(tl.time_us) - tl.t0_us) / 1e6
    timed = axis == "time" and seconds is not None
    # A plain list: plotly.js hands typed-array customdata to click events as nothing at all
    x, custom = (seconds, starts.tolist()) if timed else (starts, seconds)
    when = "t+%{x:.3f} s, event %{customdata}" if timed else (
        "event %{x}, t+%{customdata:.3f} s" if seconds is not None else "event %{x}")
    fig = go.Figure()
    extent = (float(x_range[0]), float(x_range[1])) if x_range else (
        (float(x[0]), float(x[-1])) if len(x) else (0.0, 1.0))
    _add_spans(fig, spans, tl.t0_us if timed else None, extent)
    _add_memory(fig, tl, x, custom, scale, unit, when)
    to_x = (lambda events: np.interp(events, starts, seconds)) if timed else (lambda events: events)
    _add_markers(fig, {k: list(to_x(np.asarray(v))) if v else [] for k, v in markers.items()},
                 {k: v for k, v in markers.items()} if timed else None)
    fig.update_layout(
        margin=dict(TRACE_X_MARGIN, t=30, b=40), height=320, hovermode="x", uirevision=f"timeline-{axis}",
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0), clickmode="event",  # above: grows up
        xaxis=dict(title="seconds since the first event" if timed else "event",
                   range=list(x_range) if x_range else None),
        yaxis=dict(title=unit, rangemode="tozero", automargin=False),  # the margins stay TRACE_X_MARGIN's
        yaxis2=dict(title="fragmentation", overlaying="y", side="right", range=[0, 1], showgrid=False,
                    automargin=False, **FRACTION_TICKS))
    if timed:
        fig.update_layout(meta={"event_seconds": {"events": starts.tolist(), "seconds": seconds.tolist()}})
    return fig


def _add_memory(fig: go.Figure, tl: Timeline, x, custom, scale: float, unit: str, when: str) -> None:
    """The memory lines (a band between each bucket's min and max where summarised) and fragmentation."""
    for key, label in LABELS.items():
        hi = np.asarray(tl.maxs[key]) / scale
        lo = np.asarray(tl.mins[key]) / scale
        if tl.bucket > 1:
            fig.add_trace(go.Scatter(x=x, y=lo, mode="lines", line=dict(width=0, color=COLORS[key], shape="hv"),
                                     showlegend=False, hoverinfo="skip", legendgroup=key, customdata=custom))
            fig.add_trace(go.Scatter(x=x, y=hi, mode="lines", name=label,
                                     line=dict(width=1.5, color=COLORS[key], shape="hv"), fill="tonexty", legendgroup=key, customdata=custom,
                                     hovertemplate=f"{label} max %{{y:.3f}} {unit}<extra>{when}</extra>"))
        else:
            fig.add_trace(go.Scatter(x=x, y=hi, mode="lines", name=label, line=dict(width=1.5, color=COLORS[key],
                                     shape="hv"), customdata=custom,
                                     hovertemplate=f"{label} %{{y:.3f}} {unit}<extra>{when}</extra>"))
    fig.add_trace(go.Scatter(x=x, y=np.asarray(tl.maxs["fragmentation"]), mode="lines", name="fragmentation",
                             yaxis="y2", line=dict(width=1, color=COLORS["fragmentation"], dash="dot", shape="hv"),
                             customdata=custom,
                             hovertemplate=f"fragmentation %{{y:.1%}} of reserved is free but non-releasable"
                                           f"<extra>{when}</extra>"))


SPAN_COLOR = "rgba(86, 180, 233, 0.16)"
SPAN_ROWS = 3  # label rows, so that the names of neighbouring spans do not write over each other


def _add_spans(fig: go.Figure, spans: Sequence[Span], t0_us: int | None,
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
    text = [escape(s.name if len(s.name) <= 40 else s.name[:39] + "…", quote=False) for s in spans]
    hover = [f"{escape(s.name, quote=False)}: events {s.start_event}–{s.end_event}, {(s.end_us - s.start_us) / 1e3:.3f} ms"
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
