"""One store, two engines: SQLite and a real PostgreSQL server give the same figures for every real snapshot,
keep a file once when several processes ingest it at once, migrate from older schemas, and lose nothing on a
failed write."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from sqlalchemy import text

from tests.support.pg import ENGINES, drop_store_target, new_store_target
from fragviz.base.errors import StoreError
from fragviz.library.ingest import ingest_file
from fragviz.library import Library
from fragviz.doctor.report import report_of
from fragviz.store import writer
from fragviz.store.engine import open_store, redacted
from fragviz.store.records import SUMMARY_VERSION, Summary
from fragviz.store.schema import SCHEMA_VERSION
from tests.support.helpers import REAL

REAL_FILES = sorted(os.path.join(REAL, f) for f in os.listdir(REAL) if f.endswith(".pickle"))
SAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "sample_snapshots")
FILES = REAL_FILES + sorted(os.path.join(SAMPLES, f) for f in os.listdir(SAMPLES) if f.endswith(".pickle.gz"))
STORE_V3 = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "store_v3.sqlite")
FRAGVIZ = [sys.executable, "-m", "fragviz"]
TABLES = ("snapshots", "frames", "stacks", "snapshot_stacks", "devices", "segments", "blocks", "trace_chunks",
          "series_chunks", "series_lod", "checkpoints", "allocations", "jobs", "job_ranks")


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """Every real snapshot and sample ingested into a SQLite store and a PostgreSQL one: {engine: (target, ids)}."""
    out = {}
    for engine in ENGINES:
        target = new_store_target(engine, tmp_path_factory.mktemp(engine))
        store = open_store(target)
        ids = {}
        for path in FILES:
            result = ingest_file(store, path, name=os.path.basename(path))
            assert result.status == "ingested", result.error
            ids[path] = result.id
        store.close()
        out[engine] = (target, ids)
    yield out
    for target, _ in out.values():
        drop_store_target(target)


def counts(store) -> dict[str, int]:
    return {t: store.rows(f"SELECT count(*) FROM {t}")[0][0] for t in TABLES}


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_the_same_figures_come_out_of_sqlite_and_postgresql(both, path):
    libraries = {engine: Library.open(target) for engine, (target, _) in both.items()}
    sids = {engine: ids[path] for engine, (_, ids) in both.items()}
    lite, pg = libraries["sqlite"], libraries["postgresql"]
    a, b = sids["sqlite"], sids["postgresql"]
    try:
        assert lite.snapshot_row(a).summary == pg.snapshot_row(b).summary
        assert report_of(lite.load_analysis(a)) == report_of(pg.load_analysis(b))
        assert lite.stacks(a) == pg.stacks(b)
        for device in lite.snapshot_row(a).devices:
            n = lite.trace_length(a, device)
            assert pg.trace_length(b, device) == n
            for k in sorted({0, n // 3, n // 2, n - 1, n} - {-1}):
                seg_a, fig_a, _ = lite.device_state(a, device, max(k, 0))
                seg_b, fig_b, _ = pg.device_state(b, device, max(k, 0))
                assert seg_a == seg_b and fig_a == fig_b, (device, k)
            _same_columns(lite.timeline(a, device).columns(), pg.timeline(b, device).columns())
            _same_columns(lite.series(a, device), pg.series(b, device))
            _same_columns(lite.lifetimes(a, device).columns(), pg.lifetimes(b, device).columns())
            assert lite.markers(a, device) == pg.markers(b, device)
            assert lite.annotation_spans(a, device) == pg.annotation_spans(b, device)
    finally:
        lite.close()
        pg.close()


def _same_columns(x: dict, y: dict) -> None:
    assert x.keys() == y.keys()
    for key in x:
        if isinstance(x[key], np.ndarray):
            np.testing.assert_array_equal(x[key], y[key], err_msg=key)
        else:
            assert x[key] == y[key], key


def test_the_stored_summary_agrees_with_the_report_of_the_file(both):
    target, ids = both["postgresql"]
    library = Library.open(target)
    try:
        for path, sid in ids.items():
            summary = library.snapshot_row(sid).summary
            report = json.loads(subprocess.run([*FRAGVIZ, "report", path, "--json"], capture_output=True,
                                               text=True, check=True).stdout) if path == FILES[0] else \
                report_of(library.load_analysis(sid)).as_dict()
            for device, d in zip(summary.devices, report["devices"]):
                assert (device.peak_reserved_bytes, device.peak_requested_bytes, device.reserved_bytes,
                        device.ooms) == (d["peak_reserved_bytes"], d["peak_requested_bytes"], d["reserved_bytes"],
                                         d["trace_actions"].get("oom", 0)), path
                assert device.verdicts is not None and len(device.verdicts) == device.ooms
    finally:
        library.close()


def test_processes_ingesting_one_file_at_once_store_it_once(pg_url):
    path = os.path.join(REAL, "cs336silmont_small.pickle")
    open_store(pg_url).close()
    procs = [subprocess.Popen([*FRAGVIZ, "ingest", path, "--db", pg_url, "--json", "--no-progress"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [json.loads(p.communicate(timeout=300)[0])[0] for p in procs]
    assert sorted(r["status"] for r in results) == ["ingested", "unchanged", "unchanged", "unchanged"]
    assert len({r["id"] for r in results}) == 1
    store = open_store(pg_url)
    try:
        assert store.rows("SELECT count(*) FROM snapshots")[0][0] == 1
    finally:
        store.close()


def test_many_writers_at_once_all_land_and_share_their_frames(pg_url):
    """Different files sharing frames, each written by its own process at the same time (as ranks of a job
    written from several machines): all stored, every frame once, no deadlock."""
    files = [os.path.join(REAL, f) for f in ("cs336silmont_small.pickle", "diffusion_tiny.pickle",
                                              "cs336kk_ctx128_fullstep.pickle")] + \
            [os.path.join(SAMPLES, f) for f in ("gpt_train.pickle.gz", "gpt_train_expandable.pickle.gz",
                                                "gpt_train_fragmentation_oom.pickle.gz")]
    open_store(pg_url).close()

    def one(path: str) -> dict:
        out = subprocess.run([*FRAGVIZ, "ingest", path, "--db", pg_url, "--json", "--no-progress"],
                             capture_output=True, text=True, timeout=600)
        return json.loads(out.stdout)[0]
    with ThreadPoolExecutor(len(files)) as pool:
        results = list(pool.map(one, files))
    assert [r["status"] for r in results] == ["ingested"] * len(files), results
    store = open_store(pg_url)
    try:
        assert store.rows("SELECT count(*) FROM snapshots")[0][0] == len(files)
        total, distinct = store.rows("SELECT count(*), count(DISTINCT (filename, line, name)) FROM frames")[0]
        assert total == distinct
    finally:
        store.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_write_that_fails_midway_leaves_either_store_as_it_was(tmp_path, monkeypatch, engine):
    target = new_store_target(engine, tmp_path)
    try:
        store = open_store(target)
        assert ingest_file(store, os.path.join(REAL, "diffusion_tiny.pickle")).status == "ingested"
        before = counts(store)
        real_insert = writer._insert_final_state

        def fail_after_writing(*args):
            real_insert(*args)
            raise store.engine.dialect.loaded_dbapi.OperationalError("disk I/O error")  # injected after rows went in

        monkeypatch.setattr(writer, "_insert_final_state", fail_after_writing)
        result = ingest_file(store, os.path.join(REAL, "cs336silmont_small.pickle"))
        assert result.status == "store_error" and "disk I/O error" in result.error
        assert "\n" not in result.error
        assert counts(store) == before
        store.close()
    finally:
        drop_store_target(target)


def test_a_version_3_sqlite_store_opens_migrated_with_its_figures(tmp_path):
    copy = str(tmp_path / "v3.sqlite")
    shutil.copyfile(STORE_V3, copy)
    raw = sqlite3.connect(copy)
    assert raw.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("3",)
    old_summary = json.loads(raw.execute("SELECT summary FROM snapshots").fetchone()[0])
    raw.close()
    library = Library.open(copy)
    try:
        store = library.records.store
        assert store.rows("SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
        assert library.jobs() == []
        _check_migrated(library, old_summary)
    finally:
        library.close()


def test_a_version_3_postgresql_store_opens_migrated_with_its_figures(pg_url):
    """A PostgreSQL store as schema version 3 left it (no jobs tables, the report as summary) is brought to
    the current version when opened, and reads as before."""
    path = os.path.join(SAMPLES, "gpt_train_fragmentation_oom.pickle.gz")
    store = open_store(pg_url)
    sid = ingest_file(store, path, name=path).id
    old_summary = report_of(Library.open(store).load_analysis(sid)).as_dict()  # the summary column's JSON
    for d in old_summary["devices"]:  # as version 3 wrote it: its fragmentation was the free scatter
        d["fragmentation"] = d.pop("free_scatter")
        del d["non_releasable_bytes"], d["at_peak"]
    with store.writing() as conn:
        conn.execute(text("DROP TABLE job_ranks"))
        conn.execute(text("DROP TABLE jobs"))
        conn.execute(text("UPDATE snapshots SET summary = :s"), {"s": json.dumps(old_summary)})
        conn.execute(text("UPDATE meta SET value = '3' WHERE key = 'schema_version'"))
    store.close()
    library = Library.open(pg_url)
    try:
        assert library.records.store.rows("SELECT value FROM meta WHERE key = 'schema_version'") == [
            (str(SCHEMA_VERSION),)]
        assert library.jobs() == []
        _check_migrated(library, old_summary)
    finally:
        library.close()


def _check_migrated(library: Library, old_summary: dict) -> None:
    """Version 3 kept the report as summary; on the way to version 5 every figure is recomputed from the stored
    trace (fragviz.library.upgrade), so the summary is the current record, with what version 3 did not keep."""
    row = library.list_snapshots()[0]
    assert row.summary.version == SUMMARY_VERSION and library.records.stale_snapshots() == []
    device = row.summary.devices[0]
    old = Summary.from_report(old_summary).devices[0]
    assert device.verdicts and device.fragmentation_at_peak is not None and device.non_releasable_bytes is not None
    assert device.free_scatter == old.free_scatter  # the figure version 3 called fragmentation
    assert (device.peak_reserved_bytes, device.ooms) == (old_summary["devices"][0]["peak_reserved_bytes"],
                                                         old_summary["devices"][0]["trace_actions"]["oom"])
    analysis = library.load_analysis(row.id)
    assert report_of(analysis).devices[0].reserved_bytes == old_summary["devices"][0]["reserved_bytes"]


def reopened_after(pg_url: str, *statements: str) -> StoreError:
    """Make a store at `pg_url`, change it with `statements`, and open it again: the StoreError raised."""
    store = open_store(pg_url)
    with store.writing() as conn:
        for sql in statements:
            conn.execute(text(sql))
    store.close()
    with pytest.raises(StoreError) as err:
        open_store(pg_url)
    return err.value


def test_a_newer_postgresql_store_is_refused(pg_url):
    err = reopened_after(pg_url, "UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    assert "99" in str(err) and "fragviz:fragviz@" not in str(err) and "***" in str(err)


def test_a_database_with_other_tables_is_not_taken_for_a_store(pg_url):
    assert "not a fragviz store" in str(reopened_after(pg_url, "DROP TABLE meta CASCADE"))


def test_reading_an_empty_database_says_there_is_no_store_yet(pg_url):
    with pytest.raises(StoreError) as err:
        Library.open(pg_url)
    assert str(err.value) == f"{redacted(pg_url)}: no fragviz store here yet (ingest a snapshot into it first)"
    assert "***" in redacted(pg_url)


# -- values at the edges: ids no column holds, NUL in the file's strings ----------------------------------------

def nul_snapshot(path: str) -> str:
    from tests.support.helpers import block, ev, segment, snapshot, write_pickle

    stack = [{"filename": "/home/u/tr\x00ain.py", "line": 3, "name": "fwd\x00"}]
    events = [ev("segment_alloc", 0, 2 << 20), ev("alloc", 0, 1 << 20, frames=stack)]
    return write_pickle(path, snapshot([segment(0, [block(0, 1 << 20, stack=stack), block(1 << 20, 1 << 20, "inactive")])],
                                       events, allocator_settings={"k\x00": "v\x00"},
                                       external_annotations=[{"name": "step\x00", "stage": "START", "time_us": 1}]))


@pytest.mark.parametrize("engine", ENGINES)
def test_nul_in_a_files_strings_is_stored_the_same_on_both_engines(tmp_path, engine):
    target = new_store_target(engine, tmp_path)
    try:
        store = open_store(target)
        result = ingest_file(store, nul_snapshot(str(tmp_path / "nul.pickle")), name="nul")
        assert result.status == "ingested", result.error
        library = Library.open(store)
        frames = {(f.filename, f.name) for stack in [library.stack_frames(result.id, s)
                                                      for s in range(len(library.stacks(result.id)[1]))] for f in stack}
        assert ("/home/u/tr\ufffdain.py", "fwd\ufffd") in frames
        meta = library.snapshot_meta(result.id)
        assert meta["allocator_settings"] == {"k\ufffd": "v\ufffd"}
        assert meta["external_annotations"][0]["name"] == "step\ufffd"
        store.close()
    finally:
        drop_store_target(target)


@pytest.mark.parametrize("engine", ENGINES)
def test_an_id_no_column_can_hold_is_no_such_snapshot(tmp_path, engine):
    from fragviz.base.errors import NotFoundError

    target = new_store_target(engine, tmp_path)
    try:
        store = open_store(target)
        assert ingest_file(store, nul_snapshot(str(tmp_path / "s.pickle")), name="s").status == "ingested"
        library = Library.open(store)
        for sid in (2**63, 2**64 + 1, -(2**63) - 1):
            with pytest.raises(NotFoundError, match=f"no snapshot with id {sid}"):
                library.snapshot_row(sid)
            with pytest.raises(NotFoundError, match=f"no snapshot with id {sid}"):
                library.snapshot_meta(sid)
            assert library.live.attachment(sid) is None
        with pytest.raises(NotFoundError, match="no job with id"):
            library.job(2**63)
        store.close()
        done = subprocess.run([*FRAGVIZ, "export", str(2**63), "--db", target, "--format", "csv", "-o", "-"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and f"no snapshot with id {2**63}" in done.stderr, done.stderr
        assert "fragviz bug" not in done.stderr and done.stderr.count("\n") == 1
    finally:
        drop_store_target(target)
