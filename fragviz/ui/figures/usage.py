"""Figures of what holds memory: allocations as stacked bands, live memory by kind or by site. Pure."""
from __future__ import annotations

from html import escape
from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from fragviz.ui.data.usage import BandView, GroupView
from fragviz.ui.figures.style import TRACE_X_MARGIN, unit_for
from fragviz.usage.kinds import KIND_LABELS

# Site colours (Okabe-Ito, then Tableau): the last, grey, is every other site
SITE_COLORS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#8C564B",
               "#17BECF", "#9A9A9A")
# parameters (inferred) in a paler blue than parameters: the same guess, told apart from what stacks say
KIND_COLORS = {"parameters": "#0072B2", "parameters_inferred": "#8EC4E8", "gradients": "#D55E00",
               "optimizer_state": "#E69F00", "activations": "#009E73", "kv_cache": "#CC79A7",
               "no_stack": "#5E5E5E", "other": "#9A9A9A"}


def site_color(group: int, groups: int) -> str:
    return SITE_COLORS[-1] if group == groups - 1 else SITE_COLORS[group % (len(SITE_COLORS) - 1)]


def _short(name: str, most: int = 60) -> str:
    return name if len(name) <= most else "…" + name[-(most - 1):]


def bands_figure(view: BandView, x_range: Sequence[float] | None = None) -> go.Figure:
    """Every allocation drawn apart as a band (rectangles of constant offset), the rest folded per site above.

    The rectangles of a site are one SVG path (a layout shape): a redraw costs a few paths however many bands
    there are (a bar or a filled segment per rectangle costs hundreds of milliseconds at a few thousand). The
    words for each rectangle travel in `layout.meta.bands`; assets/usage.js shows them under the pointer and
    sends a clicked band to the stack panel.
    """
    b, grid = view.bands, view.bands.grid
    scale, unit = unit_for(float(grid.live.max()) if len(grid) else 0.0)
    edges = grid.edges
    groups = len(view.group_names)
    run_group = view.group[b.run_band] if len(b.run_band) else np.zeros(0, np.int64)
    shapes, fig = [], go.Figure()
    for g, name in enumerate(view.group_names):
        pick = np.nonzero(run_group == g)[0]
        folded = b.folded[g].any()
        if len(pick):
            base = b.run_base[pick] / scale
            shapes.append(_path_shape(edges[b.run_first[pick]], edges[b.run_last[pick]], base,
                                      base + view.sizes[b.run_band[pick]] / scale, site_color(g, groups)))
        if folded:
            low = b.folded_base[g] / scale
            shapes.append(_step_shape(edges, low, low + b.folded[g] / scale, site_color(g, groups)))
        if len(pick) or folded:  # a legend entry: the shapes have none
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=_short(name),
                                     marker=dict(symbol="square", size=10, color=site_color(g, groups))))
    note = ("exact: one column per state" if grid.bucket == 1 else
            f"each column is the state with the most live bytes among {grid.bucket:,} states")
    folded_note = f"; {b.folded_count:,} smaller allocations folded per site (pale)" if b.folded_count else ""
    top = float(grid.live.max()) / scale if len(grid) else 1.0
    fig.update_layout(
        hovermode=False, height=464, margin=dict(TRACE_X_MARGIN, t=40, b=64), shapes=shapes,
        meta={"bands": _hover_table(view, scale)},
        xaxis=dict(title="event (state after it)", range=list(x_range) if x_range else [edges[0], edges[-1]],
                   showgrid=False),
        yaxis=dict(title=f"live memory ({unit})", range=[0, top * 1.04 or 1], fixedrange=True, showgrid=False),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, font=dict(size=10), itemclick=False,
                    itemdoubleclick=False),
        annotations=[_note(note + folded_note)],
        plot_bgcolor="#ffffff")
    return fig


def _step_shape(edges: np.ndarray, low: np.ndarray, high: np.ndarray, color: str) -> dict:
    """A band that changes height from bucket to bucket as one closed step outline: along its top, back along
    its base (a step only where the height changes)."""
    e = edges.tolist()
    top = _steps(high.tolist(), e[1:])
    back = _steps(low[::-1].tolist(), e[-2::-1])
    return dict(type="path", path=f"M{e[0]},{low[0]:.4g}{top}{back}Z", xref="x", yref="y", fillcolor=color,
                opacity=0.4, layer="below", line=dict(width=0))


def _steps(heights: list[float], ends: list[int]) -> str:
    """SVG steps: for each bucket, up or down to its height, then across to its end (merged while level)."""
    out, level = [], None
    for i, (h, x) in enumerate(zip(heights, ends)):
        h = float(f"{h:.4g}")  # a tenth of a pixel on a dashboard-high plot
        if h != level:
            out.append(f"V{h:.4g}")
            level = h
        if i == len(ends) - 1 or float(f"{heights[i + 1]:.4g}") != h:
            out.append(f"H{x}")
    return "".join(out)


def _path_shape(x0: np.ndarray, x1: np.ndarray, y0: np.ndarray, y1: np.ndarray, color: str) -> dict:
    """Rectangles as one closed SVG path in the axes' units (states are whole numbers: written whole)."""
    path = "".join(f"M{a},{c:.4g}H{b}V{d:.4g}H{a}Z"
                   for a, b, c, d in zip(x0.tolist(), x1.tolist(), y0.tolist(), y1.tolist()))
    return dict(type="path", path=path, xref="x", yref="y", fillcolor=color, layer="below", line=dict(width=0))


def _hover_table(view: BandView, scale: float) -> dict:
    """Every rectangle (its corners in the plot's units, its band) and each band's words, for assets/usage.js."""
    b, edges = view.bands, view.bands.grid.edges
    base = b.run_base / scale
    return {"x0": edges[b.run_first].tolist(), "x1": edges[b.run_last].tolist(), "y0": base.tolist(),
            "y1": (base + view.sizes[b.run_band] / scale).tolist(), "band": b.run_band.tolist(),
            "row": b.rows.tolist(), "text": view.hover, "folded": _folded_table(view, scale)}


def _folded_table(view: BandView, scale: float) -> dict:
    """The folded bands bucket by bucket (where they hold anything): corners, site group, bytes and state (the
    words are put together in the browser: the same sentence thousands of times would weigh on every view)."""
    b, grid = view.bands, view.bands.grid
    g, j = np.nonzero(b.folded)
    base = b.folded_base[g, j] / scale
    return {"x0": grid.edges[j].tolist(), "x1": grid.edges[j + 1].tolist(), "y0": base.tolist(),
            "y1": (base + b.folded[g, j] / scale).tolist(), "group": g.tolist(), "bytes": b.folded[g, j].tolist(),
            "state": grid.states[j].tolist(), "names": [escape(_short(n, 80), quote=False) for n in view.group_names]}


def groups_figure(view: GroupView, x_range: Sequence[float] | None = None) -> go.Figure:
    """Stacked areas of live memory per kind (or per site), as steps: a bucket's state holds until the next."""
    grid = view.grid
    scale, unit = unit_for(float(view.values.sum(axis=0).max()) if view.values.size else 0.0)
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
            hovertemplate=f"%{{y:.3f}} {unit} {escape(label, quote=False)}<extra>state %{{customdata}}</extra>"))
    note = ("exact: one point per state" if grid.bucket == 1 else
            f"each step is the state with the most live bytes among {grid.bucket:,} states")
    fig.update_layout(
        height=344, hovermode="x unified", margin=dict(TRACE_X_MARGIN, t=30, b=64),
        xaxis=dict(title="event (state after it)", range=list(x_range) if x_range else [x[0], x[-1]]),
        yaxis=dict(title=f"live memory ({unit})", rangemode="tozero", fixedrange=True),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, font=dict(size=10)),
        annotations=[_note(note)], plot_bgcolor="#ffffff")
    return fig


def _note(text: str) -> dict:
    """How a chart's states were drawn: at the bottom right, on a line of its own under the x axis's title."""
    return dict(text=text, xref="paper", yref="paper", x=1, y=0, yanchor="top", yshift=-46, showarrow=False,
                xanchor="right", font=dict(size=10, color="#555"))


def empty_figure(message: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(height=160, xaxis=dict(visible=False), yaxis=dict(visible=False), plot_bgcolor="#ffffff",
                      annotations=[dict(text=message, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False)])
    return fig
