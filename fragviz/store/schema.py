"""The timeline store's schema (SQLite), its version, and how a store file is opened.

Version 1 tables:
  meta(key, value)                  schema_version and the fragviz version that created the store
  snapshots                         one row per ingested file: name, content hash (unique), format,
                                    warnings, allocator settings, annotations, provenance (for snapshots
                                    fragviz made), summary (the report object of the final state)
  frames, stacks                    every distinct frame and stack once, shared by all snapshots
  snapshot_stacks                   a snapshot's own stack numbering -> stacks.id
  devices                           per snapshot and device: trace length, action names, replay facts
  segments, blocks                  the final state as recorded in the file
  trace_chunks                      the trace in chunks of CHUNK_EVENTS events, columnar blobs (fragviz.columns)
  series_chunks                     per-event figures after each event, same chunking (n + 1 states)
  series_lod                        the same summarised as min/max per bucket of 16, 64, 256... events
  checkpoints                       the replayed state after every CHUNK_EVENTS events, columnar blobs
Everything a snapshot owns references snapshots(id) ON DELETE CASCADE, so deleting a row removes it whole.
"""
from __future__ import annotations

import os
import sqlite3

from fragviz.errors import StoreError
from fragviz.replay.engine import CHECKPOINT_EVERY

SCHEMA_VERSION = 1
CHUNK_EVENTS = CHECKPOINT_EVERY

DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS snapshots (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    content_hash TEXT NOT NULL UNIQUE,
    file_size INTEGER NOT NULL,
    added_at TEXT NOT NULL,
    format TEXT NOT NULL,
    warnings TEXT NOT NULL,
    allocator_settings TEXT,
    external_annotations TEXT,
    strings TEXT NOT NULL,
    provenance TEXT,
    summary TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS frames (
    id INTEGER PRIMARY KEY,
    filename TEXT NOT NULL, line INTEGER NOT NULL, name TEXT NOT NULL,
    UNIQUE (filename, line, name)
);
CREATE TABLE IF NOT EXISTS stacks (id INTEGER PRIMARY KEY, digest BLOB NOT NULL UNIQUE, frame_ids BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS snapshot_stacks (
    snapshot_id INTEGER NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
    local_id INTEGER NOT NULL, stack_id INTEGER NOT NULL REFERENCES stacks(id),
    PRIMARY KEY (snapshot_id, local_id)
);
CREATE TABLE IF NOT EXISTS devices (
    snapshot_id INTEGER NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
    device INTEGER NOT NULL,
    trace_events INTEGER NOT NULL,
    action_names TEXT NOT NULL,
    pre_trace_blocks INTEGER NOT NULL,
    pre_trace_segments INTEGER NOT NULL,
    warnings TEXT NOT NULL,
    PRIMARY KEY (snapshot_id, device)
);
CREATE TABLE IF NOT EXISTS segments (
    snapshot_id INTEGER NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
    device INTEGER NOT NULL, ord INTEGER NOT NULL,
    address INTEGER NOT NULL, total_size INTEGER NOT NULL, stream INTEGER NOT NULL, pool TEXT NOT NULL,
    pool_id_a INTEGER, pool_id_b INTEGER, is_expandable INTEGER, stack INTEGER NOT NULL,
    PRIMARY KEY (snapshot_id, device, ord)
);
CREATE TABLE IF NOT EXISTS blocks (
    snapshot_id INTEGER NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
    device INTEGER NOT NULL, segment_ord INTEGER NOT NULL, ord INTEGER NOT NULL,
    address INTEGER NOT NULL, size INTEGER NOT NULL, requested_size INTEGER NOT NULL, state TEXT NOT NULL,
    stack INTEGER NOT NULL,
    PRIMARY KEY (snapshot_id, device, segment_ord, ord)
);
CREATE TABLE IF NOT EXISTS trace_chunks (
    snapshot_id INTEGER NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
    device INTEGER NOT NULL, chunk INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (snapshot_id, device, chunk)
);
CREATE TABLE IF NOT EXISTS series_chunks (
    snapshot_id INTEGER NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
    device INTEGER NOT NULL, chunk INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (snapshot_id, device, chunk)
);
CREATE TABLE IF NOT EXISTS series_lod (
    snapshot_id INTEGER NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
    device INTEGER NOT NULL, bucket INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (snapshot_id, device, bucket)
);
CREATE TABLE IF NOT EXISTS checkpoints (
    snapshot_id INTEGER NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
    device INTEGER NOT NULL, event INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (snapshot_id, device, event)
);
"""


def connect(path: str, readonly: bool = False) -> sqlite3.Connection:
    """Open the store at `path`, creating it (and its schema) unless `readonly`."""
    try:
        if readonly:
            if not os.path.exists(path):
                raise StoreError(f"{path}: no such store (ingest a snapshot into it first)")
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        else:
            parent = os.path.dirname(os.path.abspath(path))
            os.makedirs(parent, exist_ok=True)
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=10000")
        if not readonly:
            _ensure_schema(conn, path)
        else:
            check_version(conn, path)
        return conn
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path}: not a fragviz store ({exc})") from None


def _ensure_schema(conn: sqlite3.Connection, path: str) -> None:
    have = _version(conn, path)
    if have is None:
        conn.executescript("BEGIN IMMEDIATE;" + DDL + "COMMIT;")
        from fragviz import __version__

        conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('created_by', ?)", (f"fragviz {__version__}",))
    elif have != SCHEMA_VERSION:
        raise StoreError(f"{path}: store schema version {have}, this fragviz reads version {SCHEMA_VERSION}")


def check_version(conn: sqlite3.Connection, path: str) -> None:
    have = _version(conn, path)
    if have != SCHEMA_VERSION:
        raise StoreError(f"{path}: store schema version {have}, this fragviz reads version {SCHEMA_VERSION}")


def _version(conn: sqlite3.Connection, path: str) -> int | None:
    row = conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
    if row is None:
        if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            raise StoreError(f"{path}: the database holds other tables: not a fragviz store")
        return None
    value = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    return int(value[0]) if value else None
