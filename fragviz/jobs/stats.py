"""Imbalance across a job's ranks, and which ranks stand out: robust figures, so one wild rank cannot hide."""
from __future__ import annotations

from statistics import median
from typing import Sequence

MAD_SCALE = 1.4826  # MAD x this estimates the standard deviation of normally distributed values
OUTLIER_Z = 3.5  # Iglewicz and Hoaglin's cut for the modified z-score
FLAT_MARGIN = 0.10  # with a MAD of 0 (most ranks equal), a rank this far from the median stands out
OUTLIER_RULE = (f"a rank is an outlier when |x − median| > {OUTLIER_Z} × {MAD_SCALE} × MAD (MAD: the median of "
                f"|x − median|), or, when the MAD is 0, when x is more than {FLAT_MARGIN:.0%} away from the median")


def mad(values: Sequence[float]) -> float:
    """The median absolute deviation from the median (0 for no values)."""
    if not values:
        return 0.0
    m = median(values)
    return float(median(abs(v - m) for v in values))


def outliers(values: Sequence[float]) -> list[bool]:
    """Which values stand out from the rest, in order (OUTLIER_RULE).

    A value x is an outlier when |x − median| > OUTLIER_Z × MAD_SCALE × MAD: the modified z-score, which
    median and MAD keep from being pulled by the outliers themselves (a mean and standard deviation would be:
    one rank at 10× makes the deviation large enough to hide it). Where more than half the values are equal
    the MAD is 0 and every other value would count, so then x is an outlier when |x − median| is more than
    FLAT_MARGIN × median. (Two values never stand out: each is as far from their median as the MAD.)
    """
    if not values:
        return []
    m, spread = median(values), mad(values)
    if spread > 0:
        return [abs(v - m) > OUTLIER_Z * MAD_SCALE * spread for v in values]
    return [abs(v - m) > FLAT_MARGIN * abs(m) for v in values]


def imbalance(values: Sequence[float]) -> float | None:
    """max / median: 1.0 for a balanced job; None for no values or a median of 0."""
    if not values:
        return None
    m = median(values)
    return float(max(values) / m) if m > 0 else None
