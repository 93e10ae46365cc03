"""How an allocation's size follows the knob (batch, sequence length, hidden size): the laws its sizes in the
recordings allow, the one chosen, and the spread of the others.

A tensor's bytes are a product of its dimensions, so an allocation's size in the knob S is constant (weights,
their gradients, optimizer state), linear (activations: batch × sequence × width), quadratic (attention scores:
S × S), affine where a dimension is S plus something (a prefix of tokens: a + bS), a sum of those (a flattened
copy of every parameter: a + bS + cS²), a power where dimensions mix, or clamped where a size stops growing.

Every candidate is one formula, a + b·S^p + c·S², with its own parameters per allocation (`Fit`). Which laws the
recordings allow:

- A pure law (constant, linear, quadratic) that holds on every recording (to TOLERANCE) is the only one: sizes
  that follow one exactly are read as that product of dimensions.
- Otherwise, with two recordings, every two-parameter law goes through both: the power (the prediction), the
  affine line and a + cS². The recordings cannot tell them apart; the spread of their predictions is the
  allocation's range, and the allocation is counted as ambiguous.
- With three or more, a two-parameter law (affine, then power) that holds on every recording is chosen; a size
  equal in the two largest recordings after growing is clamped; else the three-parameter laws that hold (the
  polynomial a + bS + cS², the affine power a + bS^p) are the range, and the polynomial the prediction. Where
  nothing holds (four or more recordings of noisy sizes), every law stays in the range, and the one with the
  smallest leave-one-out error (the largest recording predicted from the others) is the prediction.
- Sizes that depend on the data (batches padded to their longest sample) follow no law per allocation: their
  exponents scatter. `data_dependent` finds the sites where they do, and predicts their allocations by the
  site's median exponent, its lowest and highest the range.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

CONSTANT, LINEAR, QUADRATIC, POWER = "constant", "linear", "quadratic", "power"
AFFINE, AFFINE_POWER, POLYNOMIAL, CLAMPED = "affine", "affine power", "polynomial", "clamped"
LAWS = (CONSTANT, LINEAR, QUADRATIC, AFFINE, POWER, AFFINE_POWER, POLYNOMIAL, CLAMPED)
PURE = {CONSTANT: 0, LINEAR: 1, QUADRATIC: 2}  # the exponent of each pure law
TOLERANCE = 0.01  # relative: sizes within 1 % of a law follow it (a few bytes of header or alignment)
MAX_EXPONENT = 4.0  # a fitted power is held within [-MAX_EXPONENT, MAX_EXPONENT]
MAX_BYTES = 1 << 62  # a predicted size is held below this: int64 holds it (beyond, the cast wraps negative)
GRID = np.linspace(0.25, MAX_EXPONENT, 76)  # the exponents an affine power is fitted over (steps of 0.05)
SCATTER = 0.25  # a site whose allocations' exponents spread wider than this has sizes that depend on the data
SCATTERED_ROWS = 4  # ... counted where it has at least this many allocations that follow no law


@dataclass(frozen=True)
class Fit:
    """One law's parameters for every allocation: its size at S is a + b·S^p + c·S²."""

    a: np.ndarray
    b: np.ndarray
    p: np.ndarray
    c: np.ndarray

    def at(self, target: float) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            return self.a + self.b * np.power(float(target), self.p) + self.c * float(target) ** 2

    def residual(self, knobs: Sequence[float], sizes: np.ndarray) -> np.ndarray:
        """The largest relative miss of each row over the recordings (inf where the law has no value)."""
        predicted = np.stack([self.at(k) for k in knobs], axis=1)
        miss = np.abs(predicted - sizes) / np.maximum(np.abs(sizes), 1.0)
        return np.where(np.isfinite(miss), miss, np.inf).max(axis=1)


@dataclass(frozen=True)
class Laws:
    """Every matched allocation's chosen law (`law`, names from LAWS), the exponent of a pure law or a power (nan
    otherwise), and the laws its recordings allow (`plausible`, one column per name in LAWS)."""

    knobs: tuple[float, ...]
    sizes: np.ndarray  # float64: one row per allocation, one column per recording
    law: np.ndarray  # object: law names
    exponent: np.ndarray  # float64
    plausible: np.ndarray  # bool: rows × LAWS
    fits: dict[str, Fit]
    # data-dependent rows (nan elsewhere): the lowest and highest exponent of their site, and the site's largest
    # size in the largest recording (what a row may be, whichever draw it was)
    spread: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def at(self, target: float) -> np.ndarray:
        """Each allocation's bytes at knob `target` under its chosen law (int64, at least 1)."""
        return _bytes(self.raw_at(target))

    def bounds_at(self, target: float) -> tuple[np.ndarray, np.ndarray]:
        """Each allocation's lowest and highest bytes at `target` under the laws its recordings allow."""
        low, high = self.raw_bounds_at(target)
        return _bytes(low), _bytes(high)

    def raw_at(self, target: float) -> np.ndarray:
        """Each row's value at `target` under its chosen law, unrounded and unclipped (a fitted quantity that is
        no size, such as a growth per step, may be 0 or below)."""
        predicted = np.empty(len(self.law))
        for name, fit in self.fits.items():
            rows = self.law == name
            if rows.any():
                predicted[rows] = fit.at(target)[rows]
        return predicted

    def raw_bounds_at(self, target: float) -> tuple[np.ndarray, np.ndarray]:
        """Each row's lowest and highest value at `target` under the laws its recordings allow (the chosen one
        among them; a law with no value there, past float's range, is passed over), unrounded and unclipped."""
        point = self.raw_at(target)
        low, high = point.copy(), point.copy()
        for column, name in enumerate(LAWS):
            rows = self.plausible[:, column]
            if rows.any() and name in self.fits:
                values = self.fits[name].at(target)[rows]
                low[rows], high[rows] = np.fmin(low[rows], values), np.fmax(high[rows], values)
        if self.spread is not None:
            rows = ~np.isnan(self.spread[0])
            k = int(np.argmax(self.knobs))
            values = self.sizes[rows, k] * (target / self.knobs[k]) ** self.spread[0][rows]
            low[rows] = np.fmin(low[rows], values)
            values = self.spread[2][rows] * (target / self.knobs[k]) ** self.spread[1][rows]
            high[rows] = np.fmax(high[rows], values)
        return low, high

    @property
    def ambiguous(self) -> np.ndarray:
        """Rows whose recordings allow more than one law (or a spread of exponents)."""
        wide = self.plausible.sum(axis=1) > 1
        if self.spread is not None:
            wide |= ~np.isnan(self.spread[0])
        return wide


def fit_laws(knobs: Sequence[float], sizes: np.ndarray, groups: Sequence[int] | None = None) -> Laws:
    """The laws of allocations whose sizes at `knobs` are the columns of `sizes` (one row per allocation);
    `groups` (one id per row: its site) lets sites whose sizes depend on the data be told."""
    knobs = tuple(float(k) for k in knobs)
    sizes = np.asarray(sizes, np.float64).reshape(-1, len(knobs))
    fits = _fits(knobs, sizes)
    law, plausible = _choose(knobs, sizes, fits)
    exponent = np.full(len(sizes), np.nan)
    for name in (CONSTANT, LINEAR, QUADRATIC, POWER):
        rows = law == name
        exponent[rows] = fits[name].p[rows]
    laws = Laws(knobs, sizes, law, exponent, plausible, fits)
    return data_dependent(laws, groups) if groups is not None else laws


def _fits(knobs: tuple[float, ...], sizes: np.ndarray) -> dict[str, Fit]:
    """Every candidate law fitted to every row."""
    n = len(sizes)
    zero = np.zeros(n)
    fits = {name: _through_largest(knobs, sizes, np.full(n, float(p))) for name, p in PURE.items()}
    fits[POWER] = _through_largest(knobs, sizes, _power(knobs, sizes))
    fits[AFFINE] = _least_squares(knobs, sizes, 1.0)
    if len(knobs) == 2:
        fits[AFFINE_POWER] = _least_squares(knobs, sizes, 2.0)  # a + cS²: attention beside linear terms
    else:
        fits[AFFINE_POWER] = _affine_power(knobs, sizes)
        x = np.asarray(knobs)
        coef = np.linalg.lstsq(np.stack([np.ones_like(x), x, x * x], axis=1), sizes.T, rcond=None)[0]
        fits[POLYNOMIAL] = Fit(coef[0], coef[1], np.ones(n), coef[2])
        fits[CLAMPED] = Fit(sizes[:, int(np.argmax(x))], zero, zero, zero)
    return fits


def _choose(knobs: tuple[float, ...], sizes: np.ndarray, fits: dict[str, Fit]) -> tuple[np.ndarray, np.ndarray]:
    """The chosen law of every row and the laws its recordings allow (see the module's docstring)."""
    n = len(sizes)
    law = np.full(n, "", object)
    plausible = np.zeros((n, len(LAWS)), bool)
    col = {name: LAWS.index(name) for name in LAWS}
    holds = {name: fit.residual(knobs, sizes) <= TOLERANCE for name, fit in fits.items()}
    if POLYNOMIAL in fits:  # a parabola that bends down turns back: no size that grew with the knob does that
        holds[POLYNOMIAL] &= ~(_growing(knobs, sizes) & (fits[POLYNOMIAL].c < 0))
    open_ = np.ones(n, bool)
    for name in PURE:  # the simplest pure law that holds wins: constant, then linear, then quadratic
        hit = open_ & holds[name]
        law[hit], plausible[hit, col[name]], open_ = name, True, open_ & ~hit
    if len(knobs) == 2:
        law[open_] = POWER
        for name in (POWER, AFFINE, AFFINE_POWER):
            plausible[open_, col[name]] = True
        return law, plausible
    for name in (AFFINE, POWER):  # two parameters that hold on three or more recordings
        hit = open_ & holds[name]
        law[hit] = np.where(law[hit] == "", name, law[hit])
        plausible[hit, col[name]] = True
    open_ &= law == ""
    clamped = open_ & _clamped(knobs, sizes)
    law[clamped], plausible[clamped, col[CLAMPED]], open_ = CLAMPED, True, open_ & ~clamped
    for name in (POLYNOMIAL, AFFINE_POWER):
        hit = open_ & holds[name]
        law[hit] = np.where(law[hit] == "", name, law[hit])
        plausible[hit, col[name]] = True
    open_ &= law == ""
    if open_.any():  # noisy: every law stays possible; the best at predicting the largest recording is chosen
        for name in (AFFINE, POWER, POLYNOMIAL, AFFINE_POWER):
            plausible[open_, col[name]] = True
        law[open_] = _least_loo(knobs, sizes[open_])
    return law, plausible


def _growing(knobs: tuple[float, ...], sizes: np.ndarray) -> np.ndarray:
    """Rows whose sizes never shrink as the knob grows, and grow somewhere."""
    ordered = sizes[:, np.argsort(knobs)]
    return (np.diff(ordered, axis=1) >= 0).all(axis=1) & (ordered[:, -1] > ordered[:, 0])


def _clamped(knobs: tuple[float, ...], sizes: np.ndarray) -> np.ndarray:
    """Rows that grew, then stayed: equal (to TOLERANCE) in the two largest recordings, not in the smallest."""
    order = np.argsort(knobs)
    top, second, first = sizes[:, order[-1]], sizes[:, order[-2]], sizes[:, order[0]]
    same = np.abs(top - second) <= TOLERANCE * np.maximum(top, 1.0)
    return same & (np.abs(top - first) > TOLERANCE * np.maximum(top, 1.0))


def _least_loo(knobs: tuple[float, ...], sizes: np.ndarray) -> np.ndarray:
    """For each row, the two-parameter law (affine or power) that best predicts the largest recording from the
    others: the leave-one-out that matters for a prediction beyond the recordings."""
    order = np.argsort(knobs)
    rest = tuple(knobs[i] for i in order[:-1])
    last = knobs[order[-1]]
    truth = sizes[:, order[-1]]
    misses = []
    for fit in (_least_squares(rest, sizes[:, order[:-1]], 1.0),
                _through_largest(rest, sizes[:, order[:-1]], _power(rest, sizes[:, order[:-1]]))):
        misses.append(np.abs(fit.at(last) - truth))
    return np.where(misses[0] <= misses[1], AFFINE, POWER).astype(object)


def _through_largest(knobs: Sequence[float], sizes: np.ndarray, exponent: np.ndarray) -> Fit:
    """b·S^p through each row's size in the largest recording (the nearest to the sizes predicted, and exact
    wherever the law holds)."""
    k = int(np.argmax(knobs))
    b = sizes[:, k] / np.power(knobs[k], exponent)
    zero = np.zeros(len(sizes))
    return Fit(zero, b, exponent, zero)


def _least_squares(knobs: Sequence[float], sizes: np.ndarray, p: float) -> Fit:
    """a + b·S^p by least squares (through both points with two recordings)."""
    x = np.power(np.asarray(knobs, np.float64), p)
    coef = np.linalg.lstsq(np.stack([np.ones_like(x), x], axis=1), sizes.T, rcond=None)[0]
    n = len(sizes)
    return Fit(coef[0], coef[1], np.full(n, p), np.zeros(n))


def _affine_power(knobs: Sequence[float], sizes: np.ndarray) -> Fit:
    """a + b·S^p with p from GRID: the exponent whose least-squares line leaves the smallest miss, per row."""
    best_err = np.full(len(sizes), np.inf)
    best = Fit(*(np.zeros(len(sizes)) for _ in range(4)))
    for p in GRID.tolist():
        fit = _least_squares(knobs, sizes, p)
        err = fit.residual(knobs, sizes)
        better = err < best_err
        best_err = np.where(better, err, best_err)
        best = Fit(*(np.where(better, new, old) for new, old in zip((fit.a, fit.b, fit.p, fit.c),
                                                                      (best.a, best.b, best.p, best.c))))
    return best


def _power(knobs: Sequence[float], sizes: np.ndarray) -> np.ndarray:
    """The least-squares exponent of each row in log space (through both points with two recordings)."""
    lx = np.log(np.asarray(knobs))
    ly = np.log(np.maximum(sizes, 1.0))
    lx_c = lx - lx.mean()
    slope = ((ly - ly.mean(axis=1, keepdims=True)) * lx_c).sum(axis=1) / (lx_c ** 2).sum()
    return np.clip(slope, -MAX_EXPONENT, MAX_EXPONENT)


def data_dependent(laws: Laws, groups: Sequence[int]) -> Laws:
    """`laws` with the allocations of data-dependent sites predicted by their site's median exponent, the site's
    lowest and highest exponents their range. A site is data-dependent where at least SCATTERED_ROWS of its
    allocations follow no law of fewer than three parameters, one of them with an exponent no product of up to
    two dimensions gives, and their exponents spread wider than SCATTER."""
    groups = np.asarray(groups)
    exponents = _power(laws.knobs, laws.sizes)
    if len(laws.knobs) == 2:
        # any two sizes fit a law: a site's are taken for noise where one grows as no product of up to two
        # dimensions does (it shrinks, or grows faster than the square)
        loose = ~np.isin(laws.law, list(PURE))
        odd = (exponents < -0.05) | (exponents > 2.05)
    else:
        # three-parameter laws go through any three points: a site's sizes that only they explain (or none) are
        # taken for noise where their exponents scatter
        loose = np.isin(laws.law, [POLYNOMIAL, AFFINE_POWER]) | (laws.plausible.sum(axis=1) == 4)
        odd = np.ones(len(groups), bool)
    low = np.full(len(groups), np.nan)
    high = np.full(len(groups), np.nan)
    ceiling = np.full(len(groups), np.nan)
    largest = laws.sizes[:, int(np.argmax(laws.knobs))]
    law, exponent = laws.law.copy(), laws.exponent.copy()
    for g in np.unique(groups[loose]).tolist():
        rows = loose & (groups == g)
        if rows.sum() < SCATTERED_ROWS or np.ptp(exponents[rows]) <= SCATTER or not odd[rows].any():
            continue
        # the low end no faster than in proportion to the knob: a padded length stops growing at its longest
        low[rows], high[rows] = min(exponents[rows].min(), 1.0), exponents[rows].max()
        ceiling[rows] = largest[rows].max()
        law[rows], exponent[rows] = POWER, float(np.median(exponents[rows]))
    if np.isnan(low).all():
        return laws
    fits = dict(laws.fits)
    mixed = ~np.isnan(low)
    fits[POWER] = _through_largest(laws.knobs, laws.sizes, np.where(mixed, exponent, laws.fits[POWER].p))
    plausible = laws.plausible.copy()
    plausible[mixed] = False  # the laws through one allocation's noise are no evidence: the site's spread is
    plausible[mixed, LAWS.index(POWER)] = True
    return Laws(laws.knobs, laws.sizes, law, exponent, plausible, fits, (low, high, ceiling))


def _bytes(predicted: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(np.nan_to_num(predicted, nan=1.0, posinf=MAX_BYTES)), 1, MAX_BYTES).astype(np.int64)
