"""Length families for `--bucket`: which allocations' sizes follow a varying sequence length, and what padding
that length to K buckets makes of them.

A program whose batches vary in length L allocates, step after step, tensors of c·L bytes (a projection's output:
c is batch·width·element size, its per-token unit) and of c·L² (attention scores). The lengths are read from the
sizes: per stack, the greatest common divisor of the sizes it requested is its unit and size / unit the lengths it
saw (their roots where those are all squares: an L² stack); of the sets the stacks give, the run's lengths are the
one that finds the most families, then explains the most allocations, then the smallest.
Then every size that is c·L or c·L² for one of those lengths, for a unit c that at least half the lengths (and
three) share, belongs to that family. Padding pads the length, not the bytes: L goes up to the top of its bucket and a
family's size with it (c·top, c·top²), so the sizes a program really bucketed would make. The K bucket lengths are
evenly spaced in length over the lengths seen, up to the longest: the program's own bucket lengths are not in the
recording, evenly spaced lengths are what padding to multiples of a step gives, and topping out at the longest
seen leaves the recorded peak step's lengths as they were (quantiles would follow a few recorded steps' draw).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fragviz.base.units import format_bytes

MAX_SWITCHES = 0.1  # a share of the family's allocations in order whose length differs from the one before
MIN_LENGTHS = 3  # two sizes that share a divisor are no evidence of a length that varies
MIN_FAMILIES = 2  # one length set seen at two units at least (layers of two widths at one varying length)
MAX_SETS = 64  # the stacks (most allocations first) whose sizes are tried as the run's lengths
MAX_LENGTHS = 512  # a stack of more distinct sizes suggests no length set (lengths are tried one by one)


@dataclass(frozen=True)
class Family:
    """Sizes unit·L**power for the lengths L the run saw (`lengths`: those this family requested)."""

    unit: int
    power: int
    lengths: tuple[int, ...]

    @property
    def label(self) -> str:
        return f"{self.unit:,} B·L" + ("²" if self.power == 2 else "")


@dataclass(frozen=True)
class LengthBuckets:
    """The run's lengths, the K bucket lengths they are padded to, the families found, and each family size's
    padded size (`padded`)."""

    lengths: tuple[int, ...]
    tops: tuple[int, ...]
    families: tuple[Family, ...]
    padded: dict[int, int]

    def padded_sizes(self, sizes: np.ndarray) -> np.ndarray:
        """Each size padded as its family's length is (a size in no family as it is)."""
        return np.array([self.padded.get(int(s), int(s)) for s in sizes], dtype=np.int64)


def length_buckets(stacks: np.ndarray, sizes: np.ndarray, target: np.ndarray, steps: int) -> LengthBuckets:
    """The length families among the target's allocations (a mask over these stacks and sizes: the run's lengths
    may show at any of its stacks) and their sizes padded to `steps` bucket lengths; none where no length set
    explains two sizes of the target."""
    distinct, counts = np.unique(sizes[target], return_counts=True)
    count = dict(zip(distinct.tolist(), counts.tolist()))
    best: tuple[tuple[int, int, int], tuple[int, ...], list] = ((0, 0, 0), (), [])
    for lengths in sorted(candidate_lengths(stacks, sizes)):
        families = find_families(distinct, lengths)
        score = (len(families), sum(count[s] for _, members in families for s in members), -len(lengths))
        if len(families) >= MIN_FAMILIES and score > best[0] and steady(sizes, families):
            best = (score, lengths, families)
    _, lengths, families = best
    if not families:
        return LengthBuckets((), (), (), {})
    tops = bucket_tops(lengths, steps)
    padded = {size: family.unit * tops[int(np.searchsorted(tops, length))] ** family.power
              for family, members in families for size, length in members.items()}
    return LengthBuckets(lengths, tops, tuple(f for f, _ in families), padded)


def steady(sizes: np.ndarray, families: list[tuple[Family, dict[int, int]]]) -> bool:
    """Whether the lengths the families read off the run's allocations (in order) hold for stretches, as a length
    that varies by step does (every tensor of a step has the step's length), rather than change from one allocation
    to the next, as the widths of a model's layers do (a line shared by layers of several widths, at one fixed
    length, reads as a length that varies): at most MAX_SWITCHES of the family's allocations change length, or
    at most two stretches per length (a short run)."""
    length_of = {size: length for _, members in families for size, length in members.items()}
    read = np.array([length_of.get(int(x), 0) for x in sizes.tolist()], dtype=np.int64)
    read = read[read > 0]
    if len(read) < 2:
        return False
    switches = int((read[1:] != read[:-1]).sum())
    return switches <= MAX_SWITCHES * len(read) or switches <= 2 * len(np.unique(read))


def candidate_lengths(stacks: np.ndarray, sizes: np.ndarray) -> set[tuple[int, ...]]:
    """The length sets the stacks suggest: per stack of MIN_LENGTHS sizes or more, its sizes over their greatest common
    divisor (and their roots where all are squares: an L² stack). A stack that makes several families (a line
    whose op makes c·L and c·L² tensors) suggests a mixed set, which explains its own sizes as one family, where
    the run's own lengths find each: `length_buckets` keeps the set that finds the most families, then explains
    the most allocations, then the smallest. Bounded on any trace: sets of at most MAX_LENGTHS lengths, from the
    MAX_SETS stacks that made the most allocations."""
    order = np.argsort(stacks, kind="stable")
    ordered, by_size = stacks[order], sizes[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    counts = np.diff(np.r_[starts, len(ordered)])
    out: set[tuple[int, ...]] = set()
    for g in np.argsort(-counts, kind="stable")[:MAX_SETS].tolist():
        distinct = np.unique(by_size[starts[g]:starts[g] + counts[g]])
        if not MIN_LENGTHS <= len(distinct) <= MAX_LENGTHS:
            continue
        ratios = distinct // np.gcd.reduce(distinct)
        out.add(tuple(int(r) for r in ratios))
        roots = np.array([math.isqrt(int(r)) for r in ratios], dtype=np.int64)
        if (roots * roots == ratios).all():
            out.add(tuple(int(r) for r in roots))
    return out


def bucket_tops(lengths: tuple[int, ...], steps: int) -> tuple[int, ...]:
    """`steps` lengths evenly spaced over [shortest, longest], each rounded up: the buckets' tops."""
    lo, hi = lengths[0], lengths[-1]
    return tuple(sorted({lo + -(-(hi - lo) * j // steps) for j in range(1, steps + 1)}))


def find_families(sizes: np.ndarray, lengths: tuple[int, ...]) -> list[tuple[Family, dict[int, int]]]:
    """The families among these distinct sizes, each with its sizes' lengths: a unit c (and power) whose c·L**p
    is among the sizes for at least half the lengths and MIN_LENGTHS (two sizes that share a divisor are no
    family). A size two families could hold goes to the one
    that holds more lengths (linear first)."""
    seen = np.array(lengths, dtype=np.int64)
    hits: dict[tuple[int, int], dict[int, int]] = {}
    for size in sizes.tolist():
        for power in (1, 2):
            for length in seen[size % seen ** power == 0].tolist():
                hits.setdefault((power, size // length ** power), {})[size] = length
    need = max(MIN_LENGTHS, -(-len(lengths) // 2))
    found = sorted(((k, v) for k, v in hits.items() if len(v) >= need), key=lambda kv: (-len(kv[1]), kv[0]))
    taken: set[int] = set()
    out = []
    for (power, unit), members in found:
        mine = {s: n for s, n in members.items() if s not in taken}
        if len(mine) >= need:
            taken.update(mine)
            out.append((Family(unit, power, tuple(sorted(mine.values()))), mine))
    return out


def bucket_notes(label: str, buckets: LengthBuckets, target: np.ndarray, bucketed: np.ndarray, kinds: np.ndarray,
                 sizes: np.ndarray) -> list[str]:
    """What a bucket padded (the lengths, their bucket lengths, the families, the allocations resized and of
    which kinds beyond the target) and what of its target it left as recorded (sizes in no family)."""
    if not buckets.families:
        return [f"{label} found no length family among its target's allocations (no sizes c·L or c·L² for a set of "
                "lengths a stack requested): nothing is padded"]
    after = buckets.padded_sizes(sizes[bucketed])
    derived = bucketed & ~target
    by_kind = ", ".join(f"{k} {int((derived & (kinds == k)).sum())}" for k in np.unique(kinds[derived]))
    lengths = buckets.lengths
    out = [f"{label} pads lengths, not bytes: {len(lengths)} lengths seen, {lengths[0]} to {lengths[-1]}, each "
           f"padded up to the next of the bucket lengths {', '.join(map(str, buckets.tops))} (evenly spaced over "
           f"the lengths seen); {len(buckets.families)} length families "
           f"({', '.join(f.label for f in buckets.families)}); {int(bucketed.sum())} allocations resized, "
           f"{format_bytes(int(sizes[bucketed].sum()))} → {format_bytes(int(after.sum()))}"
           + (f", {int(derived.sum())} of them of other kinds, of the same families ({by_kind}: the backward "
              "pass's derivatives, the input batch)" if derived.any() else "")]
    left = target & ~bucketed
    if left.any():
        out.append(f"{label} left as recorded {int(left.sum())} of its target's allocations "
                   f"({format_bytes(int(sizes[left].sum()))}) whose size is in no length family (constants, "
                   "statistics, parameters and optimizer state)")
    return out

