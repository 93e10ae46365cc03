"""Schema version 5: fragmentation changed meaning (non-releasable / reserved bytes). A store written by the
previous version (a committed SQLite file made by fragviz at schema 4, and a PostgreSQL database put back in the
shape schema 4 wrote) opens with every snapshot's series, level-of-detail tables and summary recomputed: the
same figures a fresh ingest of the same file gives."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
from dataclasses import replace

import numpy as np
from sqlalchemy import text

from fragviz.model.columns import decode_columns, encode_columns
from fragviz.library.ingest import ingest_file
from fragviz.library import Library
from fragviz.doctor.report import report_of
from fragviz.store.engine import open_store
from fragviz.store.records import SUMMARY_VERSION, Summary
from fragviz.store.schema import SCHEMA_VERSION

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STORE_V4 = os.path.join(ROOT, "tests", "data", "store_v4.sqlite")
SAMPLES = os.path.join(ROOT, "sample_snapshots")


def fresh(tmp_path, names: list[str]) -> Library:
    """The same files ingested by this fragviz into a new store."""
    store = open_store(str(tmp_path / "fresh.sqlite"))
    for name in names:
        ingest_file(store, os.path.join(ROOT, name), name=name)
    return Library.open(store)


def same_figures(migrated: Library, expected: Library) -> None:
    by_name = {r.name: r for r in expected.list_snapshots()}
    rows = migrated.list_snapshots()
    assert rows and migrated.records.stale_snapshots() == []
    for row in rows:
        want = by_name[row.name]
        assert row.summary == want.summary and row.summary.version == SUMMARY_VERSION
        for device in row.devices:
            got, exp = migrated.records.series(row.id, device), expected.records.series(want.id, device)
            assert set(got) == set(exp) and "non_releasable" in got
            for key in exp:
                assert np.array_equal(got[key], exp[key]), (row.name, key)
            for bucket in expected.records.lod_buckets(want.id, device):
                lod_got, lod_exp = migrated.records.lod(row.id, device, bucket), expected.records.lod(want.id, device, bucket)
                assert set(lod_got) == set(lod_exp)
                assert all(np.array_equal(lod_got[k], lod_exp[k]) for k in lod_exp)
        report = report_of(migrated.load_analysis(row.id))
        assert report == replace(report_of(expected.load_analysis(want.id)), source=report.source)


def test_the_committed_version_4_sqlite_store_opens_with_its_figures_recomputed(tmp_path):
    copy = str(tmp_path / "v4.sqlite")
    shutil.copyfile(STORE_V4, copy)
    raw = sqlite3.connect(copy)
    assert raw.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("4",)
    names = [r[0] for r in raw.execute("SELECT name FROM snapshots ORDER BY id")]
    old = [json.loads(r[0]) for r in raw.execute("SELECT summary FROM snapshots ORDER BY id")]
    raw.close()
    assert {d["version"] for d in old} == {1}  # fragmentation meant free scatter then
    steps = []
    migrated = Library.open(copy, progress=lambda done, total: steps.append((done, total)))
    expected = fresh(tmp_path, names)
    try:
        assert migrated.records.store.rows("SELECT value FROM meta WHERE key = 'schema_version'") == [
            (str(SCHEMA_VERSION),)]
        assert steps[-1] == (len(names), len(names))
        same_figures(migrated, expected)
        oom = next(r for r in migrated.list_snapshots() if "fragmentation_oom" in r.name).summary.devices[0]
        healthy = next(r for r in migrated.list_snapshots() if r.name.endswith("gpt_train.pickle.gz")).summary.devices[0]
        assert oom.fragmentation > 3 * healthy.fragmentation  # 17.8 % against 5.0 %
        assert healthy.free_scatter > 0.9  # what the old headline read on the healthy run
    finally:
        migrated.close()
        expected.close()


def as_version_4(store, sid: int) -> None:
    """Put a stored snapshot back in the shape schema 4 wrote: series without the non-releasable bytes, level of
    detail without them and with the free scatter as its fragmentation, a version 1 summary, no stale list."""
    with store.writing() as conn:
        for (device, chunk, data) in conn.execute(text(
                "SELECT device, chunk, data FROM series_chunks WHERE snapshot_id = :s"), {"s": sid}).fetchall():
            cols = {k: v for k, v in decode_columns(data).items() if k != "non_releasable"}
            conn.execute(text("UPDATE series_chunks SET data = :d WHERE snapshot_id = :s AND device = :v AND chunk = :c"),
                         {"d": encode_columns(cols), "s": sid, "v": device, "c": chunk})
        for (device, bucket, data) in conn.execute(text(
                "SELECT device, bucket, data FROM series_lod WHERE snapshot_id = :s"), {"s": sid}).fetchall():
            cols = decode_columns(data)
            old = {k: v for k, v in cols.items() if not k.startswith(("non_releasable", "free_scatter"))}
            old["fragmentation_min"], old["fragmentation_max"] = cols["free_scatter_min"], cols["free_scatter_max"]
            conn.execute(text("UPDATE series_lod SET data = :d WHERE snapshot_id = :s AND device = :v AND bucket = :b"),
                         {"d": encode_columns(old), "s": sid, "v": device, "b": bucket})
        summary = json.loads(conn.execute(text("SELECT summary FROM snapshots WHERE id = :s"), {"s": sid}).scalar())
        summary["version"] = 1
        for d in summary["devices"]:
            d["fragmentation"] = d.pop("free_scatter")
            del d["non_releasable_bytes"], d["non_releasable_at_peak"]
        conn.execute(text("UPDATE snapshots SET summary = :m WHERE id = :s"), {"m": json.dumps(summary), "s": sid})
        conn.execute(text("DROP TABLE stale_figures"))
        conn.execute(text("UPDATE meta SET value = '4' WHERE key = 'schema_version'"))


def test_a_version_4_postgresql_store_opens_with_its_figures_recomputed(pg_url, tmp_path):
    name = "sample_snapshots/gpt_train_expandable.pickle.gz"
    store = open_store(pg_url)
    sid = ingest_file(store, os.path.join(ROOT, name), name=name).id
    as_version_4(store, sid)
    store.close()
    migrated = Library.open(pg_url)
    expected = fresh(tmp_path, [name])
    try:
        assert migrated.records.store.rows("SELECT value FROM meta WHERE key = 'schema_version'") == [
            (str(SCHEMA_VERSION),)]
        same_figures(migrated, expected)
    finally:
        migrated.close()
        expected.close()


def test_a_version_1_summary_reads_its_fragmentation_as_free_scatter():
    text_v1 = json.dumps({"version": 1, "devices": [{
        "device": 0, "trace_events": 0, "trace_actions": {}, "reserved_bytes": 40, "allocated_bytes": 10,
        "requested_bytes": 10, "free_bytes": 30, "largest_free_block": 20, "fragmentation": 1 / 3, "segments": 2,
        "blocks": 3, "peak_reserved_bytes": 40, "peak_requested_bytes": 10, "fragmentation_at_peak": 0.5}]})
    device = Summary.from_json(text_v1).devices[0]
    assert (device.fragmentation, device.free_scatter, device.fragmentation_at_peak) == (None, 1 / 3, None)
