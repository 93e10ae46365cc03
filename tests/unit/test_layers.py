"""The layer behind a site's activations (fragviz.simulate.layers), tied by sizes worked out by hand: an MLP of
width 768 and hidden 3072 in float32, batch 10."""
from __future__ import annotations

import numpy as np

from fragviz.simulate.layers import tie_layer

UP_W, UP_B = 768 * 3072 * 4, 3072 * 4  # Linear(768, 3072): 9437184 and 12288 bytes
DOWN_W, DOWN_B = 3072 * 768 * 4, 768 * 4  # Linear(3072, 768): the same weight's bytes, a bias of 3072
NORM = 768 * 4  # LayerNorm(768): weight and bias
HIDDEN = 10 * 3072 * 4  # the up projection's output at batch 10: 122880 bytes
SITES = {"mlp.py:5 __init__": {UP_W, UP_B}, "mlp.py:6 __init__": {DOWN_W, DOWN_B}, "mlp.py:7 __init__": {NORM}}


def parameters(*sizes: int) -> tuple[np.ndarray, np.ndarray]:
    return np.array(["parameters"] * len(sizes), dtype=object), np.array(sizes, dtype=np.int64)


def test_the_site_s_layer_is_the_widest_row_that_divides_its_activations():
    """Every layer's row (12288, 3072, 3072) divides 122880: the up projection's, the widest, is the layer; its
    weight, which the down projection shares, and its bias widen, and so do their gradients and Adam state; the
    backward's derivative of the hidden activation is a gradient of its size."""
    kinds, sizes = parameters(UP_W, UP_B, DOWN_W, DOWN_B, NORM, NORM)
    tie = tie_layer({HIDDEN}, SITES, kinds, sizes)
    assert tie is not None and tie.construction == "mlp.py:5 __init__" and tie.row_bytes == 12288
    assert tie.sizes["parameters"] == tie.sizes["optimizer_state"] == {UP_W, UP_B}
    assert tie.sizes["gradients"] == {UP_W, UP_B, HIDDEN}
    assert not tie.covers("parameters", DOWN_B) and not tie.covers("gradients", NORM)


def test_a_bias_size_another_layer_shares_is_ambiguous_and_stays():
    """A Linear(2, 1536) has a weight of the up projection's bias size (2·1536·4 = 12288): which of them a
    12288-byte gradient belongs to cannot be told, so that size is left; the up weight is still tied."""
    sites = {**SITES, "mlp.py:9 __init__": {2 * 1536 * 4, 1536 * 4}}
    kinds, sizes = parameters(UP_W, UP_B, DOWN_W, DOWN_B, NORM, 2 * 1536 * 4, 1536 * 4)
    tie = tie_layer({HIDDEN}, sites, kinds, sizes)
    assert tie is not None and tie.construction == "mlp.py:5 __init__" and tie.sizes["parameters"] == {UP_W}


def test_two_layers_of_the_widest_row_tie_neither():
    """A second Linear(512, 3072) has the up projection's row: which layer made the activation cannot be told."""
    sites = {**SITES, "mlp.py:9 __init__": {512 * 3072 * 4, UP_B}}
    kinds, sizes = parameters(UP_W, UP_B, DOWN_W, DOWN_B, NORM, 512 * 3072 * 4, UP_B)
    assert tie_layer({HIDDEN}, sites, kinds, sizes) is None


def test_no_layer_whose_row_divides_the_activations_ties_nothing():
    kinds, sizes = parameters(UP_W, UP_B)
    assert tie_layer({1000}, {"mlp.py:5 __init__": {UP_W, UP_B}}, kinds, sizes) is None
    assert tie_layer(set(), SITES, kinds, sizes) is None
