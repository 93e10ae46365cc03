"""The parser's fast paths: traces read in chunks (actions and sizes first, then the rest), entries dropped as
they are read, stacks interned by list identity and in bulk. Each is checked against the plain definition."""
from __future__ import annotations

import copy
import glob
import os
import pickle

import numpy as np
import pytest

import fragviz.snapshot.parse as parse
import fragviz.snapshot.traces as traces
from fragviz.base.errors import SnapshotFormatError
from fragviz.model import NO_STACK
from fragviz.snapshot import load_snapshot
from fragviz.snapshot.frames import StackInterner
from fragviz.snapshot.loader import RawSnapshot
from fragviz.allocator.synth import synthetic_snapshot
from tests.support.helpers import REAL, block, ev, frames, segment, snapshot


def raw_of(data, name="t.pickle") -> RawSnapshot:
    return RawSnapshot(name, data, "pickle", None, 4, "", 0)


def columns(snap) -> dict:
    return {d: {c: getattr(t, c) for c in ("action", "addr", "size", "stream", "time_us", "stack", "compile_context",
                                           "user_metadata")} for d, t in snap.traces.items()}


def same_snapshot(a, b) -> None:
    assert a.segments == b.segments and a.frames == b.frames and a.stacks == b.stacks and a.strings == b.strings
    assert a.warnings == b.warnings and a.format == b.format
    for d, cols in columns(a).items():
        for name, col in cols.items():
            assert np.array_equal(col, columns(b)[d][name]), (d, name)


def test_small_chunks_and_consume_give_the_parse_of_one_pass(monkeypatch):
    data = synthetic_snapshot(3000, seed=3)
    whole = parse.parse_snapshot(raw_of(copy.deepcopy(data)))
    monkeypatch.setattr(traces, "TRACE_CHUNK", 7)
    kept = copy.deepcopy(data)
    chunked = parse.parse_snapshot(raw_of(kept))
    same_snapshot(whole, chunked)
    assert kept["device_traces"][0][-1] is not None, "without consume the data is left as it was"
    consumed_data = copy.deepcopy(data)
    consumed = parse.parse_snapshot(raw_of(consumed_data), consume=True)
    same_snapshot(whole, consumed)
    assert set(consumed_data["device_traces"][0]) == {None}, "with consume every entry is dropped once read"


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REAL, "*.pickle"))), ids=os.path.basename)
def test_real_snapshots_parse_the_same_in_tiny_chunks(path, monkeypatch):
    whole = load_snapshot(path)
    monkeypatch.setattr(traces, "TRACE_CHUNK", 5)
    with open(path, "rb") as fh:
        data = pickle.load(fh)  # noqa: S301  the test's own real snapshot
    same_snapshot(whole, parse.parse_snapshot(raw_of(data, whole.source), consume=True))


def test_a_bad_entry_in_a_later_chunk_is_named_by_its_index(monkeypatch):
    trace = [ev("alloc", 0x1000 * (i + 1), 512) for i in range(20)]
    trace[13]["size"] = "big"
    monkeypatch.setattr(traces, "TRACE_CHUNK", 4)
    with pytest.raises(SnapshotFormatError, match="device 0's trace entry 13 'size'"):
        parse.parse_snapshot(raw_of(snapshot([], trace)))
    trace[13]["size"] = 512
    trace[17]["addr"] = -5
    with pytest.raises(SnapshotFormatError, match="entry 17 has a negative 'addr'"):
        parse.parse_snapshot(raw_of(snapshot([], trace)))


def test_early_totals_come_before_the_rest_with_each_device_s_actions_and_sizes():
    seg = segment(0x1000_0000, [block(0x1000_0000, 2 << 20)], device=1)
    trace1 = [ev("segment_alloc", 0x1000_0000, 2 << 20), ev("alloc", 0x1000_0000, 2 << 20)]
    heard = []

    def early(segments, cols):
        heard.append((segments, {d: (a.copy(), s.copy()) for d, (a, s) in cols.items()}))

    snap = parse.parse_snapshot(raw_of(snapshot([seg], [], trace1)), early=early)
    [(segments, cols)] = heard
    assert segments == snap.segments
    assert np.array_equal(cols[1][0], snap.traces[1].action) and np.array_equal(cols[1][1], [2 << 20, 2 << 20])
    assert len(cols[0][0]) == 0


def test_intern_many_agrees_with_intern_one_by_one():
    shared = frames("a", "b", "c", "d")
    other = frames("a", "x", "c", "d")  # same length, same ends' content, a different middle
    same_ends = [shared[0], frames("m")[0], shared[2], shared[3]]  # same ends by identity, another middle
    one_list = list(shared)  # one list object met several times (as a free request and its completion)
    column = [list(shared), None, [], one_list, list(other), one_list, same_ends, list(shared), list(same_ends),
              [dict(f) for f in shared]]  # equal by content, other objects (as JSON gives)
    bulk = StackInterner()
    ids = bulk.intern_many(column * 3, "t")
    single = StackInterner()
    expected = [single.intern(f, "t") for f in column * 3]
    assert ids == expected and bulk.stacks == single.stacks and bulk.frames == single.frames
    assert ids[1] == ids[2] == NO_STACK
    assert len({ids[0], ids[4], ids[6]}) == 3 and ids[0] == ids[3] == ids[7] == ids[9] and ids[6] == ids[8]


def test_intern_many_refuses_what_intern_refuses():
    with pytest.raises(SnapshotFormatError, match="not a list"):
        StackInterner().intern_many([frames("a"), "frames"], "device 0's trace")
    with pytest.raises(SnapshotFormatError, match="frame that is"):
        StackInterner().intern_many([[1, 2]], "device 0's trace")
