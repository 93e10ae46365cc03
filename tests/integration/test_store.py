"""The SQLite timeline store: a report from the store equals a report of the file; failed or killed
ingests leave no trace; past states come back from checkpoints."""
from __future__ import annotations

import os
import pickle
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from fragviz.replay.analysis import analyze
from fragviz.base.errors import StoreError
from fragviz.library.ingest import ingest_bytes, ingest_file
from fragviz.doctor.report import report_of
from fragviz.library.summaries import summary_of
from fragviz.snapshot import load_snapshot
from fragviz.store import writer
from fragviz.library import Library
from fragviz.store.engine import open_store
from fragviz.store.schema import SCHEMA_VERSION
from fragviz.library.stored import CHUNK_EVENTS
from fragviz.allocator.synth import synthetic_snapshot
from tests.support.helpers import REAL, write_pickle

REAL_FILES = sorted(os.path.join(REAL, f) for f in os.listdir(REAL) if f.endswith(".pickle"))
TABLES = ("snapshots", "frames", "stacks", "snapshot_stacks", "devices", "segments", "blocks", "trace_chunks",
          "series_chunks", "checkpoints")


def counts(db: str) -> dict[str, int]:
    conn = sqlite3.connect(db)
    try:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    finally:
        conn.close()


@pytest.fixture(scope="module")
def real_store(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("store") / "real.sqlite")
    conn = open_store(db)
    ids = {}
    for path in REAL_FILES:
        result = ingest_file(conn, path)
        assert result.status == "ingested", result.error
        ids[path] = result.id
    conn.close()
    return db, ids


@pytest.mark.parametrize("path", REAL_FILES, ids=os.path.basename)
def test_report_from_the_store_equals_report_of_the_file(real_store, path):
    db, ids = real_store
    from_file = analyze(load_snapshot(path))
    from_store = Library.open(db).load_analysis(ids[path])
    assert report_of(from_store) == report_of(from_file)
    n = max((len(t) for t in from_file.snapshot.traces.values()), default=0)
    for k in sorted({0, n // 3, n // 2, n}):
        devices = [d for d in from_file.snapshot.devices() if len(from_file.snapshot.trace_of(d)) >= k]
        for d in devices:
            assert report_of(from_store, at=k, device=d) == report_of(from_file, at=k, device=d)


def test_reingest_is_a_no_op_that_says_so(real_store):
    db, ids = real_store
    before = counts(db)
    conn = open_store(db)
    result = ingest_file(conn, REAL_FILES[0])
    conn.close()
    assert (result.status, result.id) == ("unchanged", ids[REAL_FILES[0]])
    assert counts(db) == before


def test_stacks_and_frames_are_stored_once(real_store):
    db, _ = real_store
    conn = sqlite3.connect(db)
    frames = conn.execute("SELECT count(*), count(DISTINCT filename || ':' || line || ':' || name) FROM frames").fetchone()
    stacks = conn.execute("SELECT count(*), count(DISTINCT frame_ids) FROM stacks").fetchone()
    refs = conn.execute("SELECT count(*) FROM snapshot_stacks").fetchone()[0]
    assert frames[0] == frames[1] and stacks[0] == stacks[1]
    assert refs > stacks[0]  # the cs336kk files share stacks


def test_state_at_any_event_from_the_store(real_store):
    db, ids = real_store
    path = os.path.join(REAL, "cs336kk_ctx128_fullstep.pickle")
    replay = analyze(load_snapshot(path)).replays[0]
    reader = Library.open(db)
    rng = random.Random(3)
    for k in [0, 1, CHUNK_EVENTS - 1, CHUNK_EVENTS, CHUNK_EVENTS + 1] + rng.sample(range(len(replay.trace)), 15):
        segments, figures, event = reader.device_state(ids[path], 0, k)
        assert event == k
        assert segments == replay.segments_at(k)
        assert figures == replay.figures_at(k)


def test_schema_is_versioned(tmp_path):
    db = str(tmp_path / "s.sqlite")
    open_store(db).close()
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="schema version 99"):
        open_store(db)
    other = str(tmp_path / "other.sqlite")
    c = sqlite3.connect(other)
    c.execute("CREATE TABLE users (id INTEGER)")
    c.commit()
    c.close()
    with pytest.raises(StoreError, match="not a fragviz store"):
        open_store(other)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(StoreError, match="not a fragviz store"):
        open_store(str(junk))
    with pytest.raises(StoreError, match="no such store"):
        Library.open(str(tmp_path / "absent.sqlite"))


def test_bad_files_store_nothing(tmp_path):
    db = str(tmp_path / "s.sqlite")
    conn = open_store(db)
    assert ingest_file(conn, os.path.join(REAL, "diffusion_tiny.pickle")).status == "ingested"
    before = counts(db)
    bad = [b"", b"\x89PNG\r\n\x1a\n....", pickle.dumps({"segments": [object.__class__]}),
           pickle.dumps(list(range(10))), pickle.dumps({"segments": [{"address": 1, "total_size": -5}]})]
    for i, data in enumerate(bad):
        result = ingest_bytes(conn, data, f"bad{i}.pickle")
        assert result.status == "error" and result.id is None
        assert result.error.startswith(f"bad{i}.pickle: ") and "\n" not in result.error
    conn.close()
    assert counts(db) == before


def test_a_write_that_fails_midway_leaves_the_store_as_it_was(tmp_path, monkeypatch):
    db = str(tmp_path / "s.sqlite")
    conn = open_store(db)
    ingest_file(conn, os.path.join(REAL, "diffusion_tiny.pickle"))
    before = counts(db)
    real_insert = writer._insert_final_state

    def fail_after_writing(*args):
        real_insert(*args)
        raise sqlite3.OperationalError("disk I/O error")  # a fault injected after rows were written

    monkeypatch.setattr(writer, "_insert_final_state", fail_after_writing)
    result = ingest_file(conn, os.path.join(REAL, "cs336silmont_small.pickle"))
    assert result.status == "store_error" and "disk I/O error" in result.error
    conn.close()
    assert counts(db) == before


def test_killed_ingests_leave_whole_snapshots_or_none(tmp_path):
    data = synthetic_snapshot(300_000, seed=5)
    events = len(data["device_traces"][0])
    path = write_pickle(str(tmp_path / "big.pickle"), data)
    db = str(tmp_path / "s.sqlite")
    open_store(db).close()
    cmd = [sys.executable, "-m", "fragviz.cli", "ingest", path, "--db", db, "--no-progress"]
    for delay in (0.3, 0.8, 1.3, 1.8, 2.4):
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        _assert_whole(db, events)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    _assert_whole(db, events)
    assert counts(db)["snapshots"] == 1


def _assert_whole(db: str, events: int) -> None:
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    reader = Library.open(db)
    for row in reader.list_snapshots():
        analysis = reader.load_analysis(row.id)
        n = len(analysis.snapshot.trace_of(0))
        assert n == events
        assert summary_of(analysis) == row.summary
    reader.close()


def test_timeline_markers_and_level_of_detail(real_store):
    db, ids = real_store
    path = os.path.join(REAL, "cs336kk_ctx128_fullstep.pickle")
    reader = Library.open(db)
    snap = load_snapshot(path)
    n = len(snap.trace_of(0))
    markers = reader.markers(ids[path], 0)
    assert len(markers["segment_alloc"]) == snap.trace_of(0).action_counts()["segment_alloc"]
    starts = [a for a in snap.external_annotations if a.get("device", 0) == 0 and a["stage"] == "START"]
    spans = reader.annotation_spans(ids[path], 0)  # START/END pairs as spans (test_annotation_spans.py)
    assert len(spans) == len(starts) == 2 and all(0 <= s.start_event <= s.end_event <= n for s in spans)
    whole = reader.timeline(ids[path], 0, max_points=500)
    replay = analyze(snap).replays[0]
    assert whole.bucket == 64 and whole.maxs["reserved"].max() == replay.series["reserved"].max()
    assert whole.maxs["allocated"].max() == replay.series["allocated"].max()  # no peak is lost to the summary
    raw = reader.timeline(ids[path], 0, 1000, 1200)
    assert raw.bucket == 1 and (raw.maxs["reserved"] == replay.series["reserved"][1000:1201]).all()
