"""Lives (every state of a device at once, fragviz.replay.lives) against the stored state they stand for:
on every real snapshot and bundled sample, the state the lives give after an event is `device_state`'s, segment
for segment and block for block, at the ends, around every checkpoint and at random events."""
from __future__ import annotations

import glob
import os
import random

import numpy as np
import pytest

from fragviz.library import Library
from fragviz.library.ingest import ingest_file
from fragviz.model import ALLOC
from fragviz.replay.engine import CHECKPOINT_EVERY
from fragviz.store.engine import open_store
from tests.support.helpers import REAL, ROOT

FILES = sorted(glob.glob(os.path.join(REAL, "*.pickle"))) + sorted(
    glob.glob(os.path.join(ROOT, "sample_snapshots", "*.pickle.gz")))


@pytest.fixture(scope="module")
def library(tmp_path_factory, real_dir):
    store = open_store(str(tmp_path_factory.mktemp("lives") / "store.sqlite"))
    ids = {}
    for path in FILES:
        result = ingest_file(store, path)
        assert result.status == "ingested", (path, result)
        ids[os.path.basename(path)] = result.id
    yield Library.open(store), ids
    store.close()


def events_to_check(n: int, rng: random.Random) -> list[int]:
    """The ends, each checkpoint and its neighbours, and random events."""
    chosen = {0, 1, n - 1, n}
    for c in range(0, n + 1, CHECKPOINT_EVERY):
        chosen |= {c - 1, c, c + 1}
    chosen |= {rng.randrange(n + 1) for _ in range(24)}
    return sorted(k for k in chosen if 0 <= k <= n)


@pytest.mark.parametrize("name", [os.path.basename(p) for p in FILES])
def test_the_lives_give_the_stored_state_after_every_event_checked(library, name):
    reader, ids = library
    sid = ids[name]
    rng = random.Random(name)
    for device, info in reader.records.devices(sid).items():
        lives = reader.device_lives(sid, device)
        n = info.trace_events
        assert lives.states == n + 1
        for k in events_to_check(n, rng):
            expected, _, _ = reader.device_state(sid, device, k)
            assert lives.segments_at(k) == expected, f"{name} device {device} after {k} of {n} events"


def test_a_block_s_life_starts_after_its_alloc_and_a_pending_free_is_a_life_of_its_own(library):
    """On the file with pending frees: an alloc at event i puts its block in states i+1 onward, and each block
    row's span is a run of states in which that block is unchanged."""
    reader, ids = library
    sid = ids["verl_mempools_pending.pickle"]
    device = next(iter(reader.records.devices(sid)))
    lives = reader.device_lives(sid, device)
    trace = reader.trace(sid, device)
    blocks = lives.blocks
    assert (blocks["first"] < blocks["end"]).all()
    assert (blocks["state"] == 1).any(), "the file's pending frees are block rows of their own"
    for i in np.flatnonzero(trace.action == ALLOC)[:50].tolist():
        rows = (blocks["address"] == trace.addr[i]) & (blocks["first"] == i + 1)
        state, _, _ = reader.device_state(sid, device, i + 1)
        on_segment = any(b.address == trace.addr[i] and b.state.is_active for s in state for b in s.blocks)
        assert rows.any() == on_segment, f"event {i}"
