"""Live memory over a range of states, by allocation and by group (kind or site), at a bounded level of detail.

A view of states lo..hi is cut into at most `columns` buckets of consecutive states. Each bucket is drawn
as one state: the one with the most live bytes in it, so that no peak disappears (the top of the stack is
the timeline's maximum of allocated bytes over the bucket). Zoomed in to `columns` states or fewer, every
state is its own bucket and the picture is exact.

Allocations are stacked in one order for the whole view: the longest-lived at the bottom (ties: the
earlier first), so that parameters and other long-lived memory form a steady floor and short-lived memory
churns above it. The largest allocations of every bucket are drawn as bands of their own; the others are
folded into one band per group, stacked above the bands.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fragviz.usage.lifetimes import Lifetimes

COLUMNS = 300  # buckets across a view: about one per two pixels of a dashboard-wide plot
PER_COLUMN = 160  # allocations drawn apart in each bucket, at most: the largest there
MAX_RUNS = 1500  # rectangles the bands may take in all; beyond it the smallest bands are folded
SMALLEST = 1 / 2000  # an allocation under this share of the view's peak is always folded (a sixth of a pixel)


@dataclass(frozen=True)
class Grid:
    """The buckets of a view: bucket j covers states edges[j] .. edges[j + 1] - 1 and is drawn as states[j]."""

    edges: np.ndarray
    states: np.ndarray
    live: np.ndarray  # live bytes in states[j]
    bucket: int  # states per bucket (1: exact)

    def __len__(self) -> int:
        return len(self.states)


def grid_of(lifetimes: Lifetimes, lo: int, hi: int, columns: int = COLUMNS, live: np.ndarray | None = None) -> Grid:
    """Buckets over states lo..hi (clipped to the trace's states), each drawn as its state of most live bytes.

    `live`, when given, is the live bytes of every state of the trace (`lifetimes.live_bytes(0, states - 1)`),
    kept by a caller that draws many views of one trace.
    """
    hi = min(max(hi, 0), lifetimes.states - 1)
    lo = min(max(lo, 0), hi)
    live = lifetimes.live_bytes(lo, hi) if live is None else live[lo:hi + 1]
    span = hi - lo + 1
    bucket = max(1, -(-span // columns))
    edges = np.append(np.arange(lo, hi + 1, bucket, dtype=np.int64), hi + 1)
    starts = edges[:-1] - lo
    peak_at = np.maximum.reduceat(live, starts)
    # the first state in each bucket holding that bucket's maximum
    is_peak = live == np.repeat(peak_at, np.diff(np.append(starts, span)))
    first_peak = np.minimum.reduceat(np.where(is_peak, np.arange(span), span), starts)
    return Grid(edges, first_peak.astype(np.int64) + lo, peak_at.astype(np.int64), bucket)


def columns_of(lifetimes: Lifetimes, grid: Grid) -> tuple[np.ndarray, np.ndarray]:
    """For every allocation, the buckets [a, b) whose drawn state it is live in (a == b: not drawn)."""
    a = np.searchsorted(grid.states, lifetimes.start, "left")
    b = np.searchsorted(grid.states, lifetimes.end, "left")
    return a, b


def by_group(lifetimes: Lifetimes, grid: Grid, group: np.ndarray, groups: int,
             rows: np.ndarray | None = None, cols: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Live bytes per group (rows) in each bucket's drawn state (columns); `group` gives each allocation's.

    With `rows`, only those allocations count; `cols` is `columns_of(lifetimes, grid)` when already known.
    """
    a, b = cols or columns_of(lifetimes, grid)
    size, g = lifetimes.size, group
    if rows is not None:
        a, b, size, g = a[rows], b[rows], size[rows], g[rows]
    m = len(grid) + 1
    total = groups * m
    diff = (np.bincount(g * m + a, weights=size, minlength=total)
            - np.bincount(g * m + b, weights=size, minlength=total))
    return np.rint(np.cumsum(diff.reshape(groups, m), axis=1)[:, :-1]).astype(np.int64)


@dataclass(frozen=True)
class Bands:
    """Allocations drawn apart, as rectangles of constant offset, and the rest folded by group."""

    grid: Grid
    rows: np.ndarray  # allocation indices of the bands, bottom first
    run_band: np.ndarray  # per rectangle: index into rows
    run_first: np.ndarray  # first bucket
    run_last: np.ndarray  # bucket after the last
    run_base: np.ndarray  # bytes below it
    folded: np.ndarray  # groups x buckets: live bytes of the folded allocations per group
    folded_base: np.ndarray  # groups x buckets: bytes below each folded group's band
    folded_count: int  # allocations folded (live in at least one drawn state)


def bands_of(lifetimes: Lifetimes, grid: Grid, group: np.ndarray, groups: int, per_column: int = PER_COLUMN,
             max_runs: int = MAX_RUNS, cols: tuple[np.ndarray, np.ndarray] | None = None) -> Bands:
    """Which allocations are drawn apart in this view, where, and what is folded into each group's band."""
    a, b = cols or columns_of(lifetimes, grid)
    drawn = b > a
    peak = int(grid.live.max()) if len(grid) else 0
    candidates = np.nonzero(drawn & (lifetimes.size >= peak * SMALLEST))[0]
    chosen = _largest_per_column(lifetimes, candidates, a, b, per_column)
    order = np.lexsort((lifetimes.start[chosen], -(lifetimes.end[chosen] - lifetimes.start[chosen])))
    rows = chosen[order]
    runs = _runs(lifetimes.size[rows], a[rows], b[rows], len(grid))
    if len(runs[0]) > max_runs:
        # Keep the largest bands whose rectangles fit; folding a band never adds rectangles to the others
        # (a band's base changes only where a band below it starts or ends).
        per_band = np.bincount(runs[0], minlength=len(rows))
        largest_first = np.argsort(-lifetimes.size[rows], kind="stable")
        fits = largest_first[np.cumsum(per_band[largest_first]) <= max_runs]
        rows = rows[np.sort(fits)]  # in stacking order still
        runs = _runs(lifetimes.size[rows], a[rows], b[rows], len(grid))
    folded_mask = drawn.copy()
    folded_mask[rows] = False
    folded_rows = np.nonzero(folded_mask)[0]
    folded = by_group(lifetimes, grid, group, groups, folded_rows, (a, b))
    below = _stack_height(lifetimes.size[rows], a[rows], b[rows], len(grid))
    folded_base = below + np.vstack([np.zeros((1, len(grid)), np.int64), np.cumsum(folded, axis=0)[:-1]])
    return Bands(grid, rows, *runs, folded, folded_base, len(folded_rows))


def _largest_per_column(lifetimes: Lifetimes, rows: np.ndarray, a: np.ndarray, b: np.ndarray,
                        per_column: int) -> np.ndarray:
    """The allocations among `rows` that are among the `per_column` largest live in some drawn state."""
    if len(rows) == 0:
        return rows
    first, count = a[rows], b[rows] - a[rows]
    owner = np.repeat(np.arange(len(rows)), count)
    offsets = np.arange(len(owner)) - np.repeat(np.cumsum(count) - count, count)
    column = np.repeat(first, count) + offsets
    size = lifetimes.size[rows][owner]
    order = np.lexsort((-size, column))
    sorted_column = column[order]
    starts = np.searchsorted(sorted_column, sorted_column, "left")
    rank = np.arange(len(order)) - starts
    return np.unique(rows[owner[order[rank < per_column]]])


def _live_matrix(a: np.ndarray, b: np.ndarray, m: int) -> np.ndarray:
    j = np.arange(m)
    return (j[None, :] >= a[:, None]) & (j[None, :] < b[:, None])


def _stack_height(size: np.ndarray, a: np.ndarray, b: np.ndarray, m: int) -> np.ndarray:
    if len(size) == 0:
        return np.zeros(m, np.int64)
    return (size[:, None] * _live_matrix(a, b, m)).sum(axis=0)


def _runs(size: np.ndarray, a: np.ndarray, b: np.ndarray, m: int):
    """Rectangles: each band's buckets cut where its offset (the bytes of the bands below it) changes."""
    if len(size) == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty
    live = _live_matrix(a, b, m)
    heights = size[:, None] * live
    base = np.cumsum(heights, axis=0) - heights
    # a rectangle starts where the band becomes live or its base changes from the bucket before
    change = np.ones_like(live)
    change[:, 1:] = (base[:, 1:] != base[:, :-1]) | ~live[:, :-1]
    starts = live & change
    band, first = np.nonzero(starts)
    # each rectangle runs to the next start of the same band or the end of the band's life
    nxt = np.append(first[1:], m)
    same = np.append(band[1:] == band[:-1], False)
    last = np.where(same, np.minimum(nxt, b[band]), b[band])
    return band, first, last, base[band, first]
