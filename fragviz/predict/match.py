"""Two recordings of one program matched allocation to allocation.

The same program makes the same allocations from the same sites in the same order at any size; what differs is
where the allocator (or a library picking a kernel by size) made an allocation in one run and not in the other.
So the match walks both sequences of sites together, and where they part, skips to the nearest point where they
agree again for CONFIRM allocations in a row (looked for up to REACH allocations ahead). What it skips on either
side is unmatched, and reported. The search is bounded on any input: sequences that never agree again cost
at most WORK_PER_ALLOCATION places tried per allocation (MAX_WORK in all), then the rest is unmatched.
"""
from __future__ import annotations

from bisect import bisect_left
from typing import Hashable, Sequence

import numpy as np

CONFIRM = 4  # allocations in a row that must agree for the sequences to be taken as back in step
REACH = 4096  # how far ahead a point where they agree again is looked for
LOOKAHEAD = 256  # how many of the next allocations on each side are tried as that point
TRIES = 64  # how many places of one allocation's site on the other side are tried
WORK_PER_ALLOCATION = 32  # places tried per allocation of both sequences, at most, before the match stops ...
MAX_WORK = 2_000_000  # ... and in all (about 2 s)


def align(a: Sequence[Hashable], b: Sequence[Hashable], give_up_after: int | None = None) -> np.ndarray:
    """Pairs (i, j) of matched allocations, i into `a` and j into `b`, in order, as an (n, 2) array.

    Stops once more than `give_up_after` allocations went unmatched (what is left then is unmatched too): two
    recordings that differ that much are not one program, and the search would only cost time."""
    ids: dict[Hashable, int] = {}
    x = [ids.setdefault(s, len(ids)) for s in a]
    y = [ids.setdefault(s, len(ids)) for s in b]
    where_x, where_y = _positions(x), _positions(y)
    pairs: list[tuple[int, int]] = []
    i = j = skipped = 0
    budget = [min(MAX_WORK, WORK_PER_ALLOCATION * (len(x) + len(y)))]  # places tried in all: bounded on any input
    while i < len(x) and j < len(y) and budget[0] > 0:
        if x[i] == y[j]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
            continue
        ni, nj = _back_in_step(x, y, i, j, where_x, where_y, budget)
        skipped += (ni - i) + (nj - j)
        i, j = ni, nj
        if give_up_after is not None and skipped > give_up_after:
            break
    return np.asarray(pairs, np.int64).reshape(-1, 2)


def _positions(seq: list[int]) -> dict[int, list[int]]:
    where: dict[int, list[int]] = {}
    for k, s in enumerate(seq):
        where.setdefault(s, []).append(k)
    return where


def _back_in_step(x: list[int], y: list[int], i: int, j: int, where_x: dict[int, list[int]],
                  where_y: dict[int, list[int]], budget: list[int]) -> tuple[int, int]:
    """The nearest (fewest allocations skipped on both sides) point past (i, j) where the sequences agree for
    CONFIRM allocations; failing that, the window looked in skipped on both sides (nothing in it agrees). Each
    place tried is taken from `budget`."""
    best: tuple[int, int, int] | None = None
    for k in range(min(LOOKAHEAD, max(len(x) - i, len(y) - j))):
        if best is not None and k >= best[0]:
            break
        # the allocation k ahead on one side, found on the other side at or after where that side stands
        for ahead, seq, start, where, swap in ((i + k, x, j, where_y, False), (j + k, y, i, where_x, True)):
            if ahead >= len(seq):
                continue
            hits = where.get(seq[ahead], ())
            h = bisect_left(hits, start)
            for at in hits[h:h + TRIES]:
                cost = k + (at - start)
                if at - start > REACH or (best is not None and cost >= best[0]):
                    break
                pi, pj = (at, ahead) if swap else (ahead, at)
                budget[0] -= 1
                if _agree(x, y, pi, pj):
                    best = (cost, pi, pj)
                    break
    if best is None:
        return i + LOOKAHEAD // 2, j + LOOKAHEAD // 2
    return best[1], best[2]


def _agree(x: list[int], y: list[int], i: int, j: int) -> bool:
    n = min(CONFIRM, len(x) - i, len(y) - j)
    return n > 0 and x[i:i + n] == y[j:j + n]
