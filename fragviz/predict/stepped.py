"""A program whose number of steps follows the knob (a KV cache grown by one token each step, an epoch of
N / batch steps) predicted as a loop: the template's prefix and suffix matched and fitted as any program's are,
its repeated step (fragviz.predict.steps) written out as many times as the count's law says at the target, each
step's sizes by the laws of its first size, its growth per step, and its first and last step's own.

`StepPlan` offers what a `Plan` does (sizes, bounds and ops at a target, `laws` per template allocation for the
reports), so runs, ranges and `--fit` take it as they take a plan. The number of allocations at a target differs
from the template's: `sizes_at`, `bounds_at` and `ops_at` agree on it (`ops_at` reads the count of steps off the
length of the sizes it is given: the low and high ends of the range carry their own counts).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterator, Sequence

import numpy as np

from fragviz.predict.forecast import Plan, match_to_template, unmatched_of
from fragviz.predict.laws import TOLERANCE, Laws, fit_laws
from fragviz.predict.runs import as_number
from fragviz.predict.steps import CountLaw, Loop, StepSizes, find_loop, fit_count, step_sizes
from fragviz.predict.workload import PredictionRefused, RecordedWorkload
from fragviz.simulate.freerun import Op

MAX_ALLOCATIONS = 20_000_000  # a predicted program of more allocations is refused (the free-run's time)


@dataclass(frozen=True)
class StepLaws(Laws):
    """The report's laws of a stepped plan: per template allocation, a body's the law of its position's bytes over
    the run; `doubt` marks the rows whose count of steps or step sizes the recordings leave open."""

    doubt: np.ndarray | None = None

    @property
    def ambiguous(self) -> np.ndarray:
        wide = Laws.ambiguous.fget(self)  # type: ignore[attr-defined]
        return wide if self.doubt is None else wide | self.doubt


@dataclass
class StepPlan(Plan):
    """Recordings of a loop whose count follows the knob, matched and fitted (see the module's docstring)."""

    loop: Loop  # the template's
    outside_rows: np.ndarray  # bool, per row of `laws`: the template's matched allocations outside the loop
    outside_found: np.ndarray  # bool, per template allocation outside the loop: matched in every recording
    body: Laws  # 4 × period rows: first step, a, b (growth per step), last step
    follows_line: tuple[np.ndarray, np.ndarray]  # per position: its first, its last step on the line a + b·i
    count: CountLaw
    refs: np.ndarray  # per template op: the allocation it allocates or frees (-1: none)
    site: str  # the body's site of most bytes

    def site_of(self, key: Any) -> str:
        """A written step's allocation ("step", step, position) has the site of its position in the loop."""
        if isinstance(key, tuple) and len(key) == 3 and key[0] == "step":
            return self.base.sites[self.loop.start + key[2]]
        return Plan.site_of(self, key)

    def sizes_at(self, target: float) -> np.ndarray:
        return self._sizes(target, self.count.at(target), self.body.raw_at(target), self.laws.at(target))

    def bounds_at(self, target: float) -> tuple[np.ndarray, np.ndarray]:
        (low_n, high_n), (low, high) = self.count.bounds_at(target), self.body.raw_bounds_at(target)
        low_out, high_out = self.laws.bounds_at(target)
        return self._sizes(target, low_n, low, low_out), self._sizes(target, high_n, high, high_out)

    def _sizes(self, target: float, steps: int, body: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Prefix, `steps` bodies and suffix: outside sizes from `rows` (the laws' rows), body from `body`."""
        if steps * self.loop.period > MAX_ALLOCATIONS:
            raise PredictionRefused(f"at {as_number(target)} the program would make {steps} steps of "
                                    f"{self.loop.period} allocations: more than fragviz simulates")
        outside = self.base.sizes[self._outside_mask()].copy()
        outside[self.outside_found] = rows[self.outside_rows]
        grid = _grid(body.reshape(4, -1), steps, self.follows_line)
        head = self.loop.start
        return np.concatenate([outside[:head], grid.ravel(), outside[head:]])

    def _outside_mask(self) -> np.ndarray:
        mask = np.ones(len(self.base.sizes), bool)
        mask[self.loop.start:self.loop.end] = False
        return mask

    def ops_at(self, target: float, sizes: np.ndarray | None = None) -> Iterator[Op]:
        sizes = self.sizes_at(target) if sizes is None else sizes
        outside = len(self.base.sizes) - self.loop.period * self.loop.count
        return loop_ops(self.base, self.loop, self.refs, (len(sizes) - outside) // self.loop.period,
                        sizes.tolist())

    def notes(self, target: float) -> list[str]:
        """What a person must know: the count of steps was extrapolated, by which law."""
        seen = ", ".join(f"{n} at {as_number(k)}" for n, k in zip(self.count.counts, self.knobs))
        low, high = self.count.bounds_at(target)
        spread = f" (from {low} to {high} under the laws the recordings allow)" if low != high else ""
        return [f"the number of steps at {self.site} follows the knob: {seen}, predicted {self.count.at(target)} "
                f"at {as_number(target)}{spread}; each step of {self.loop.period} allocations written from the "
                "recorded one, its sizes by the laws of its first step and its growth per step"]


def _grid(body: np.ndarray, steps: int, follows_line: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Every step's sizes (steps × period, at least 1 byte): the line a + b·i, the first and the last step their
    own where they are not on it."""
    first, a, b, last = body
    i = np.arange(steps, dtype=np.float64)[:, None]
    grid = a + b * i
    grid[0] = np.where(follows_line[0], grid[0], first)
    if steps > 1:
        grid[-1] = np.where(follows_line[1], grid[-1], last)
    return np.clip(np.rint(np.nan_to_num(grid, nan=1.0)), 1, 1 << 62).astype(np.int64)


def loop_ops(base: RecordedWorkload, loop: Loop, refs: np.ndarray, steps: int, sizes: list[int]) -> Iterator[Op]:
    """The template's ops with its loop written `steps` times: its first steps as recorded, then its middle step
    repeated, then its last steps. A free in step g of an allocation made d steps earlier frees the allocation
    written d steps earlier; a free after the loop, the one written for that recorded step (skipped where that
    step is not written)."""
    span = _Spans(base, loop)
    keep = _Keep(loop.count, steps)
    k = 0
    for op in base.ops[:span.op_of(loop.start)]:
        if op.kind == "alloc":
            op, k = replace(op, size=sizes[k]), k + 1
        yield op
    for g in range(steps):
        src = keep.source(g)
        for index in span.step(src):
            op, ref = base.ops[index], int(refs[index])
            if op.kind == "alloc":
                yield replace(op, key=("step", g, ref - loop.start - src * loop.period), size=sizes[k])
                k += 1
            elif op.kind in ("free", "complete") and loop.start <= ref < loop.end:
                t, j = divmod(ref - loop.start, loop.period)
                if g - (src - t) >= 0:
                    yield replace(op, key=("step", g - (src - t), j))
            else:
                yield op
    for index in range(span.op_of(loop.end), len(base.ops)):
        op, ref = base.ops[index], int(refs[index])
        if op.kind == "alloc":
            op, k = replace(op, size=sizes[k]), k + 1
        elif op.kind in ("free", "complete") and loop.start <= ref < loop.end:
            t, j = divmod(ref - loop.start, loop.period)
            written = keep.written(t)
            if written is None:
                continue
            op = replace(op, key=("step", written, j))
        yield op


class _Spans:
    """The template's ops of each recorded step: from its first allocation to the next step's (the last step to
    the suffix's first allocation, or the end)."""

    def __init__(self, base: RecordedWorkload, loop: Loop) -> None:
        self.base, self.loop = base, loop

    def op_of(self, allocation: int) -> int:
        at = self.base.alloc_at
        return int(at[allocation]) if allocation < len(at) else len(self.base.ops)

    def step(self, t: int) -> range:
        first = self.loop.start + t * self.loop.period
        return range(self.op_of(first), self.op_of(first + self.loop.period))


class _Keep:
    """Which recorded step each written step copies: the first `head` as recorded, the middle one repeated, the
    last `tail` as recorded (fewer steps than recorded: the first and the last ones kept)."""

    def __init__(self, recorded: int, steps: int) -> None:
        middle = (recorded - 1) // 2
        self.recorded, self.steps, self.middle = recorded, steps, middle
        self.head = min(middle, steps - 1)
        self.tail = min(recorded - middle, steps - self.head)

    def source(self, g: int) -> int:
        if g < self.head:
            return g
        if g < self.steps - self.tail:
            return self.middle
        return g - self.steps + self.recorded

    def written(self, t: int) -> int | None:
        """The written step of recorded step `t` (None: not written)."""
        if t < self.head:
            return t
        if t >= self.recorded - self.tail:
            return t - self.recorded + self.steps
        return None


def op_refs(base: RecordedWorkload) -> np.ndarray:
    """Per op: the allocation (index) it allocates, frees or completes; -1 for other ops and unknown keys."""
    refs = np.full(len(base.ops), -1, np.int64)
    latest: dict = {}
    k = 0
    for index, op in enumerate(base.ops):
        if op.kind == "alloc":
            latest[op.key] = refs[index] = k
            k += 1
        elif op.kind in ("free", "complete"):
            refs[index] = latest.get(op.key, -1)
    return refs


def loops_of(workloads: Sequence[RecordedWorkload], template: int) -> list[Loop] | None:
    """Each recording's loop, where every one has the template's body and the counts differ (else None)."""
    loops = [find_loop(w.symbols) for w in workloads]
    mine = loops[template]
    if mine is None or any(loop is None for loop in loops):
        return None
    body = workloads[template].symbols[mine.start:mine.start + mine.period]
    for w, loop in zip(workloads, loops):
        if loop.period != mine.period or w.symbols[loop.start:loop.start + loop.period] != body:
            return None
    return loops if len({loop.count for loop in loops}) > 1 else None  # type: ignore[return-value]


def outside(w: RecordedWorkload, loop: Loop) -> np.ndarray:
    """The indices of the recording's allocations outside its loop."""
    return np.r_[0:loop.start, loop.end:len(w.sizes)].astype(np.int64)


def body_rows(workloads: Sequence[RecordedWorkload], loops: Sequence[Loop]) -> tuple[np.ndarray, list[StepSizes]]:
    """Per recording (columns) the body's first step, a, b and last step (4 × period rows)."""
    steps = [step_sizes(w.sizes, loop) for w, loop in zip(workloads, loops)]
    return np.stack([np.concatenate([s.first, s.a, s.b, s.last]) for s in steps], axis=1), steps


def on_line(steps: Sequence[StepSizes], loops: Sequence[Loop]) -> tuple[np.ndarray, np.ndarray]:
    """Per position: whether its first step, and its last, lie on the line a + b·i in every recording."""
    def near(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.abs(x - y) <= TOLERANCE * np.maximum(np.abs(x), 1.0)
    first = np.logical_and.reduce([near(s.first, s.a) for s in steps])
    last = np.logical_and.reduce([near(s.last, s.a + s.b * (loop.count - 1)) for s, loop in zip(steps, loops)])
    return first, last


def stepped_plan(workloads: Sequence[RecordedWorkload], knobs: tuple[float, ...], template: int,
                 max_unmatched: float) -> StepPlan | None:
    """The recordings as a loop whose count follows the knob; None where they are not one (no common body, the
    same count in each) or where more than `max_unmatched` of the bytes outside the loop do not match."""
    loops = loops_of(workloads, template)
    if loops is None:
        return None
    base, mine = workloads[template], loops[template]
    theirs = [outside(w, loop) for w, loop in zip(workloads, loops)]
    columns, found, lost = match_to_template(workloads, theirs, template)
    total = sum(int(w.sizes.sum()) for w in workloads) or 1
    unmatched = unmatched_of(workloads, knobs, lost, total)
    if unmatched.share > max_unmatched:
        return None
    rows, steps = body_rows(workloads, loops)
    body = fit_laws(knobs, rows)
    count = fit_count(knobs, [loop.count for loop in loops])
    laws, matched, rows_outside = _report_laws(workloads, loops, template, knobs, columns[found],
                                               theirs[template][found], body, count)
    grid = base.sizes[mine.start:mine.end].reshape(mine.count, mine.period).sum(axis=0)
    site = base.sites[mine.start + int(np.argmax(grid))]
    return StepPlan(tuple(workloads), knobs, template, matched, laws, unmatched, mine, rows_outside, found,
                    body, on_line(steps, loops), count, op_refs(base), site)


def _report_laws(workloads: Sequence[RecordedWorkload], loops: Sequence[Loop], template: int,
                 knobs: tuple[float, ...], outside_sizes: np.ndarray, outside_index: np.ndarray, body: Laws,
                 count: CountLaw) -> tuple[StepLaws, np.ndarray, np.ndarray]:
    """The laws per matched template allocation, in the template's order, which template allocations they are,
    and which rows lie outside the loop. A body allocation's row holds its
    position's bytes over each recording's run, shared out among the template's steps: a site's rows add up to
    its recorded bytes, and its law is that of its bytes over the run."""
    base, mine = workloads[template], loops[template]
    totals = np.stack([w.sizes[loop.start:loop.end].reshape(loop.count, loop.period).sum(axis=0)
                       for w, loop in zip(workloads, loops)], axis=1).astype(np.float64) / mine.count
    rows = np.concatenate([outside_sizes.astype(np.float64), np.tile(totals, (mine.count, 1))])
    order = np.concatenate([outside_index, np.arange(mine.start, mine.end)])
    sort = np.argsort(order, kind="stable")
    rows, order = rows[sort], order[sort]
    laws = fit_laws(knobs, rows)  # no sites: a body's bytes over the run are no draw of the data
    wide = body.ambiguous.reshape(4, mine.period).any(axis=0) | count.ambiguous
    doubt = np.concatenate([np.zeros(len(outside_sizes), bool), np.tile(wide, mine.count)])[sort]
    matched = np.zeros(len(base.sizes), bool)
    matched[order] = True
    laws = StepLaws(laws.knobs, laws.sizes, laws.law, laws.exponent, laws.plausible, laws.fits, laws.spread, doubt)
    return laws, matched, (order < mine.start) | (order >= mine.end)
