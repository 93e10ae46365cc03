"""A program's repeated step, read off one recording: its allocations are a prefix, a body repeated n times (a
token generated, a training step), and a suffix; and how the number of steps and each step's sizes follow the
knob (a cache grown one token each step; an epoch of N / batch steps).

- `find_loop`: the body, by the repeating period of the allocations' sites. The period is looked for among the
  distances between occurrences of the most common sites; the one whose repetition spans most allocations wins
  (the shortest where two span as many: a multiple of the period spans no more). Bounded on any input: at most
  MAX_WORK comparisons.
- `CountLaw`: the number of steps as a + b·S^p, p from COUNT_EXPONENTS (the count follows the knob, as tokens do,
  or its inverse, as an epoch's steps do, give or take the steps outside the loop).
- `step_sizes`: each body position's size within a recording as a + b·i, i the step (a cache one token longer
  each step), its first and last step apart, so that each can be fitted by a law of the knob.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Hashable, Sequence

import numpy as np

MAX_WORK = 20_000_000  # elements compared in all, looking for the period
SEEDS = 3  # the most common sites whose occurrences give the candidate periods
MAX_CANDIDATES = 512  # periods tried per seed
MIN_REPEATS = 2  # a body must repeat at least this many times to be taken for a loop
COUNT_EXPONENTS = (1.0, -1.0, 2.0, -2.0, 0.5, -0.5)  # the count's law: a + b·S^p
COUNT_TOLERANCE = 0.5  # steps: a law holds where it misses no recording's count by more (counts are whole)
EXACT = 1e-6  # steps: a law that gives every count exactly is the only one (as a pure law of the sizes is)


@dataclass(frozen=True)
class Loop:
    """A recording's repeated step, in allocations: `count` bodies of `period` allocations from `start`."""

    start: int
    period: int
    count: int

    @property
    def end(self) -> int:
        return self.start + self.period * self.count


def find_loop(symbols: Sequence[Hashable]) -> Loop | None:
    """The recording's repeated step (None where no body repeats MIN_REPEATS times)."""
    ids: dict[Hashable, int] = {}
    x = np.asarray([ids.setdefault(s, len(ids)) for s in symbols], np.int64)
    best: tuple[int, Loop] | None = None
    budget = MAX_WORK
    for period in _periods(x):
        if budget < len(x):
            break
        budget -= len(x)
        start, run = _longest_run(x[:-period] == x[period:])
        span = run + period
        count = span // period
        if count >= MIN_REPEATS and (best is None or span > best[0]):
            best = (span, Loop(start, period, count))
    return None if best is None else best[1]


def _periods(x: np.ndarray) -> list[int]:
    """Candidate periods, shortest first: distances from a middle occurrence of each of the SEEDS most common
    sites to its later occurrences (the period is one of them wherever that occurrence lies in the loop)."""
    found: set[int] = set()
    for symbol, _ in Counter(x.tolist()).most_common(SEEDS):
        where = np.nonzero(x == symbol)[0]
        k = len(where) // 2
        gaps = where[k + 1:k + 1 + MAX_CANDIDATES] - where[k]
        found.update(int(g) for g in gaps.tolist() if 0 < g <= len(x) // MIN_REPEATS)
    return sorted(found)


def _longest_run(same: np.ndarray) -> tuple[int, int]:
    """Start and length of the longest run of True (0, 0 where none)."""
    if not same.any():
        return 0, 0
    edges = np.diff(np.concatenate([[0], same.astype(np.int8), [0]]))
    starts, ends = np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0]
    k = int(np.argmax(ends - starts))
    return int(starts[k]), int(ends[k] - starts[k])


@dataclass(frozen=True)
class StepSizes:
    """A recording's body sizes, one entry per position: its first step's (`first`), its last step's (`last`),
    and the steps between as a + b·i (i counted from the first step, 0): a first step still carries the prefix's
    shapes (the prompt's), a last step a batch cut short, so they are told apart from the line the others follow."""

    first: np.ndarray
    a: np.ndarray
    b: np.ndarray
    last: np.ndarray


def step_sizes(sizes: np.ndarray, loop: Loop) -> StepSizes:
    """The recording's body sizes: the line a + b·i through the steps between its first and last (least
    squares), through the first and the last where there are none between."""
    grid = np.asarray(sizes[loop.start:loop.end], np.float64).reshape(loop.count, loop.period)
    if loop.count < 3:
        return StepSizes(grid[0], grid[0], grid[-1] - grid[0], grid[-1])
    i = np.arange(1, loop.count - 1, dtype=np.float64)
    middle = grid[1:-1]
    di = i - i.mean()
    spread = float((di ** 2).sum())  # 0 with one step between: no growth to read
    b = (di[:, None] * (middle - middle.mean(axis=0))).sum(axis=0) / spread if spread else np.zeros(loop.period)
    return StepSizes(grid[0], middle.mean(axis=0) - b * i.mean(), b, grid[-1])


@dataclass(frozen=True)
class CountLaw:
    """The number of steps as a + b·S^p: the chosen law, and every law the recordings allow (the range)."""

    knobs: tuple[float, ...]
    counts: tuple[int, ...]
    chosen: tuple[float, float, float]  # a, b, p
    plausible: tuple[tuple[float, float, float], ...]

    def at(self, target: float) -> int:
        return _steps(self.chosen, target)

    def bounds_at(self, target: float) -> tuple[int, int]:
        values = [_steps(law, target) for law in self.plausible] + [self.at(target)]
        return min(values), max(values)

    @property
    def ambiguous(self) -> bool:
        return len(self.plausible) > 1


def _steps(law: tuple[float, float, float], target: float) -> int:
    a, b, p = law
    value = a + b * float(target) ** p
    return max(1, int(round(value))) if np.isfinite(value) else 1


def fit_count(knobs: Sequence[float], counts: Sequence[int]) -> CountLaw:
    """The count's law: with two recordings, the line in the knob where the count grows with it, in its inverse
    where it shrinks (both go through the two, as does the power through them: the range); with three or more,
    the first of COUNT_EXPONENTS whose line holds on every recording (every one that holds: the range; only
    those that give every count exactly, where one does)."""
    knobs = tuple(float(k) for k in knobs)
    counts = tuple(int(n) for n in counts)
    order = np.argsort(knobs)
    grows = counts[order[-1]] >= counts[order[0]]
    exponents = sorted(COUNT_EXPONENTS, key=lambda p: (p < 0) == grows)  # the count's direction first
    fits = [_line(knobs, counts, p) for p in exponents]
    power = _power(knobs, counts)
    if len(knobs) == 2:
        return CountLaw(knobs, counts, fits[0], (fits[0], power))
    misses = [_miss(knobs, counts, law) for law in fits]
    exact = [law for law, miss in zip(fits, misses) if miss <= EXACT]
    holding = exact or [law for law, miss in zip(fits, misses) if miss <= COUNT_TOLERANCE]
    if holding:
        return CountLaw(knobs, counts, holding[0], tuple(holding))
    best = fits[int(np.argmin(misses))]
    return CountLaw(knobs, counts, best, (best, power))


def _line(knobs: tuple[float, ...], counts: tuple[int, ...], p: float) -> tuple[float, float, float]:
    x = np.power(np.asarray(knobs), p)
    a, b = np.linalg.lstsq(np.stack([np.ones_like(x), x], axis=1), np.asarray(counts, np.float64), rcond=None)[0]
    return float(a), float(b), p


def _power(knobs: tuple[float, ...], counts: tuple[int, ...]) -> tuple[float, float, float]:
    """The power through the counts (least squares in log space): b·S^p."""
    lx, ly = np.log(np.asarray(knobs)), np.log(np.maximum(np.asarray(counts, np.float64), 1.0))
    p = float(np.polyfit(lx, ly, 1)[0])
    k = int(np.argmax(knobs))
    return 0.0, float(counts[k]) / knobs[k] ** p, p


def _miss(knobs: tuple[float, ...], counts: tuple[int, ...], law: tuple[float, float, float]) -> float:
    a, b, p = law
    return max(abs(a + b * k ** p - n) for k, n in zip(knobs, counts))
