"""Code what-ifs: the recorded workload changed as a code change would change it, before it is free-run.

- `--scale TARGET=FACTOR`: every allocation of TARGET is FACTOR times its recorded size (a wider layer, a longer
  sequence, half-precision activations at 0.5); a site's scale widens the layer behind its activations too (its
  parameters, their gradients and optimizer state, tied by size: fragviz.simulate.layers).
- `--bucket TARGET:K`: the sequence lengths TARGET's sizes follow (c·L, c·L²: fragviz.simulate.lengths) are padded
  up to K bucket lengths, as padding variable lengths to K buckets would, and with them every allocation of those
  families (the backward pass's, the input batch; never parameters or optimizer state unless named): fewer
  distinct sizes, so freed blocks fit the next requests.
- `--paged-kv [TARGET=]SIZE`: every KV cache allocation (or TARGET's) becomes whole pages of SIZE bytes, each
  living as long as the allocation did, as vLLM serves its cache from fixed-size pages.

TARGET is a kind of memory (fragviz.usage.kinds: activations, kv_cache, ...) or a site: a frame of the
allocation's stack, named "file.py:LINE" or "file.py:function" (`frame_is`). Only allocations made during the trace change:
blocks live when it started are part of the start state. A change that touches no allocation is refused with the
reason, never simulated as if it had changed something.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from fragviz.base.errors import UsageError
from fragviz.base.units import format_bytes, parse_size
from fragviz.model import ALLOC, OOM, Frame, Trace
from fragviz.simulate.freerun import Op
from fragviz.simulate.lengths import LengthBuckets, bucket_notes, length_buckets
from fragviz.simulate.layers import LayerTie, construction_sites, site_notes, tie_layer
from fragviz.usage.kinds import KIND_LABELS, KINDS, StackKinds

SCALE, BUCKET, PAGED_KV = "scale", "bucket", "paged_kv"
KV_CACHE, ACTIVATIONS, GRADIENTS, PARAMETERS = "kv_cache", "activations", "gradients", "parameters"
MAX_FACTOR, MAX_STEPS = 1000.0, 1 << 20
_LAYER_KINDS = ("parameters", "parameters_inferred", "gradients", "optimizer_state")  # what a layer's width grows


@dataclass(frozen=True)
class CodeChange:
    """One change to the workload: `how` (scale, bucket, paged_kv), what it applies to (a kind or a site) and by
    how much (the factor, the number of steps, or the page's bytes)."""

    how: str
    target: str
    factor: float = 1.0
    steps: int = 0
    page_bytes: int = 0

    @property
    def is_kind(self) -> bool:
        return self.target in KINDS

    @property
    def target_text(self) -> str:
        return KIND_LABELS[self.target] if self.is_kind else f"site '{self.target}'"

    @property
    def label(self) -> str:
        if self.how == SCALE:
            return f"{self.target_text} ×{self.factor:g}"
        if self.how == BUCKET:
            return f"{self.target_text} in {self.steps} length buckets"
        return f"{self.target_text} in {format_bytes(self.page_bytes)} pages"

    @property
    def flag(self) -> str:
        """The command-line option that asks for it."""
        if self.how == SCALE:
            return f"--scale {self.target}={self.factor:g}"
        if self.how == BUCKET:
            return f"--bucket {self.target}:{self.steps}"
        target = "" if self.target == KV_CACHE else f"{self.target}="
        return f"--paged-kv {target}{self.page_bytes}B"


def parse_scale(text: str) -> CodeChange:
    """'activations=1.5' or 'model.py:forward=0.5'."""
    target, sep, factor = text.rpartition("=")
    if not sep or not target.strip():
        raise UsageError(f"--scale '{text[:80]}': write TARGET=FACTOR (a kind or a site, then a factor), "
                         "e.g. activations=1.5")
    try:
        value = float(factor)
    except ValueError:
        value = math.nan
    if not (0 < value <= MAX_FACTOR):
        raise UsageError(f"--scale '{text[:80]}': the factor must be a number above 0 and at most {MAX_FACTOR:g}")
    return CodeChange(SCALE, target.strip(), factor=value)


def parse_bucket(text: str) -> CodeChange:
    """'activations:8' or 'model.py:forward:8'."""
    target, sep, steps = text.rpartition(":")
    if not sep or not target.strip() or not steps.strip().isdecimal() or not 1 <= int(steps) <= MAX_STEPS:
        raise UsageError(f"--bucket '{text[:80]}': write TARGET:K (a kind or a site, then 1 to {MAX_STEPS} length "
                         "buckets), e.g. activations:8")
    return CodeChange(BUCKET, target.strip(), steps=int(steps))


def parse_paged_kv(text: str) -> CodeChange:
    """'2MiB': the KV cache served from pages of 2 MiB; 'cache.py:append=2MiB': the allocations of that site."""
    target, _, size = text.rpartition("=")
    page = parse_size(size)
    if page < 512:
        raise UsageError(f"--paged-kv '{text[:80]}': a page holds at least 512 bytes (the allocator's rounding)")
    return CodeChange(PAGED_KV, target.strip() or KV_CACHE, page_bytes=page)


def changes_label(changes: Sequence[CodeChange]) -> str:
    return ", ".join(c.label for c in changes)


class Reshaper:
    """The code changes applied to one device's workload (free_run's `reshape`), as they select its allocations.

    `_chosen[i]` holds the trace's stacks change i applies to; `refusal()` says why the changes cannot be simulated
    (one touches no allocation of the trace)."""

    def __init__(self, trace: Trace, frames_of: Callable[[int], Sequence[Frame]],
                 changes: Sequence[CodeChange]) -> None:
        self.changes = tuple(changes)
        allocs = trace.action == ALLOC
        self._stacks, self._sizes = trace.stack[allocs], trace.size[allocs]
        self._frames_of = frames_of
        kind_of = self._kind_of = StackKinds(frames_of)
        stacks = np.unique(np.concatenate([self._stacks, trace.stack[trace.action == OOM]])).tolist()
        self._chosen = [{s for s in stacks if _applies(c, s, kind_of, frames_of)} for c in self.changes]
        self._kinds = np.array([kind_of(int(s)) for s in self._stacks], dtype=object)
        self._ties = [self._layer_tie(i, trace) for i in range(len(self.changes))]
        self._sized = [self._tie_sizes(c, tie) for c, tie in zip(self.changes, self._ties)]
        self._param_sizes = frozenset(int(s) for s in self._sizes[self._kinds == PARAMETERS])
        self._allow = [self._allowed(i) if c.how == BUCKET else None for i, c in enumerate(self.changes)]
        self._buckets = [self._length_buckets(i) if c.how == BUCKET else None for i, c in enumerate(self.changes)]
        self._made: dict[str, list[int]] = {}  # by kind: allocations and bytes the changed workload made (__call__)

    def _layer_tie(self, i: int, trace: Trace) -> LayerTie | None:
        """The layer a site's scale widens (fragviz.simulate.layers), where the site made activations; None for a
        kind's scale, a bucket or pages."""
        change = self.changes[i]
        if change.how != SCALE or change.is_kind:
            return None
        mine = np.isin(self._stacks, list(self._chosen[i])) & (self._kinds == ACTIVATIONS)
        sites = construction_sites(self._stacks, self._sizes, self._kinds, self._frames_of)
        return tie_layer({int(s) for s in self._sizes[mine]}, sites, self._kinds, self._sizes)

    def _tie_sizes(self, change: CodeChange, tie: LayerTie | None) -> dict[str, frozenset[int]]:
        """The sizes, by kind, a change covers beyond its target's own allocations: for a site, its layer's
        (`_layer_tie`); for activations, the backward pass's derivatives of activations (fragviz counts them as
        gradients): a gradients allocation of a size the activations requested and no parameter did (a
        parameter's gradient has its parameter's size)."""
        if tie is not None:
            return tie.sizes
        if change.how != SCALE or change.target != ACTIVATIONS:
            return {}
        sizes = {int(s) for s in self._sizes[self._kinds == ACTIVATIONS]}
        return {GRADIENTS: frozenset(sizes - {int(s) for s in self._sizes[self._kinds == PARAMETERS]})}

    def _selected(self, i: int) -> np.ndarray:
        """Which of the trace's allocations change `i` applies to."""
        mask = np.isin(self._stacks, list(self._chosen[i]))
        if self.changes[i].how == BUCKET:
            return mask | self._bucketed(i)
        for kind, sizes in self._sized[i].items():
            mask |= (self._kinds == kind) & np.isin(self._sizes, list(sizes))
        return mask

    def _applies_to(self, i: int, op: Op) -> bool:
        if self.changes[i].how == BUCKET:
            return self._may_bucket(i, self._kind_of(op.stack), op.size)
        return op.stack in self._chosen[i] or (bool(self._sized[i]) and
                                               op.size in self._sized[i].get(self._kind_of(op.stack), ()))

    def touched(self, i: int) -> tuple[int, int]:
        """How many of the trace's allocations change `i` applies to, and their recorded bytes."""
        mask = self._selected(i)
        return int(mask.sum()), int(self._sizes[mask].sum())

    def after(self) -> tuple[np.ndarray, np.ndarray]:
        """Each of the trace's allocations once the changes apply: how many it becomes (a paged one: its pages)
        and their bytes, as the simulation makes them."""
        sizes, count = self._sizes.astype(np.int64), np.ones(len(self._sizes), np.int64)
        paged = np.zeros(len(sizes), bool)
        for i, change in enumerate(self.changes):
            mask = self._selected(i) & ~paged
            if change.how == SCALE:
                sizes[mask] = np.maximum(1, np.ceil(sizes[mask] * change.factor)).astype(np.int64)
            elif change.how == BUCKET:
                sizes[mask] = self._buckets[i].padded_sizes(sizes[mask])
            else:
                count[mask] = -(-sizes[mask] // change.page_bytes)
                sizes[mask], paged = count[mask] * change.page_bytes, paged | mask
        return count, sizes

    def by_kind(self) -> tuple[dict[str, object], ...]:
        """What the changes did to each kind of memory they touched: its allocations made during the trace and
        their bytes, before and after (fragviz.usage.kinds), as `fragviz simulate --json`'s `changed_kinds`."""
        touched = np.zeros(len(self._sizes), bool)
        for i in range(len(self.changes)):
            touched |= self._selected(i)
        count, sizes = self.after()
        out = []
        for kind in KINDS:
            mine = self._kinds == kind
            if (mine & touched).any():
                # as the simulation made them (a paged cache that grows takes over its pages), else as computed
                made = self._made.get(kind) or [int(count[mine].sum()), int(sizes[mine].sum())]
                out.append({"kind": kind, "allocations_before": int(mine.sum()),
                            "bytes_before": int(self._sizes[mine].sum()), "allocations_after": made[0],
                            "bytes_after": made[1]})
        return tuple(out)

    def effects(self) -> tuple[dict[str, object], ...]:
        """Each change and what it touched, as `fragviz simulate --json` gives them."""
        out = []
        for i, c in enumerate(self.changes):
            count, nbytes = self.touched(i)
            out.append({"change": c.how, "target": c.target, "factor": c.factor if c.how == SCALE else None,
                        "steps": c.steps or None, "page_bytes": c.page_bytes or None, "label": c.label,
                        "allocations": count, "recorded_bytes": nbytes})
        return tuple(out)

    def notes(self) -> tuple[str, ...]:
        """What each scale covered beyond its target, and what of the same program it left as recorded; what a
        bucket pads."""
        out = []
        for i, change in enumerate(self.changes):
            picked = self._selected(i)
            if change.how == BUCKET:
                target = np.isin(self._stacks, list(self._chosen[i]))
                out.extend(bucket_notes(change.label, self._buckets[i], target, self._bucketed(i), self._kinds,
                                        self._sizes_before(i)))
            if change.how == SCALE and change.target == ACTIVATIONS:
                out.extend(self._activation_notes(change, picked))
            elif change.how == SCALE and not change.is_kind:
                out.extend(site_notes(change.label, change.factor, self._ties[i], picked, self._kinds, self._sizes))
        return tuple(out)

    def _activation_notes(self, change: CodeChange, picked: np.ndarray) -> list[str]:
        out = []
        derived = picked & (self._kinds == GRADIENTS)
        if derived.any():
            out.append(f"{change.label} also scales the backward pass's derivatives of activations, which fragviz "
                       f"counts as gradients: {int(derived.sum())} gradients allocations of an activation's size "
                       f"and of no parameter's ({format_bytes(int(self._sizes[derived].sum()))})")
        sizes = np.isin(self._sizes, self._sizes[self._kinds == ACTIVATIONS]) & ~picked & (self._kinds != GRADIENTS)
        if sizes.any():
            kinds = ", ".join(f"{k} {int((sizes & (self._kinds == k)).sum())}" for k in KINDS
                              if (sizes & (self._kinds == k)).any())
            out.append(f"{change.label} left as recorded {int(sizes.sum())} allocations of other kinds with an "
                       f"activation's size ({kinds}; e.g. the input batch): if they grow with the change, the "
                       "simulated figures come out low")
        return out

    def refusal(self, device: int) -> str | None:
        for i, change in enumerate(self.changes):
            if not self.touched(i)[0]:
                how = (" (claim your cache's frames with a [kinds] kv_cache pattern in fragviz.toml, or name its "
                       "site: --paged-kv FILE.py:LINE=SIZE)" if change.target == KV_CACHE else "")
                return (f"{change.label}: device {device}'s trace holds no allocation of {change.target_text} by "
                        f"fragviz's kind rules and the recorded stacks, so there is nothing to change{how}")
        return None

    def _may_bucket(self, i: int, kind: str, size: int) -> bool:
        """Whether bucket i may resize an allocation of this kind and recorded size where its size is of a length
        family: not parameters or optimizer state (nor a parameter's gradient: a gradients allocation of a
        parameter's size), unless the bucket names that kind."""
        target = self.changes[i].target
        if kind in _LAYER_KINDS and kind != target:
            return kind == GRADIENTS and size not in self._param_sizes
        return True

    def _allowed(self, i: int) -> np.ndarray:
        """Which of the trace's allocations bucket i may resize (`_may_bucket`, the one rule, as the ops see it)."""
        return np.fromiter((self._may_bucket(i, kind, int(size)) for kind, size in zip(self._kinds, self._sizes)),
                           bool, len(self._sizes))

    def _length_buckets(self, i: int) -> LengthBuckets:
        """Change i's length families (fragviz.simulate.lengths) among its target's allocations that it may
        resize, the lengths read from every allocation it may resize, as the changes before it (a scale) left
        their sizes."""
        allowed = self._allow[i]
        mine = np.isin(self._stacks, list(self._chosen[i]))[allowed]
        return length_buckets(self._stacks[allowed], self._sizes_before(i)[allowed], mine, self.changes[i].steps)

    def _bucketed(self, i: int) -> np.ndarray:
        """The trace's allocations bucket i resizes: those it may, whose size is of one of its length families."""
        return self._allow[i] & np.isin(self._sizes_before(i), list(self._buckets[i].padded))

    def _sizes_before(self, i: int) -> np.ndarray:
        """The trace's allocations' sizes once the scales before change i have applied."""
        sizes = self._sizes.astype(np.int64)
        for j, before in enumerate(self.changes[:i]):
            if before.how == SCALE:
                mask = self._selected(j)
                sizes[mask] = np.maximum(1, np.ceil(sizes[mask] * before.factor)).astype(np.int64)
        return sizes

    def __call__(self, ops: Iterator[Op]) -> Iterator[Op]:
        """The workload changed (`_changed`), each allocation it makes counted by kind (`by_kind`)."""
        self._made = {}
        for op in self._changed(ops):
            if op.kind == "alloc":
                made = self._made.setdefault(self._kind_of(op.stack), [0, 0])
                made[0], made[1] = made[0] + 1, made[1] + op.size
            yield op

    def _changed(self, ops: Iterator[Op]) -> Iterator[Op]:
        """The workload changed. A paged allocation is held back until the next op that is not a free: where one
        of those frees a paged allocation of no more pages (a cache grown by torch.cat: the new tensor made, then
        the old one freed), the new one takes over the old one's pages and only its extra pages are allocated, as
        a paged cache appends pages; the pages model never holds both."""
        pages: dict[object, list] = {}  # a paged allocation's key: its pages' keys
        held: list[Op] = []  # the page allocations of the latest paged allocation, not yet made
        for op in ops:
            if op.kind == "free" and held and not op.pending and 0 < len(pages.get(op.key, ())) <= len(held):
                yield from _grow(op.key, held, pages)
                held = []
                continue
            if op.kind != "free":
                yield from held
                held = []
            if op.kind == "alloc":
                changed = self._allocs(op, pages)
                held = changed if op.key in pages else []
                yield from (() if held else changed)
            elif op.kind == "oom_request":  # the request the recording failed, changed as its site's others are
                yield Op(op.kind, op.event, size=self._failed_size(op), stream=op.stream, stack=op.stack)
            else:
                yield from _paged_free(op, pages)
        yield from held

    def _failed_size(self, op: Op) -> int:
        """A recorded OOM's request as the changes make it: scaled and bucketed, and paged as its whole pages'
        bytes in one request (the simulation retries it as one request, as recorded)."""
        changed = self._allocs(Op("alloc", op.event, None, op.size, op.stream, op.stack), {})
        return sum(o.size for o in changed)

    def _allocs(self, op: Op, pages: dict[object, int]) -> Iterable[Op]:
        size = op.size
        for i, (change, buckets) in enumerate(zip(self.changes, self._buckets)):
            if not self._applies_to(i, op):
                continue
            if change.how == SCALE:
                size = max(1, math.ceil(size * change.factor))
            elif change.how == BUCKET:
                size = buckets.padded.get(size, size)  # its family's length padded to its bucket
            elif change.how == PAGED_KV:
                n = -(-size // change.page_bytes)
                pages[op.key] = [(op.key, k) for k in range(n)]
                return [Op("alloc", op.event, (op.key, k), change.page_bytes, op.stream, op.stack) for k in range(n)]
        return [Op("alloc", op.event, op.key, size, op.stream, op.stack)]


def _grow(old: object, held: list[Op], pages: dict[object, list]) -> list[Op]:
    """The held paged allocation takes over `old`'s pages (being freed): only its pages beyond them are made."""
    kept = pages.pop(old)
    pages[held[0].key[0]] = kept + [o.key for o in held[len(kept):]]
    return held[len(kept):]


def _paged_free(op: Op, pages: dict[object, list]) -> Iterable[Op]:
    """A free (or a deferred free's completion) as the pages of a paged allocation see it."""
    keys = pages.get(op.key)
    if not keys:
        return (op,)
    if op.kind == "complete" or (op.kind == "free" and not op.pending):
        del pages[op.key]
    return [Op(op.kind, op.event, k, pending=op.pending) for k in keys]


def _applies(change: CodeChange, stack: int, kind_of: StackKinds, frames_of) -> bool:
    if change.is_kind:
        return kind_of(stack) == change.target
    return stack >= 0 and any(frame_is(change.target, f) for f in frames_of(stack))


def frame_is(target: str, frame: Frame) -> bool:
    """Whether a site target names the frame: "FILE:LINE" or "FILE:FUNCTION", where FILE is the frame's file or
    the end of its path ("gpt.py" names "workloads/gpt.py", not "mygpt.py"); a bare "FILE" names every frame of
    the file."""
    path, sep, rest = target.rpartition(":")
    if not sep or not path:
        path, rest = target, ""
    named = frame.filename == path or frame.filename.endswith("/" + path)
    if not named or not rest:
        return named
    return frame.line == int(rest) if rest.isdecimal() else frame.name == rest
