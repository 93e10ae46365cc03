"""A device's trace entries read into columns, chunk by chunk, with what does not add up warned about or refused."""
from __future__ import annotations

from array import array
from itertools import repeat
from operator import itemgetter
from typing import Any, Callable

import numpy as np

from fragviz.model import (ACTIONS, NO_STACK, NO_STRING, NO_TIME, Trace)
from fragviz.snapshot.values import INT64_MAX, INT64_MIN, describe
from fragviz.snapshot.context import ParseContext

MAX_UNKNOWN_ACTIONS = 64


# Trace entries are read this many at a time: each chunk's columns are built with C-level maps, and with
# `consume` its entries are dropped from the plain data before the next, so that memory stays near what
# decoding alone took.
TRACE_CHUNK = 16384
_ACTION, _ADDR, _SIZE, _STREAM, _TIME = map(itemgetter, ("action", "addr", "size", "stream", "time_us"))


class _TraceColumns:
    """A device's columns, allocated once at the trace's length and filled chunk by chunk."""

    def __init__(self, n: int) -> None:
        self.action = np.empty(n, np.uint8)
        self.addr, self.size, self.stream, self.time_us = (np.empty(n, np.int64) for _ in range(4))
        self.stack, self.compile_context, self.user_metadata = (np.empty(n, np.int32) for _ in range(3))


class TraceReader:
    """One device's trace read in two passes: actions and sizes first (all a first picture needs: see
    fragviz.replay.preview), then every other field, chunk by chunk, dropping each chunk's entries with `consume`."""

    def __init__(self, device: int, entries: list, ctx: ParseContext) -> None:
        self.device, self.entries, self.ctx = device, entries, ctx
        self.cols = _TraceColumns(len(entries))
        self.names = list(ACTIONS)
        self.code_of = {a: i for i, a in enumerate(self.names)}

    def _chunks(self, fill: Callable[[int, list], None], consume: bool = False) -> None:
        entries, n = self.entries, len(self.entries)
        for lo in range(0, n, TRACE_CHUNK):
            hi = min(n, lo + TRACE_CHUNK)
            chunk = entries[lo:hi]
            try:
                fill(lo, chunk)
            except (KeyError, TypeError, AttributeError, ValueError, OverflowError):
                _find_bad_entry(self.device, chunk, lo, self.ctx)
                raise self.ctx.fail(f"device {self.device}'s trace has entries of the wrong shape")
            if consume:
                entries[lo:hi] = repeat(None, hi - lo)  # the entries go; the list keeps its length

    def read_totals(self) -> None:
        self._chunks(self._fill_totals)
        self._no_negative(self.cols.size, "size")

    def _no_negative(self, column: np.ndarray, key: str) -> None:
        if len(column) and column.min() < 0:
            i = int(np.argmax(column < 0))
            raise self.ctx.fail(f"device {self.device}'s trace entry {i} has a negative '{key}' ({int(column[i])})")

    def read_rest(self, consume: bool) -> Trace:
        self._chunks(self._fill_rest, consume)
        cols, ctx = self.cols, self.ctx
        trace = Trace(device=self.device, action=cols.action, addr=cols.addr, size=cols.size, stream=cols.stream,
                      time_us=cols.time_us, stack=cols.stack, compile_context=cols.compile_context,
                      user_metadata=cols.user_metadata, action_names=tuple(self.names))
        _note_trace_features(trace, ctx)
        self._no_negative(trace.addr, "addr")
        return trace

    def _fill_totals(self, lo: int, chunk: list) -> None:
        """Columns are filled by maps over the entries (no Python code per entry where fields are present);
        int64 columns go through array('q'), which takes Python ints in the int64 range and nothing else."""
        hi, cols, code_of = lo + len(chunk), self.cols, self.code_of
        actions = list(map(_ACTION, chunk))
        codes = list(map(code_of.get, actions))
        if None in codes:
            _add_unknown_actions(self.device, actions, lo, code_of, self.names, self.ctx)
            codes = list(map(code_of.__getitem__, actions))
        cols.action[lo:hi] = codes
        cols.size[lo:hi] = _int64(chunk, _SIZE, _SIZE)

    def _fill_rest(self, lo: int, chunk: list) -> None:
        hi, cols, ctx = lo + len(chunk), self.cols, self.ctx
        cols.addr[lo:hi] = _int64(chunk, _ADDR, lambda e: e["addr"] if "addr" in e else e.get("device_free", 0))
        cols.stream[lo:hi] = _int64(chunk, _STREAM, lambda e: e.get("stream", 0))
        cols.time_us[lo:hi] = _int64(chunk, _TIME, lambda e: e.get("time_us", NO_TIME))
        frames = list(map(dict.get, chunk, repeat("frames")))
        cols.stack[lo:hi] = ctx.interner.intern_many(frames, f"device {self.device}'s trace")
        for key, column in (("compile_context", cols.compile_context), ("user_metadata", cols.user_metadata)):
            column[lo:hi] = _optional_strings(chunk, key, ctx)


def _add_unknown_actions(device: int, actions: list, lo: int, code_of: dict, names: list, ctx: ParseContext) -> None:
    for i, a in enumerate(actions, lo):
        if a in code_of:
            continue
        if not isinstance(a, str):
            raise ctx.fail(f"device {device}'s trace entry {i} has an action that is {describe(a)}, not a string")
        if len(names) >= len(ACTIONS) + MAX_UNKNOWN_ACTIONS:
            raise ctx.fail(f"device {device}'s trace has more than {MAX_UNKNOWN_ACTIONS} actions fragviz does "
                           "not know: it is not a PyTorch trace")
        code_of[a] = len(names)
        names.append(ctx.values.text(a, f"device {device}'s trace entry {i} 'action'"))
        ctx.warn(f"device {device}'s trace has an action fragviz does not know: {describe(a)} (kept, not replayed)")


def _int64(chunk: list, field: Callable[[dict], Any], or_default: Callable[[dict], Any]) -> np.ndarray:
    """A field of every entry of `chunk` as int64, through array('q'); where some entry lacks it, its default."""
    try:
        values = array("q", map(field, chunk))
    except KeyError:
        values = array("q", [or_default(e) for e in chunk])
    return np.frombuffer(values, np.int64)


def _optional_strings(chunk: list, key: str, ctx: ParseContext) -> list[int] | int:
    values = list(map(dict.get, chunk, repeat(key)))
    if values.count(None) == len(values):
        return NO_STRING
    ctx.features.add(key)
    sid = ctx.string_id
    return [sid(v, key) for v in values]


def _note_trace_features(trace: Trace, ctx: ParseContext) -> None:
    if trace.has_time:
        ctx.features.add("time_us")
    if len(trace) and (trace.stack != NO_STACK).any():
        ctx.features.add("trace_frames")
    if any(a in ("segment_map", "segment_unmap") for a in trace.action_counts()):
        ctx.features.add("expandable_actions")


def _find_bad_entry(device: int, entries: list, lo: int, ctx: ParseContext) -> None:
    """Raise the error that names the first bad entry and field (the fast path only knows one is bad);
    `entries` are those from entry `lo` on."""
    for i, e in enumerate(entries, lo):
        where = f"device {device}'s trace entry {i}"
        if not isinstance(e, dict):
            raise ctx.fail(f"{where} is {describe(e)}, not a dict")
        if not isinstance(e.get("action"), str):
            raise ctx.fail(f"{where} has no action" if "action" not in e else
                           f"{where} has an action that is {describe(e['action'])}, not a string")
        if "size" not in e:
            raise ctx.fail(f"{where} has no 'size'")
        for key in ("addr", "size", "stream", "time_us", "device_free"):
            if key in e:
                ctx.values.integer(e[key], f"{where} '{key}'", INT64_MIN, INT64_MAX)
