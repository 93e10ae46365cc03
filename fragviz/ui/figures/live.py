"""The live chart: samples in, a figure (or the points to append to it) out. Pure.

Trace order is fixed (LIVE_TRACES) so that a refresh appends to each trace by index with a Patch: a
refresh sends only the new points, whatever the job's age. A gap in the recording (the agent could not be
reached) is a None point, which breaks the lines.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

import plotly.graph_objects as go

from fragviz.base.units import MiB, format_bytes
from fragviz.ui.figures.style import COLORS

# (name in the legend, sample column, axis)
LIVE_TRACES = (
    ("allocated", "allocated", "y"),
    ("requested", "requested", "y"),
    ("reserved", "reserved", "y"),
    ("NVML used (band above reserved: outside PyTorch)", "nvml_used", "y"),
    ("largest request the cache can serve", "largest_free", "y"),
    ("fragmentation", "fragmentation", "y2"),
    ("OOM", "reserved", "y"),
)
OOM_TRACE = len(LIVE_TRACES) - 1
TRACE_COLORS = (COLORS["allocated"], COLORS["requested"], COLORS["reserved"], "#7F7F7F", COLORS["free"],
                COLORS["fragmentation"], COLORS["oom"])


def _when(t: float) -> str:
    return datetime.fromtimestamp(t).isoformat(sep=" ", timespec="milliseconds")


def _value(column: str, v: Any) -> float | None:
    if v is None:
        return None
    return round(100.0 * v, 3) if column == "fragmentation" else round(v / MiB, 3)


def live_points(samples: dict[str, list], oom_times: list[float] | None = None) -> list[tuple[list, list]]:
    """(x, y) to add to every trace of LIVE_TRACES, in order, for these samples (columns, oldest first)."""
    out: list[tuple[list, list]] = [([], []) for _ in LIVE_TRACES]
    for i, t in enumerate(samples["t"]):
        when = _when(t)
        for k, (_, column, _) in enumerate(LIVE_TRACES[:OOM_TRACE]):
            xs, ys = out[k]
            if samples["gap"][i]:
                xs.append(when)
                ys.append(None)
            xs.append(when)
            ys.append(_value(column, samples[column][i]))
    for t in oom_times or ():
        reserved = _nearest(samples, t)
        out[OOM_TRACE][0].append(_when(t))
        out[OOM_TRACE][1].append(reserved)
    return out


def _nearest(samples: dict[str, list], t: float) -> float | None:
    if not samples["t"]:
        return None
    i = min(range(len(samples["t"])), key=lambda j: abs(samples["t"][j] - t))
    return _value("reserved", samples["reserved"][i])


def live_figure(samples: dict[str, list], oom_times: list[float], simulated: bool | None,
                nvml: bool) -> go.Figure:
    """The whole chart of one attachment and device (the page then appends to it)."""
    fig = go.Figure()
    points = live_points(samples, oom_times)
    for k, ((name, column, axis), (xs, ys)) in enumerate(zip(LIVE_TRACES, points)):
        if column == "nvml_used" and not nvml:
            name = "NVML used (not available" + (": a simulated device)" if simulated else ")")
        common = dict(x=xs, y=ys, name=name, yaxis=axis, line=dict(color=TRACE_COLORS[k], width=1.6))
        if k == OOM_TRACE:
            fig.add_trace(go.Scatter(mode="markers", marker=dict(symbol="x", size=12, color=COLORS["oom"]),
                                     **{**common, "line": None}))
        elif column == "nvml_used":
            fig.add_trace(go.Scatter(mode="lines", fill="tonexty", fillcolor="rgba(127,127,127,0.25)", **common))
        else:
            dash = "dot" if column in ("largest_free", "fragmentation") else None
            fig.add_trace(go.Scatter(mode="lines", **{**common, "line": dict(color=TRACE_COLORS[k], width=1.6,
                                                                              dash=dash)}))
    capacity = next((v for v in reversed(samples.get("device_total") or []) if v), None)
    if capacity:  # the device's memory: how close the job runs to it
        fig.add_hline(y=capacity / MiB, line=dict(color=COLORS["oom"], width=1, dash="dash"),
                      annotation_text=f"device {format_bytes(capacity)}", annotation_position="top left")
    fig.update_layout(height=340, margin=dict(l=60, r=60, t=30, b=40), hovermode="x unified",
                      uirevision="live", legend=dict(orientation="h", y=-0.18, traceorder="normal"),
                      yaxis=dict(title="MiB", rangemode="tozero"),
                      yaxis2=dict(title="fragmentation %", overlaying="y", side="right", range=[0, 100],
                                  tickvals=[0, 25, 50, 75, 100], showgrid=False),
                      xaxis=dict(type="date", tickformat="%H:%M:%S", hoverformat="%H:%M:%S.%L", nticks=6))
    return fig


def thin(samples: dict[str, list], max_points: int) -> dict[str, list]:
    """Every k-th sample (gaps and the newest always kept), so a long recording draws quickly."""
    n = len(samples["t"])
    if n <= max_points:
        return samples
    step = -(-n // max_points)
    keep = [i for i in range(n) if i % step == 0 or samples["gap"][i] or i == n - 1]
    return {k: [v[i] for i in keep] for k, v in samples.items()}
