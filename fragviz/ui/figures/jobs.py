"""The job page's figure: a bar per rank of peak reserved and peak requested."""
from __future__ import annotations

from statistics import median

import plotly.graph_objects as go

from fragviz.jobs.table import JobFigures, RankRow
from fragviz.base.units import format_bytes
from fragviz.ui.figures.style import COLORS, unit_for


def ranks_figure(figures: JobFigures) -> go.Figure:
    """A bar per (rank, device) of peak reserved beside one of peak requested; outliers outlined, OOM ranks
    marked above their bars, the median of peak reserved as a line. Each point's customdata is
    [snapshot id, device] (a click opens that rank's snapshot)."""
    rows = [r for r in figures.rows if r.peak_reserved_bytes is not None]
    top = max([r.peak_reserved_bytes or 0 for r in rows] + [r.peak_requested_bytes or 0 for r in rows] + [1])
    scale, unit = unit_for(top)
    labels = [figures.label(r) for r in rows]
    custom = [[r.snapshot_id, r.device] for r in rows]
    fig = go.Figure()
    for figure, key, flag in (("peak_reserved_bytes", "reserved", "reserved_outlier"),
                              ("peak_requested_bytes", "requested", "requested_outlier")):
        fig.add_trace(_bars(rows, labels, custom, figure, key, flag, scale, unit))
    _mark_ooms(fig, rows, labels, custom, scale)
    if rows:
        m = median(r.peak_reserved_bytes for r in rows) / scale
        fig.add_hline(y=m, line=dict(color=COLORS["selected"], dash="dot", width=1),
                      annotation_text=f"median peak reserved {m:.3g} {unit}", annotation_position="top left")
    fig.update_layout(barmode="group", bargap=0.25, height=360, margin=dict(l=60, r=20, t=30, b=60),
                      yaxis_title=unit, xaxis=dict(type="category", title=None), clickmode="event",
                      legend=dict(orientation="h", y=1.12, x=0), plot_bgcolor="#FFFFFF",
                      hoverlabel=dict(bgcolor="#FFFFFF"))
    fig.update_yaxes(gridcolor="#E5E5E5", rangemode="tozero")
    return fig


def _bars(rows: list[RankRow], labels: list[str], custom: list, figure: str, key: str, flag: str, scale: float,
          unit: str) -> go.Bar:
    values = [getattr(r, figure) for r in rows]
    outlined = [getattr(r, flag) for r in rows]
    return go.Bar(x=labels, y=[None if v is None else v / scale for v in values], name=f"peak {key}",
                  marker=dict(color=COLORS[key], line=dict(color=[COLORS["oom"] if o else COLORS[key] for o in outlined],
                                                           width=[3 if o else 0 for o in outlined])),
                  customdata=custom, text=[_hover(v, o) for v, o in zip(values, outlined)],
                  hovertemplate="%{x}: peak " + key + " %{text}<extra></extra>", textposition="none")


def _hover(value: int | None, outlier: bool) -> str:
    return ("not recorded" if value is None else format_bytes(value)) + (" (outlier)" if outlier else "")


def _mark_ooms(fig: go.Figure, rows: list[RankRow], labels: list[str], custom: list, scale: float) -> None:
    hit = [i for i, r in enumerate(rows) if r.ooms]
    if not hit:
        return
    fig.add_trace(go.Scatter(
        x=[labels[i] for i in hit], y=[max(rows[i].peak_reserved_bytes, rows[i].peak_requested_bytes or 0) / scale
                                       * 1.04 for i in hit],
        mode="markers+text", name="OOM", marker=dict(symbol="x", size=11, color=COLORS["oom"]),
        text=[f"{rows[i].ooms} OOM" for i in hit], textposition="top center", textfont=dict(color=COLORS["oom"]),
        customdata=[custom[i] for i in hit], hovertemplate="%{x}: %{text}<extra></extra>"))
