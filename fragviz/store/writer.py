"""The store's one writer: a whole analysed snapshot in one transaction, or nothing."""
from __future__ import annotations

import hashlib
import json
import sqlite3
from datetime import datetime, timezone

import numpy as np

from fragviz.analysis import Analysis
from fragviz.columns import encode_columns
from fragviz.lod import bucket_sizes, per_event, summarise
from fragviz.model import Snapshot, Trace
from fragviz.replay import DeviceReplay
from fragviz.store.records import Summary
from fragviz.store.schema import CHUNK_EVENTS


def find_by_hash(conn: sqlite3.Connection, content_hash: str) -> int | None:
    row = conn.execute("SELECT id FROM snapshots WHERE content_hash = ?", (content_hash,)).fetchone()
    return row[0] if row else None


def write_analysis(conn: sqlite3.Connection, analysis: Analysis, summary: Summary, content_hash: str,
                   file_size: int) -> tuple[int, bool]:
    """Store `analysis` in one transaction: (snapshot id, True if new). On any error the store is unchanged.

    The hash is checked again inside the transaction, so two processes ingesting one file store it once.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        existing = find_by_hash(conn, content_hash)
        if existing is not None:
            conn.execute("ROLLBACK")
            return existing, False
        sid = _insert_snapshot(conn, analysis, summary, content_hash, file_size)
        _insert_stacks(conn, sid, analysis.snapshot)
        for device in analysis.snapshot.devices():
            _insert_device(conn, sid, analysis.snapshot, analysis.replays[device])
        conn.execute("COMMIT")
        return sid, True
    except BaseException:
        if conn.in_transaction:  # SQLite may have rolled back already (a full disk): keep the first error
            conn.execute("ROLLBACK")
        raise


def _insert_snapshot(conn: sqlite3.Connection, analysis: Analysis, summary: Summary, content_hash: str,
                     file_size: int) -> int:
    snap = analysis.snapshot
    cur = conn.execute(
        "INSERT INTO snapshots (name, content_hash, file_size, added_at, format, warnings, allocator_settings, "
        "external_annotations, strings, provenance, summary) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (snap.source, content_hash, file_size, datetime.now(timezone.utc).isoformat(timespec="seconds"),
         json.dumps(snap.format.as_dict()), json.dumps(analysis.warnings), _json_or_none(snap.allocator_settings),
         _json_or_none(snap.external_annotations), json.dumps(list(snap.strings)),
         _json_or_none(snap.provenance), summary.to_json()))
    return int(cur.lastrowid)


def _json_or_none(value) -> str | None:
    return None if value is None else json.dumps(value, default=str)


def _insert_stacks(conn: sqlite3.Connection, sid: int, snap: Snapshot) -> None:
    frame_ids = []
    for f in snap.frames:
        conn.execute("INSERT OR IGNORE INTO frames (filename, line, name) VALUES (?, ?, ?)",
                     (f.filename, f.line, f.name))
        frame_ids.append(conn.execute("SELECT id FROM frames WHERE filename = ? AND line = ? AND name = ?",
                                      (f.filename, f.line, f.name)).fetchone()[0])
    rows = []
    for local, stack in enumerate(snap.stacks):
        blob = np.array([frame_ids[i] for i in stack], np.int64).tobytes()
        digest = hashlib.sha1(blob).digest()
        conn.execute("INSERT OR IGNORE INTO stacks (digest, frame_ids) VALUES (?, ?)", (digest, blob))
        global_id = conn.execute("SELECT id FROM stacks WHERE digest = ?", (digest,)).fetchone()[0]
        rows.append((sid, local, global_id))
    conn.executemany("INSERT INTO snapshot_stacks VALUES (?, ?, ?)", rows)


def _insert_device(conn: sqlite3.Connection, sid: int, snap: Snapshot, replay: DeviceReplay) -> None:
    device, trace = replay.device, replay.trace
    conn.execute("INSERT INTO devices VALUES (?, ?, ?, ?, ?, ?, ?)",
                 (sid, device, len(trace), json.dumps(list(trace.action_names)), replay.pre_trace_blocks,
                  replay.pre_trace_segments, json.dumps(replay.warnings)))
    _insert_final_state(conn, sid, snap, device)
    conn.executemany("INSERT INTO trace_chunks VALUES (?, ?, ?, ?)",
                     ((sid, device, c, blob) for c, blob in _trace_chunks(trace, replay.block_size)))
    conn.executemany("INSERT INTO series_chunks VALUES (?, ?, ?, ?)",
                     ((sid, device, c, blob) for c, blob in _series_chunks(replay.series)))
    figures = per_event(replay.series, trace.time_us)
    conn.executemany("INSERT INTO series_lod VALUES (?, ?, ?, ?)",
                     ((sid, device, b, encode_columns(summarise(figures, b)))
                      for b in bucket_sizes(len(figures["reserved"]))))
    conn.executemany("INSERT INTO checkpoints VALUES (?, ?, ?, ?)",
                     ((sid, device, event, encode_columns(cols)) for event, cols in replay.checkpoints.items()))
    conn.execute("INSERT INTO allocations VALUES (?, ?, ?)",
                 (sid, device, encode_columns(replay.lifetimes().columns())))


def _insert_final_state(conn: sqlite3.Connection, sid: int, snap: Snapshot, device: int) -> None:
    seg_rows, block_rows = [], []
    for so, s in enumerate(snap.segments_of(device)):
        pa, pb = s.pool_id if s.pool_id else (None, None)
        exp = None if s.is_expandable is None else int(s.is_expandable)
        seg_rows.append((sid, device, so, s.address, s.total_size, s.stream, s.pool, pa, pb, exp, s.stack))
        block_rows.extend((sid, device, so, bo, b.address, b.size, b.requested_size, b.state.value, b.stack)
                          for bo, b in enumerate(s.blocks))
    conn.executemany("INSERT INTO segments VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", seg_rows)
    conn.executemany("INSERT INTO blocks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", block_rows)


TRACE_COLUMNS = ("action", "addr", "size", "stream", "time_us", "stack", "compile_context", "user_metadata")


def _trace_chunks(trace: Trace, block_size: np.ndarray):
    for c, lo in enumerate(range(0, len(trace), CHUNK_EVENTS)):
        hi = lo + CHUNK_EVENTS
        cols = {name: getattr(trace, name)[lo:hi] for name in TRACE_COLUMNS}
        cols["block_size"] = block_size[lo:hi]
        yield c, encode_columns(cols)


def _series_chunks(series: dict[str, np.ndarray]):
    n = len(next(iter(series.values())))
    for c, lo in enumerate(range(0, n, CHUNK_EVENTS)):
        yield c, encode_columns({k: v[lo:lo + CHUNK_EVENTS] for k, v in series.items()})


def add_job_ranks(conn: sqlite3.Connection, job: str, ranks: list[tuple[int, int]]) -> int:
    """Put snapshots into the job named `job` (made if new) as (rank, snapshot id); a rank given again is
    replaced. Returns the job's id."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("INSERT OR IGNORE INTO jobs (name, created_at) VALUES (?, ?)",
                     (job, datetime.now(timezone.utc).isoformat(timespec="seconds")))
        job_id = conn.execute("SELECT id FROM jobs WHERE name = ?", (job,)).fetchone()[0]
        conn.executemany("INSERT OR REPLACE INTO job_ranks VALUES (?, ?, ?)",
                         [(job_id, rank, sid) for rank, sid in ranks])
        conn.execute("COMMIT")
        return int(job_id)
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
