"""How an allocation's size follows the knob (batch, sequence length, hidden size): a law per allocation, read off
its sizes in the recordings.

A tensor's bytes are a product of its dimensions, so an allocation's size is, in the knob S, constant (weights,
their gradients, optimizer state), linear (activations: batch × sequence × width), quadratic (attention scores
at sequence length S: S × S) or, where dimensions mix, some other power. With two recordings the law is the
one of those that the two sizes follow exactly (to TOLERANCE), else the power through both; with three, the
candidates are checked on all three, then a line (a + bS), then a fitted power, then the parabola through the
three. The law is chosen per allocation, not per site: one site (a `loss.backward()` line, a shared helper)
makes allocations of every law.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

CONSTANT, LINEAR, QUADRATIC, POWER = "constant", "linear", "quadratic", "power"
LAWS = (CONSTANT, LINEAR, QUADRATIC, POWER)
EXPONENTS = {CONSTANT: 0, LINEAR: 1, QUADRATIC: 2}
TOLERANCE = 0.01  # relative: sizes within 1 % of a law follow it (a few bytes of header or alignment)
MAX_EXPONENT = 4.0  # a fitted power is held within [-MAX_EXPONENT, MAX_EXPONENT]
MAX_BYTES = 1 << 62  # a predicted size is held below this: int64 holds it (beyond, the cast wraps negative)


@dataclass(frozen=True)
class Laws:
    """Every matched allocation's law (`law`, names from LAWS) and its exponent, for a power through the recording
    nearest the target; nan where a polynomial through the recordings (three or more) is the law."""

    knobs: tuple[float, ...]
    sizes: np.ndarray  # float64: one row per allocation, one column per recording
    law: np.ndarray  # object: law names
    exponent: np.ndarray  # float64

    def at(self, target: float) -> np.ndarray:
        """Each allocation's bytes at knob `target` (int64, at least 1)."""
        knobs = self.knobs
        nearest = min(range(len(knobs)), key=lambda c: abs(math.log(target / knobs[c])))
        exponent = np.where(np.isnan(self.exponent), 0.0, self.exponent)
        predicted = self.sizes[:, nearest] * (target / knobs[nearest]) ** exponent
        for r in np.nonzero(np.isnan(self.exponent))[0].tolist():  # a line or a parabola, nearest every recording
            degree = 1 if self.law[r] == LINEAR else 2
            predicted[r] = np.polyval(np.polyfit(knobs, self.sizes[r], degree), target)
        return np.clip(np.rint(predicted), 1, MAX_BYTES).astype(np.int64)


def fit_laws(knobs: Sequence[float], sizes: np.ndarray) -> Laws:
    """The laws of allocations whose sizes at `knobs` are the columns of `sizes` (one row per allocation)."""
    knobs = tuple(float(k) for k in knobs)
    sizes = np.asarray(sizes, np.float64).reshape(-1, len(knobs))
    law, exponent = (_two if len(knobs) == 2 else _many)(list(knobs), sizes)
    return Laws(knobs, sizes, law, exponent)


def _follows(knobs: list[float], sizes: np.ndarray, p: float) -> np.ndarray:
    """Rows whose sizes are proportional to knob ** p across every recording."""
    scale = sizes[:, :1] / knobs[0] ** p
    expected = scale * np.asarray(knobs) ** p
    return (np.abs(sizes - expected) <= TOLERANCE * np.maximum(sizes, expected)).all(axis=1)


def _power(knobs: list[float], sizes: np.ndarray) -> np.ndarray:
    """The least-squares exponent of each row in log space (through both points with two recordings)."""
    lx = np.log(np.asarray(knobs))
    ly = np.log(np.maximum(sizes, 1.0))
    lx_c = lx - lx.mean()
    slope = ((ly - ly.mean(axis=1, keepdims=True)) * lx_c).sum(axis=1) / (lx_c ** 2).sum()
    return np.clip(slope, -MAX_EXPONENT, MAX_EXPONENT)


def _two(knobs: list[float], sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    law = np.full(len(sizes), POWER, object)
    exponent = _power(knobs, sizes)
    for name in (QUADRATIC, LINEAR, CONSTANT):  # the simplest law that holds wins: constant, then linear, ...
        hit = _follows(knobs, sizes, EXPONENTS[name])
        law[hit], exponent[hit] = name, EXPONENTS[name]
    return law, exponent


def _many(knobs: list[float], sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    law, exponent = _two(knobs, sizes)
    rest = law == POWER
    if not rest.any():
        return law, exponent
    x = np.asarray(knobs)
    fitted = _power(knobs, sizes)
    for r in np.nonzero(rest)[0].tolist():
        y = sizes[r]
        line = np.polyval(np.polyfit(x, y, 1), x)
        powered = y[0] / x[0] ** fitted[r] * x ** fitted[r]
        if np.all(np.abs(line - y) <= TOLERANCE * np.abs(y)):
            law[r], exponent[r] = LINEAR, np.nan  # a + bS: a polynomial of degree 1 ...
        elif np.all(np.abs(powered - y) <= TOLERANCE * np.abs(y)):
            law[r], exponent[r] = POWER, fitted[r]
        else:
            law[r], exponent[r] = QUADRATIC, np.nan  # ... or the parabola through the three
    return law, exponent
