"""Figures of what holds memory: allocations as stacked bands, live memory by kind or by site. Pure."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from fragviz.ui.usage_data import BandView, GroupView

# Site colours (Okabe-Ito, then Tableau): the last, grey, is every other site
SITE_COLORS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#8C564B",
               "#17BECF", "#9A9A9A")
KIND_COLORS = {"parameters": "#0072B2", "gradients": "#D55E00", "optimizer_state": "#E69F00",
               "activations": "#009E73", "kv_cache": "#CC79A7", "other": "#9A9A9A"}
KIND_LABELS = {"parameters": "parameters", "gradients": "gradients", "optimizer_state": "optimizer state",
               "activations": "activations and temporaries", "kv_cache": "KV cache", "other": "other"}


def _unit(peak: float) -> tuple[float, str]:
    for scale, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if peak >= scale:
            return float(scale), name
    return 1.0, "B"


def site_color(group: int, groups: int) -> str:
    return SITE_COLORS[-1] if group == groups - 1 else SITE_COLORS[group % (len(SITE_COLORS) - 1)]


def _short(name: str, most: int = 60) -> str:
    return name if len(name) <= most else "…" + name[-(most - 1):]


def bands_figure(view: BandView, event: int | None = None, x_range: Sequence[float] | None = None) -> go.Figure:
    """Every allocation drawn apart as a band (rectangles of constant offset), the rest folded per site above."""
    b, grid = view.bands, view.bands.grid
    scale, unit = _unit(float(grid.live.max()) if len(grid) else 0.0)
    edges = grid.edges
    fig = go.Figure()
    groups = len(view.group_names)
    run_group = view.group[b.run_band] if len(b.run_band) else np.zeros(0, np.int64)
    for g, name in enumerate(view.group_names):
        pick = np.nonzero(run_group == g)[0]
        if len(pick):
            fig.add_trace(_band_bars(view, pick, g, groups, name, scale))
    for g, name in enumerate(view.group_names):
        if b.folded[g].any():
            fig.add_trace(_folded_area(edges, b.folded_base[g], b.folded[g], g, groups, name, scale))
    note = ("exact: one column per state" if grid.bucket == 1 else
            f"each column is the state with the most live bytes among {grid.bucket:,} states")
    folded = f"; {b.folded_count:,} smaller allocations folded per site (hatched)" if b.folded_count else ""
    fig.update_layout(
        barmode="overlay", bargap=0, hovermode="closest", height=440, margin=dict(l=60, r=10, t=40, b=40),
        xaxis=dict(title="event (state after it)", range=list(x_range) if x_range else [edges[0], edges[-1]]),
        yaxis=dict(title=f"live memory ({unit})", rangemode="tozero", fixedrange=True),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, font=dict(size=10)),
        annotations=[dict(text=note + folded, xref="paper", yref="paper", x=1, y=-0.13, showarrow=False,
                          xanchor="right", font=dict(size=10, color="#555"))],
        shapes=_event_line(event), plot_bgcolor="#ffffff")
    return fig


def _band_bars(view: BandView, pick: np.ndarray, g: int, groups: int, name: str, scale: float) -> go.Bar:
    b, edges = view.bands, view.bands.grid.edges
    first, last = b.run_first[pick], b.run_last[pick]
    x0, x1 = edges[first], edges[last]
    band = b.run_band[pick]
    rows = b.rows[band]
    return go.Bar(
        x=(x0 + x1) / 2, width=x1 - x0, base=b.run_base[pick] / scale, y=view.sizes[band] / scale,
        customdata=rows.tolist(),  # a plain list: plotly.js hands typed-array customdata to clicks as nothing
        hovertext=np.asarray(view.hover, dtype=object)[band], hovertemplate="%{hovertext}<extra></extra>",
        name=_short(name), legendgroup=str(g), marker=dict(color=site_color(g, groups),
                                                          line=dict(width=0.4, color="#ffffff")))


def _folded_area(edges: np.ndarray, base: np.ndarray, height: np.ndarray, g: int, groups: int, name: str,
                 scale: float) -> go.Scatter:
    """One closed step polygon: the group's folded bytes over its base, bucket by bucket."""
    top = (base + height) / scale
    low = base / scale
    xs = np.repeat(edges, 2)[1:-1]  # x0, x1, x1, x2, ...: each bucket's two ends
    x = np.concatenate([xs, xs[::-1]])
    y = np.concatenate([np.repeat(top, 2), np.repeat(low, 2)[::-1]])
    return go.Scatter(x=x, y=y, fill="toself", mode="lines", line=dict(width=0),
                      fillcolor=site_color(g, groups), fillpattern=dict(shape="/", fgcolor="#ffffff", size=6),
                      opacity=0.55, name=f"smaller allocations of {_short(name, 40)}", legendgroup=str(g),
                      showlegend=False, hoveron="fills", hoverinfo="name")


def groups_figure(view: GroupView, event: int | None = None, x_range: Sequence[float] | None = None) -> go.Figure:
    """Stacked areas of live memory per kind (or per site), as steps: a bucket's state holds until the next."""
    grid = view.grid
    scale, unit = _unit(float(view.values.sum(axis=0).max()) if view.values.size else 0.0)
    x = grid.edges.tolist()
    fig = go.Figure()
    groups = len(view.names)
    for g, name in enumerate(view.names):
        values = view.values[g]
        if not values.any():
            continue
        y = (np.append(values, values[-1]) / scale).tolist()
        label = KIND_LABELS.get(name, name) if view.by == "kind" else _short(name)
        color = KIND_COLORS.get(name, "#9A9A9A") if view.by == "kind" else site_color(g, groups)
        fig.add_trace(go.Scatter(
            x=x, y=y, mode="lines", stackgroup="live", line=dict(width=0.5, color=color, shape="hv"),
            fillcolor=color, name=label, customdata=np.append(grid.states, grid.states[-1]).tolist(),
            hovertemplate=f"%{{y:.3f}} {unit} {_escape(label)}<extra>state %{{customdata}}</extra>"))
    note = ("exact: one point per state" if grid.bucket == 1 else
            f"each step is the state with the most live bytes among {grid.bucket:,} states")
    fig.update_layout(
        height=320, hovermode="x unified", margin=dict(l=60, r=10, t=30, b=40), shapes=_event_line(event),
        xaxis=dict(title="event (state after it)", range=list(x_range) if x_range else [x[0], x[-1]]),
        yaxis=dict(title=f"live memory ({unit})", rangemode="tozero", fixedrange=True),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, font=dict(size=10)),
        annotations=[dict(text=note, xref="paper", yref="paper", x=1, y=-0.18, showarrow=False, xanchor="right",
                          font=dict(size=10, color="#555"))], plot_bgcolor="#ffffff")
    return fig


def _event_line(event: int | None) -> list[dict]:
    if event is None:
        return []
    return [dict(type="line", xref="x", yref="paper", x0=event, x1=event, y0=0, y1=1,
                 line=dict(color="#000000", width=1))]


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def empty_figure(message: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(height=160, xaxis=dict(visible=False), yaxis=dict(visible=False), plot_bgcolor="#ffffff",
                      annotations=[dict(text=message, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False)])
    return fig
