"""The layer behind a site's activations, tied by sizes, so that `--scale SITE=F` widens the layer and not only
the line that calls it.

A layer made during the trace shows as its parameters, grouped by the line that constructed it (fragviz.usage.sites:
`nn.Linear(...)` in the user's `__init__`). Its row is the greatest common divisor of its parameter sizes: a
Linear(h_in, h_out)'s weight is h_in·h_out elements and its bias h_out, so the row is h_out elements' bytes, and its
output, the site's activation, is a whole number of such rows (batch·h_out). The site's layer is the construction
site whose row divides every size the site's activations requested; where several do (dimensions that are powers
of two divide each other), the one with the largest row, the widest output that fits; where two sites share that
row, neither, since which one made the activation cannot be told. A weight takes the factor in one dimension, the
output's, as a wider output does: a layer whose input widens too (×F²) is not modelled.

What widening the layer grows is then tied by size, since gradients and optimizer state are made far from the
layer's code: every parameter of a size the layer's parameters have (a layer of the same two dimensions, an MLP's
other projection, reads the widened dimension too), the gradients and optimizer state of those sizes (a
parameter's gradient and Adam's exp_avg/exp_avg_sq have its size; so do the optimizer step's temporaries), and
the backward pass's derivatives of the site's activations (gradients of an activation's size and of no
parameter's). A size that another parameter, not the layer's, also has is ambiguous and stays as recorded, unless
it is a weight's (larger than the row): a layer of the same two dimensions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce
from typing import Callable, Sequence

import numpy as np

from fragviz.base.units import format_bytes
from fragviz.model import Frame
from fragviz.usage.sites import site_label

ACTIVATIONS, GRADIENTS, PARAMETERS, OPTIMIZER_STATE = "activations", "gradients", "parameters", "optimizer_state"


@dataclass(frozen=True)
class LayerTie:
    """A site's layer: where it was constructed, its row's bytes, and the sizes that grow with it, by kind."""

    construction: str  # the site that made the layer's parameters ("train.py:15 __init__")
    row_bytes: int
    sizes: dict[str, frozenset[int]]  # kind: the sizes of that kind the layer's width grows
    activation_sizes: frozenset[int]  # what the site's activations requested

    def covers(self, kind: str, size: int) -> bool:
        return size in self.sizes.get(kind, ())


def construction_sites(stacks: np.ndarray, sizes: np.ndarray, kinds: np.ndarray,
                       frames_of: Callable[[int], Sequence[Frame]]) -> dict[str, set[int]]:
    """The sizes of the parameters made during the trace, by the site that made them (a layer's constructor)."""
    out: dict[str, set[int]] = {}
    for stack in np.unique(stacks[kinds == PARAMETERS]).tolist():
        if stack >= 0:
            mine = (stacks == stack) & (kinds == PARAMETERS)
            out.setdefault(site_label(frames_of(stack)), set()).update(int(s) for s in np.unique(sizes[mine]))
    return out


def tie_layer(activation_sizes: set[int], sites: dict[str, set[int]], kinds: np.ndarray,
              sizes: np.ndarray) -> LayerTie | None:
    """The layer of a site whose activations requested `activation_sizes` (None: no construction site's row
    divides them all, or the site made no activation), and the sizes its width grows, by kind."""
    if not activation_sizes:
        return None
    rows = {site: reduce(math.gcd, site_sizes) for site, site_sizes in sites.items()}
    fitting = [(row, site) for site, row in rows.items() if all(a % row == 0 for a in activation_sizes)]
    if not fitting:
        return None
    row, site = max(fitting)
    if sum(r == row for r, _ in fitting) > 1:
        return None  # two layers of the widest row: which one made the activation cannot be told
    layer = set(sites[site])
    others = set().union(*(s for name, s in sites.items() if name != site))
    params = {int(s) for s in sizes[kinds == PARAMETERS]}
    tied = frozenset(s for s in layer if s not in others or s in _same_shaped(layer, others))
    derivatives = frozenset(activation_sizes - params)
    return LayerTie(site, row, {PARAMETERS: tied, GRADIENTS: tied | derivatives, OPTIMIZER_STATE: tied},
                    frozenset(activation_sizes))


def _same_shaped(layer: set[int], others: set[int]) -> set[int]:
    """The layer's sizes another layer's parameters share that are weights (not its row, the bias): a layer of
    the same two dimensions, as an MLP's up and down projections are, reads the widened dimension too."""
    row = reduce(math.gcd, layer)
    return {s for s in layer & others if s > row}


def site_notes(label: str, factor: float, tie: LayerTie | None, picked: np.ndarray, kinds: np.ndarray,
               sizes: np.ndarray) -> list[str]:
    """What a site's scale tied of its layer, and what it left as recorded: the parameters, gradients and
    optimizer state not tied (how many allocations, how many bytes), and other sites' activations of the site's
    activation's size (an elementwise op on it, a GELU, widens with it in the program)."""
    out = []
    if tie is not None:
        parts = [f"{k.replace('_', ' ')} {int((picked & (kinds == k)).sum())} "
                 f"({format_bytes(int(sizes[picked & (kinds == k)].sum()))})"
                 for k in (PARAMETERS, GRADIENTS, OPTIMIZER_STATE) if (picked & (kinds == k)).any()]
        out.append(f"{label} widens the layer constructed at {tie.construction} (its row of "
                   f"{format_bytes(tie.row_bytes)} divides the site's activations): scaled with it, by size, "
                   f"{', '.join(parts)} allocations: every parameter of a size of that layer's (a weight takes "
                   f"×{factor:g} in one dimension, the output's; an input that widens too is not modelled), their "
                   "gradients and optimizer state, and the backward pass's derivatives of the site's activations")
    left = ~picked & np.isin(kinds, [PARAMETERS, "parameters_inferred", GRADIENTS, OPTIMIZER_STATE])
    if left.any():
        why = ("of other sizes (other layers', or a size another layer shares)" if tie is not None else
               "made elsewhere, and no one layer's parameters made during the trace could be tied to the site (no "
               "layer's row divides its activations, or two layers' rows do equally)")
        out.append(f"{label} left as recorded {int(left.sum())} parameters, gradients and optimizer state "
                   f"allocations ({format_bytes(int(sizes[left].sum()))}), {why}: where they grow with the change, "
                   "the simulated figures come out low")
    same = ~picked & (kinds == ACTIVATIONS) & np.isin(sizes, list(tie.activation_sizes if tie else ()))
    if same.any():
        out.append(f"{label} left as recorded {int(same.sum())} activations of other sites with the site's "
                   f"activation's size ({format_bytes(int(sizes[same].sum()))}; an elementwise op on it, say): "
                   "where they grow with the change, the simulated figures come out low")
    return out
