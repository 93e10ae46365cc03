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

Version 2 adds live recording (fragviz attach, the dashboard's live page):
  live_attachments                  one row per watched agent (target, first pid, simulated, rank), with
                                    when it started, was last heard from, and ended
  live_samples                      one row per poll and device: the agent's /v1/stats figures; `gap` is 1 on
                                    the first sample after the agent could not be reached
  live_events                       what happened: disconnected, reconnected, restarted (a new pid), oom,
                                    snapshot (with the id of the snapshot taken into the library)
  live_state                        the latest segments per attachment and device (compact JSON), for live pages
Version 3 adds what holds memory over time:
  allocations                       per snapshot and device: every allocation of the trace with the states it
                                    is live in, its sizes, stack, address and times (fragviz.usage.lifetimes),
                                    columnar; snapshots stored before version 3 have none (read from the trace)
MIGRATIONS[v] takes a store from version v to v + 1 in one transaction; a store is migrated when opened
for writing (or, for reading, when its file is writable).
"""
from __future__ import annotations

import os
import sqlite3
from contextlib import contextmanager
from typing import Iterator

from fragviz.errors import StoreBusyError, StoreError
from fragviz.replay.engine import CHECKPOINT_EVERY
from fragviz.settings import setting
from fragviz.units import cut

SCHEMA_VERSION = 4
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

LIVE_DDL = """
CREATE TABLE IF NOT EXISTS live_attachments (
    id INTEGER PRIMARY KEY,
    target TEXT NOT NULL,
    owner TEXT NOT NULL,
    pid INTEGER,
    simulated INTEGER,
    rank INTEGER,
    started_at REAL NOT NULL,
    last_seen REAL,
    ended_at REAL
);
CREATE TABLE IF NOT EXISTS live_samples (
    id INTEGER PRIMARY KEY,
    attachment_id INTEGER NOT NULL REFERENCES live_attachments(id) ON DELETE CASCADE,
    t REAL NOT NULL, device INTEGER NOT NULL, pid INTEGER NOT NULL, gap INTEGER NOT NULL,
    allocated INTEGER NOT NULL, requested INTEGER NOT NULL, reserved INTEGER NOT NULL, active INTEGER NOT NULL,
    inactive_split INTEGER NOT NULL, alloc_retries INTEGER NOT NULL, ooms INTEGER NOT NULL,
    device_total INTEGER, device_free INTEGER, nvml_used INTEGER,
    largest_free INTEGER NOT NULL, fragmentation REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS live_samples_by_attachment ON live_samples (attachment_id, id);
CREATE TABLE IF NOT EXISTS live_events (
    id INTEGER PRIMARY KEY,
    attachment_id INTEGER NOT NULL REFERENCES live_attachments(id) ON DELETE CASCADE,
    t REAL NOT NULL, kind TEXT NOT NULL, detail TEXT NOT NULL,
    snapshot_id INTEGER REFERENCES snapshots(id) ON DELETE SET NULL
);
CREATE INDEX IF NOT EXISTS live_events_by_attachment ON live_events (attachment_id, id);
CREATE TABLE IF NOT EXISTS live_state (
    attachment_id INTEGER NOT NULL REFERENCES live_attachments(id) ON DELETE CASCADE,
    device INTEGER NOT NULL, t REAL NOT NULL, segments TEXT NOT NULL,
    PRIMARY KEY (attachment_id, device)
);
"""

USAGE_DDL = """
CREATE TABLE IF NOT EXISTS allocations (
    snapshot_id INTEGER NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
    device INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (snapshot_id, device)
);
"""

JOBS_DDL = """
CREATE TABLE IF NOT EXISTS jobs (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS job_ranks (
    job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    rank INTEGER NOT NULL,
    snapshot_id INTEGER NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,
    PRIMARY KEY (job_id, rank)
);
"""

MIGRATIONS = {1: LIVE_DDL, 2: USAGE_DDL, 3: JOBS_DDL}  # MIGRATIONS[v]: from version v to v + 1


def connect(path: str, readonly: bool = False) -> sqlite3.Connection:
    """Open the store at `path`, creating it (and its schema) unless `readonly`."""
    try:
        if readonly:
            if not os.path.exists(path):
                raise StoreError(f"{path}: no such store (ingest a snapshot into it first)")
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
            if _older(conn, path) and os.access(path, os.W_OK):
                conn.close()
                connect(path).close()  # an older store is migrated before it is read
                conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        else:
            parent = os.path.dirname(os.path.abspath(path))
            os.makedirs(parent, exist_ok=True)
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout={round(float(setting('busy_timeout')) * 1000)}")
            if readonly:
                check_version(conn, path)
            else:
                _refuse_newer(conn, path)  # before anything changes the file
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            if not readonly:
                _ensure_schema(conn, path)
            return conn
        except BaseException:
            conn.close()
            raise
    except sqlite3.DatabaseError as exc:
        raise store_error(path, exc) from None


def store_error(path: str, exc: sqlite3.Error) -> StoreError:
    """The words for SQLite's failure on the store at `path`: busy, full, unreadable, or not a store."""
    text = str(exc)
    if is_busy(exc):
        return StoreBusyError(f"{path}: the store is busy with another writer; try again")
    if disk_is_full(path, exc):
        return StoreError(f"{path}: the store cannot grow: the disk is full ({cut(text)}); it is unchanged")
    if isinstance(exc, sqlite3.OperationalError):
        return StoreError(f"{path}: the store cannot be opened or written ({cut(text)})")
    return StoreError(f"{path}: not a fragviz store ({cut(text)})")


def is_busy(exc: sqlite3.Error) -> bool:
    """True for SQLite's "database is locked" / "busy": another writer held the store past the busy timeout."""
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


# SQLite's names for a write that found no room: the database, its journal, or its shared-memory index
_FULL_ERRORS = {"SQLITE_FULL", "SQLITE_IOERR_SHMSIZE", "SQLITE_IOERR_WRITE", "SQLITE_IOERR_FSYNC",
                "SQLITE_IOERR_TRUNCATE", "SQLITE_CANTOPEN"}
FREE_SPACE_FLOOR = 1 << 20


def disk_is_full(path: str, exc: sqlite3.Error) -> bool:
    """True when `exc` is SQLite finding no room for the store at `path` (its error name, or no free space)."""
    if getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL" or "full" in str(exc):
        return True
    if getattr(exc, "sqlite_errorname", "") not in _FULL_ERRORS:
        return False
    try:
        stat = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return False
    return stat.f_bavail * stat.f_frsize < FREE_SPACE_FLOOR


def database_path(conn: sqlite3.Connection) -> str:
    """The file behind a connection (for messages)."""
    try:
        row = conn.execute("PRAGMA database_list").fetchone()
    except sqlite3.Error:
        return "the store"
    return row[2] if row and row[2] else "the store"


class NewStore:
    """While a command runs: if it made the store at `path` (and its folders) and keeps nothing, they go."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self.existed = os.path.exists(self.path)
        self.new_dirs: list[str] = []
        parent = os.path.dirname(self.path)
        while not os.path.exists(parent):
            self.new_dirs.append(parent)
            parent = os.path.dirname(parent)
        self.keep = False

    def discard(self) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.remove(self.path + suffix)
            except FileNotFoundError:
                pass
        for folder in self.new_dirs:  # deepest first
            try:
                os.rmdir(folder)
            except OSError:
                break


@contextmanager
def new_store_guard(path: str) -> Iterator[NewStore]:
    """Yield a NewStore; a store this block created is removed again unless `keep` is left true."""
    guard = NewStore(path)
    try:
        yield guard
    finally:
        if not guard.existed and not guard.keep:
            guard.discard()


def _ensure_schema(conn: sqlite3.Connection, path: str) -> None:
    have = _version(conn, path)
    if have is None:  # the tables and their version in one transaction: a reader never sees one without the other
        from fragviz import __version__

        conn.executescript("BEGIN IMMEDIATE;" + DDL + LIVE_DDL + USAGE_DDL + JOBS_DDL
                           + f"INSERT OR REPLACE INTO meta VALUES ('schema_version', '{SCHEMA_VERSION}');"
                           + f"INSERT OR REPLACE INTO meta VALUES ('created_by', 'fragviz {__version__}');COMMIT;")
    elif have < SCHEMA_VERSION:
        migrate(conn, path, have)


def _refuse_newer(conn: sqlite3.Connection, path: str) -> None:
    have = _version(conn, path)
    if have is not None and have > SCHEMA_VERSION:
        raise StoreError(f"{path}: store schema version {have} is newer than this fragviz (version "
                         f"{SCHEMA_VERSION}): upgrade fragviz")


def migrate(conn: sqlite3.Connection, path: str, have: int) -> None:
    """Bring a store from version `have` to SCHEMA_VERSION, one transaction per step."""
    for version in range(have, SCHEMA_VERSION):
        if version not in MIGRATIONS:
            raise StoreError(f"{path}: no migration from store schema version {version}")
        conn.executescript("BEGIN IMMEDIATE;" + MIGRATIONS[version]
                           + f"UPDATE meta SET value = '{version + 1}' WHERE key = 'schema_version';COMMIT;")


def _older(conn: sqlite3.Connection, path: str) -> bool:
    have = _version(conn, path)
    return have is not None and have < SCHEMA_VERSION


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
