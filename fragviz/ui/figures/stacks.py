"""Live bytes by stack: the icicle of where in the program the memory was allocated."""
from __future__ import annotations

from html import escape

import plotly.graph_objects as go

from fragviz.base.units import format_bytes
from fragviz.model import Frame


def icicle_figure(weights: dict[tuple[Frame, ...], int], max_depth: int = 10) -> go.Figure:
    """Live bytes by stack (frames innermost first, as recorded), drawn root first: where in the program the
    memory was allocated.

    The frames every stack shares are folded into the root's label, so that the first level drawn is the first
    branch; `max_depth` levels are drawn below it. Bytes of a stack that ends where others go on stay in its
    node (a parent's box wider than its children's).
    """
    stacks = {tuple(reversed(stack)): size for stack, size in weights.items()}
    shared = _shared_prefix(list(stacks))
    ids, parents, values = ["root"], [""], [sum(stacks.values())]
    labels, hover = [_root_label(shared)], [_root_hover(shared)]
    index: dict[tuple, int] = {(): 0}
    for stack, size in sorted(stacks.items(), key=lambda kv: -kv[1]):
        path: tuple = ()
        for frame in stack[len(shared):len(shared) + max_depth]:
            parent = index[path]
            path = path + (frame,)
            node = index.get(path)
            if node is None:
                node = index[path] = len(ids)
                ids.append(f"n{node}")
                parents.append(ids[parent])
                labels.append(escape(_frame_label(frame), quote=False))
                hover.append(escape(_frame_text(frame), quote=False))
                values.append(0)
            values[node] += size
    fig = go.Figure(go.Icicle(ids=ids, parents=parents, labels=labels, values=values, branchvalues="total",
                              hovertext=hover, customdata=[format_bytes(v) for v in values],
                              hovertemplate="%{hovertext}<br>%{customdata} live<extra></extra>",
                              marker=dict(colorscale="Blues"), root=dict(color="#DDDDDD"),
                              tiling=dict(orientation="v")))  # root on top, across the width: its label fits
    fig.update_layout(height=420, margin=dict(l=10, r=10, t=10, b=10))
    return fig


def _shared_prefix(stacks: list[tuple[Frame, ...]]) -> tuple[Frame, ...]:
    """The frames all root-first `stacks` start with; short of the whole of the longest, so something is drawn."""
    if not stacks:
        return ()
    first, n = stacks[0], min(len(s) for s in stacks)
    k = next((i for i in range(n) if any(s[i] != first[i] for s in stacks)), n)
    return first[:min(k, max(len(s) for s in stacks) - 1)]


def _frame_label(frame: Frame) -> str:
    """A box's label: function (file:line); a pseudo-frame without a file (a group of frames) by its name."""
    return f"{frame.name} ({frame.filename.rsplit('/', 1)[-1]}:{frame.line})" if frame.filename else frame.name


def _frame_text(frame: Frame) -> str:
    return f"{frame.filename}:{frame.line} {frame.name}" if frame.filename else frame.name


def _root_label(shared: tuple[Frame, ...]) -> str:
    if not shared:
        return "all"
    short = [escape(f"{f.filename.rsplit('/', 1)[-1]}:{f.line} {f.name}", quote=False) for f in shared]
    chain = " → ".join(short) if len(short) <= 2 else f"{short[0]} → … → {short[-1]}"
    return f"all (via {chain})"


def _root_hover(shared: tuple[Frame, ...]) -> str:
    if not shared:
        return "all live blocks with a recorded stack"
    frames = "<br>".join(escape(_frame_text(f), quote=False) for f in shared)
    return f"all live blocks with a recorded stack, through {len(shared)} shared frames (outermost first):<br>{frames}"
