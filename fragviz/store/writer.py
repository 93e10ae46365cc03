"""The store's writes: a whole snapshot in one transaction, or nothing; and jobs of ranks.

Many writers may share a PostgreSQL store: a snapshot's content hash is locked for its transaction (an
advisory lock), so two processes ingesting one file store it once; frames and stacks, shared by every
snapshot, are inserted in a fixed order and skipped where present, so concurrent writers never deadlock.
"""
from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator

import numpy as np
from sqlalchemy import Connection, Table, func, select
from sqlalchemy.dialects import postgresql, sqlite

from fragviz.model import Frame
from fragviz.store import schema as t
from fragviz.store.engine import Store
from fragviz.store.records import DeviceRecord, SnapshotRecord, Summary

BATCH = 5000  # rows per executemany of the final state's segments and blocks
LOOKUP = 500  # keys per IN (...) when reading ids back


def find_by_hash(store: Store, content_hash: str) -> int | None:
    with store.reading() as conn:
        return _find(conn, content_hash)


def _find(conn: Connection, content_hash: str) -> int | None:
    return conn.execute(select(t.snapshots.c.id).where(t.snapshots.c.content_hash == content_hash)).scalar()


def write_snapshot(store: Store, record: SnapshotRecord) -> tuple[int, bool]:
    """Store `record` in one transaction: (snapshot id, True if new). On any error the store is unchanged."""
    with store.writing() as conn:
        if not store.is_sqlite:  # two writers of one file: the second waits here, then finds the first's
            conn.execute(select(func.pg_advisory_xact_lock(_lock_key(record.content_hash))))
        existing = _find(conn, record.content_hash)
        if existing is not None:
            return existing, False
        sid = _insert_snapshot(conn, record)
        _insert_stacks(conn, sid, record.frames, record.stacks)
        for device in record.devices:
            _insert_device(conn, sid, device)
        return sid, True


def _lock_key(content_hash: str) -> int:
    return int.from_bytes(hashlib.sha1(content_hash.encode()).digest()[:8], "big", signed=True)


def _insert_snapshot(conn: Connection, r: SnapshotRecord) -> int:
    values = dict(name=r.name, content_hash=r.content_hash, file_size=r.file_size,
                  added_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), format=json.dumps(r.format),
                  warnings=json.dumps(r.warnings), allocator_settings=_json_or_none(r.allocator_settings),
                  external_annotations=_json_or_none(r.external_annotations), strings=json.dumps(list(r.strings)),
                  provenance=_json_or_none(r.provenance), summary=r.summary.to_json())
    return int(conn.execute(t.snapshots.insert().values(**values).returning(t.snapshots.c.id)).scalar_one())


def _json_or_none(value: Any) -> str | None:
    return None if value is None else json.dumps(value, default=str)


def _insert_ignore(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    """Insert rows, skipping those whose unique key is present (in one order, so writers never deadlock)."""
    insert = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(table)
    for lo in range(0, len(rows), BATCH):
        conn.execute(insert.on_conflict_do_nothing(), rows[lo:lo + BATCH])


def _insert_stacks(conn: Connection, sid: int, frames: tuple[Frame, ...],
                   stacks: tuple[tuple[int, ...], ...]) -> None:
    frame_ids = _frame_ids(conn, frames)
    blobs = [np.array([frame_ids[i] for i in stack], np.int64).tobytes() for stack in stacks]
    digests = [hashlib.sha1(blob).digest() for blob in blobs]
    ids = _stack_ids(conn, dict(sorted(zip(digests, blobs))))
    rows = [{"snapshot_id": sid, "local_id": local, "stack_id": ids[d]} for local, d in enumerate(digests)]
    for lo in range(0, len(rows), BATCH):
        conn.execute(t.snapshot_stacks.insert(), rows[lo:lo + BATCH])


def _frame_ids(conn: Connection, frames: tuple[Frame, ...]) -> list[int]:
    """The store's id of each frame, inserting those it lacks. Frames present already (the usual case: the
    ranks of a job run the same code) are only read, so concurrent writers seldom wait on each other."""
    ids = _frames_of_files(conn, {f.filename for f in frames})
    missing = sorted({(f.filename, f.line, f.name) for f in frames} - ids.keys())
    if missing:
        _insert_ignore(conn, t.frames, [{"filename": a, "line": b, "name": c} for a, b, c in missing])
        ids.update(_frames_of_files(conn, {a for a, _, _ in missing}))
    return [ids[(f.filename, f.line, f.name)] for f in frames]


def _frames_of_files(conn: Connection, files: set[str]) -> dict[tuple[str, int, str], int]:
    """Every stored frame of these source files by (file, line, name): an index range per file."""
    c = t.frames.c
    wanted = sorted(files)
    out: dict[tuple[str, int, str], int] = {}
    for lo in range(0, len(wanted), LOOKUP):
        q = select(c.id, c.filename, c.line, c.name).where(c.filename.in_(wanted[lo:lo + LOOKUP]))
        out.update({(f, line, name): fid for fid, f, line, name in conn.execute(q)})
    return out


def _stack_ids(conn: Connection, blobs: dict[bytes, bytes]) -> dict[bytes, int]:
    """The store's id of each stack (by digest), inserting those it lacks."""
    ids = _ids_by(conn, t.stacks, t.stacks.c.digest, list(blobs))
    missing = [d for d in blobs if d not in ids]
    if missing:
        _insert_ignore(conn, t.stacks, [{"digest": d, "frame_ids": blobs[d]} for d in missing])
        ids.update(_ids_by(conn, t.stacks, t.stacks.c.digest, missing))
    return ids


def _ids_by(conn: Connection, table: Table, key, values: list) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for lo in range(0, len(values), LOOKUP):
        out.update({k: i for i, k in conn.execute(select(table.c.id, key).where(key.in_(values[lo:lo + LOOKUP])))})
    return out


def _insert_device(conn: Connection, sid: int, d: DeviceRecord) -> None:
    conn.execute(t.devices.insert().values(
        snapshot_id=sid, device=d.device, trace_events=d.info.trace_events,
        action_names=json.dumps(list(d.info.action_names)), pre_trace_blocks=d.info.pre_trace_blocks,
        pre_trace_segments=d.info.pre_trace_segments, warnings=json.dumps(d.info.warnings)))
    _insert_final_state(conn, sid, d)
    key = {"snapshot_id": sid, "device": d.device}
    _insert_blobs(conn, t.trace_chunks, ({**key, "chunk": c, "data": b} for c, b in enumerate(d.trace_chunks)))
    _insert_blobs(conn, t.series_chunks, ({**key, "chunk": c, "data": b} for c, b in enumerate(d.series_chunks)))
    _insert_blobs(conn, t.series_lod, ({**key, "bucket": k, "data": b} for k, b in d.series_lod))
    _insert_blobs(conn, t.checkpoints, ({**key, "event": e, "data": b} for e, b in d.checkpoints))
    conn.execute(t.allocations.insert().values(**key, data=d.allocations()))


def replace_figures(store: Store, sid: int, devices: Iterable[tuple[int, Iterable[bytes], Iterable[tuple[int, bytes]]]],
                    summary: Summary) -> None:
    """A snapshot's series, level-of-detail tables and summary recomputed (device, series chunks, (bucket, lod)),
    written in one transaction that also takes the snapshot off the stale list."""
    with store.writing() as conn:
        taken = conn.execute(t.stale_figures.delete().where(t.stale_figures.c.snapshot_id == sid)).rowcount
        if not taken:  # another process refreshed it first (its delete held the row until it committed)
            return
        for device, series_chunks, series_lod in devices:
            key = {"snapshot_id": sid, "device": device}
            for table in (t.series_chunks, t.series_lod):
                conn.execute(table.delete().where(table.c.snapshot_id == sid, table.c.device == device))
            _insert_blobs(conn, t.series_chunks, ({**key, "chunk": c, "data": b} for c, b in enumerate(series_chunks)))
            _insert_blobs(conn, t.series_lod, ({**key, "bucket": k, "data": b} for k, b in series_lod))
        conn.execute(t.snapshots.update().where(t.snapshots.c.id == sid).values(summary=summary.to_json()))


def _insert_blobs(conn: Connection, table: Table, rows: Iterable[dict[str, Any]]) -> None:
    """Blob rows a few at a time: the encoded chunks of a large trace never all sit in memory at once."""
    for batch in _batches(rows, 16):
        conn.execute(table.insert(), batch)


def _batches(rows: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _insert_final_state(conn: Connection, sid: int, d: DeviceRecord) -> None:
    seg_rows, block_rows = [], []
    for so, s in enumerate(d.segments):
        pa, pb = s.pool_id if s.pool_id else (None, None)
        seg_rows.append(dict(snapshot_id=sid, device=d.device, ord=so, address=s.address, total_size=s.total_size,
                             stream=s.stream, pool=s.pool, pool_id_a=pa, pool_id_b=pb,
                             is_expandable=None if s.is_expandable is None else int(s.is_expandable), stack=s.stack))
        block_rows.extend(dict(snapshot_id=sid, device=d.device, segment_ord=so, ord=bo, address=b.address,
                               size=b.size, requested_size=b.requested_size, state=b.state.value, stack=b.stack)
                          for bo, b in enumerate(s.blocks))
    for table, rows in ((t.segments, seg_rows), (t.blocks, block_rows)):
        for lo in range(0, len(rows), BATCH):
            conn.execute(table.insert(), rows[lo:lo + BATCH])


def add_job_ranks(store: Store, job: str, ranks: list[tuple[int, int]]) -> int:
    """Put snapshots into the job named `job` (made if new) as (rank, snapshot id); a rank given again is
    replaced. Returns the job's id."""
    with store.writing() as conn:
        _insert_ignore(conn, t.jobs, [{"name": job, "created_at": datetime.now(timezone.utc).isoformat(
            timespec="seconds")}])
        job_id = int(conn.execute(select(t.jobs.c.id).where(t.jobs.c.name == job)).scalar_one())
        for rank, sid in sorted(ranks):
            conn.execute(t.job_ranks.delete().where((t.job_ranks.c.job_id == job_id) & (t.job_ranks.c.rank == rank)))
            conn.execute(t.job_ranks.insert().values(job_id=job_id, rank=rank, snapshot_id=sid))
        return job_id

