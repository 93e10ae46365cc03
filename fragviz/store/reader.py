"""The store's reads: records in, records out (frozen dataclasses, model objects and decoded columns).

A leaf: it fetches what was stored and never replays, analyses or reports. Rebuilding a past state from the
checkpoints and chunks read here is the replay's (fragviz.library.stored, through the StoredTrace protocol this
class implements); the figures the dashboard draws are the library's (fragviz.library).
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from fragviz.model.columns import decode_columns
from fragviz.base.errors import NotFoundError
from fragviz.model import Block, BlockState, Frame, FormatInfo, Segment
from fragviz.store.engine import Store, open_store
from fragviz.store.live import LiveReader
from fragviz.store.records import DeviceInfo, Job, JobRank, Summary

LOD_CACHE = 16  # decoded level-of-detail tables kept per thread


@dataclass(frozen=True)
class SnapshotRow:
    id: int
    name: str
    content_hash: str
    file_size: int
    added_at: str
    devices: list[int]
    warnings: list[str]
    summary: Summary


class StoreReader:
    """Read access to one store. Safe to share between threads."""

    def __init__(self, target: str | Store) -> None:
        self.store = target if isinstance(target, Store) else open_store(target, readonly=True)
        self.path = self.store.label  # what messages call the store
        self._local = threading.local()
        self.live = LiveReader(self.store)

    def close(self) -> None:
        self.store.close()

    def _rows(self, sql: str, **params: Any) -> list[tuple]:
        return self.store.rows(sql, **params)

    def _one(self, sql: str, **params: Any) -> tuple | None:
        rows = self._rows(sql, **params)
        return rows[0] if rows else None

    # -- listing ---------------------------------------------------------------------------------------
    def list_snapshots(self) -> list[SnapshotRow]:
        return [_row(r) for r in self._rows(
            "SELECT id, name, content_hash, file_size, added_at, warnings, summary FROM snapshots ORDER BY id DESC")]

    def snapshot_row(self, sid: int) -> SnapshotRow:
        r = self._one("SELECT id, name, content_hash, file_size, added_at, warnings, summary FROM snapshots "
                      "WHERE id = :sid", sid=sid)
        if r is None:
            raise NotFoundError(f"{self.path}: no snapshot with id {sid}")
        return _row(r)

    def snapshot_meta(self, sid: int) -> dict[str, Any]:
        """Name, format, allocator settings, annotations, strings, provenance and warnings, without the traces."""
        row = self._one("SELECT name, format, allocator_settings, external_annotations, strings, provenance, warnings "
                        "FROM snapshots WHERE id = :sid", sid=sid)
        if row is None:
            raise NotFoundError(f"{self.path}: no snapshot with id {sid}")
        fmt = json.loads(row[1])
        return {"name": row[0], "format": FormatInfo(**{**fmt, "features": tuple(fmt["features"])}),
                "allocator_settings": _loads(row[2]), "external_annotations": _loads(row[3]),
                "strings": tuple(json.loads(row[4])), "provenance": _loads(row[5]), "warnings": json.loads(row[6])}

    def devices(self, sid: int) -> dict[int, DeviceInfo]:
        rows = self._rows("SELECT device, trace_events, action_names, pre_trace_blocks, pre_trace_segments, warnings "
                          "FROM devices WHERE snapshot_id = :sid ORDER BY device", sid=sid)
        return {r[0]: DeviceInfo(r[0], r[1], tuple(json.loads(r[2])), r[3], r[4], json.loads(r[5])) for r in rows}

    def device_info(self, sid: int, device: int) -> DeviceInfo:
        """One device's row; NotFoundError naming the snapshot or the device when there is none."""
        devices = self.devices(sid)
        if device not in devices:
            self.snapshot_row(sid)
            raise NotFoundError(f"{self.path}: snapshot {sid} has no device {device}")
        return devices[device]

    def trace_length(self, sid: int, device: int) -> int:
        return self.device_info(sid, device).trace_events

    # -- jobs ------------------------------------------------------------------------------------------
    def jobs(self) -> list[Job]:
        """Every job, newest first, with its ranks."""
        return [self.job(r[0]) for r in self._rows("SELECT id FROM jobs ORDER BY id DESC")]

    def job(self, job_id: int) -> Job:
        row = self._one("SELECT id, name, created_at FROM jobs WHERE id = :job", job=job_id)
        if row is None:
            raise NotFoundError(f"{self.path}: no job with id {job_id}")
        ranks = self._rows("SELECT r.rank, r.snapshot_id, s.name FROM job_ranks r JOIN snapshots s "
                           "ON s.id = r.snapshot_id WHERE r.job_id = :job ORDER BY r.rank", job=job_id)
        return Job(row[0], row[1], row[2], tuple(JobRank(*r) for r in ranks))

    def job_named(self, name: str) -> Job | None:
        row = self._one("SELECT id FROM jobs WHERE name = :name", name=name)
        return None if row is None else self.job(row[0])

    # -- stacks and frames -----------------------------------------------------------------------------
    def stacks(self, sid: int) -> tuple[tuple[Frame, ...], tuple[tuple[int, ...], ...]]:
        """A snapshot's frames and its stacks (frame indices, innermost first), numbered as its blocks refer to them."""
        rows = self._rows("SELECT ss.local_id, st.frame_ids FROM snapshot_stacks ss JOIN stacks st "
                          "ON st.id = ss.stack_id WHERE ss.snapshot_id = :sid ORDER BY ss.local_id", sid=sid)
        raw = [np.frombuffer(blob, np.int64).tolist() for _, blob in rows]
        by_id = self._frames_by_id({f for ids in raw for f in ids})
        index = {fid: i for i, fid in enumerate(by_id)}
        return tuple(by_id.values()), tuple(tuple(index[f] for f in ids) for ids in raw)

    def stack_frames(self, sid: int, local_stack: int) -> list[Frame]:
        """The frames (innermost first) of one of a snapshot's stacks."""
        if local_stack < 0:
            return []
        row = self._one("SELECT st.frame_ids FROM snapshot_stacks ss JOIN stacks st ON st.id = ss.stack_id "
                        "WHERE ss.snapshot_id = :sid AND ss.local_id = :local", sid=sid, local=local_stack)
        if row is None:
            return []
        ids = np.frombuffer(row[0], np.int64).tolist()
        frames = self._frames_by_id(ids)
        return [frames[i] for i in ids]

    def _frames_by_id(self, ids) -> dict[int, Frame]:
        """Frames of the store by their ids (in ascending id order)."""
        wanted = sorted(set(ids))
        out: dict[int, Frame] = {}
        for lo in range(0, len(wanted), 500):
            names = {f"f{i}": fid for i, fid in enumerate(wanted[lo:lo + 500])}
            q = f"SELECT id, filename, line, name FROM frames WHERE id IN ({', '.join(':' + k for k in names)}) ORDER BY id"
            out.update({fid: Frame(f, line, name) for fid, f, line, name in self._rows(q, **names)})
        return dict(sorted(out.items()))

    # -- the recorded final state ----------------------------------------------------------------------
    def final_segments(self, sid: int, device: int | None = None) -> list[Segment]:
        """The segments and blocks the file recorded, of one device or all, in their stored order."""
        where, params = "snapshot_id = :sid", {"sid": sid}
        if device is not None:
            where, params = where + " AND device = :device", {**params, "device": device}
        blocks: dict[tuple[int, int], list[Block]] = {}
        for dev, so, addr, size, req, state, stack in self._rows(
                f"SELECT device, segment_ord, address, size, requested_size, state, stack FROM blocks WHERE {where} "
                "ORDER BY device, segment_ord, ord", **params):
            blocks.setdefault((dev, so), []).append(Block(addr, size, req, BlockState(state), stack))
        return [Segment(dev, addr, total, stream, pool, tuple(blocks.get((dev, so), ())),
                        None if pa is None else (pa, pb), None if exp is None else bool(exp), stack)
                for dev, so, addr, total, stream, pool, pa, pb, exp, stack in self._rows(
                    f"SELECT device, ord, address, total_size, stream, pool, pool_id_a, pool_id_b, is_expandable, stack "
                    f"FROM segments WHERE {where} ORDER BY device, ord", **params)]

    # -- columns ---------------------------------------------------------------------------------------
    def trace_chunks(self, sid: int, device: int, first: int = 0, last: int | None = None) -> list[dict]:
        """The trace's columns in chunks first..last (CHUNK_EVENTS events each), decoded."""
        rows = self._rows("SELECT data FROM trace_chunks WHERE snapshot_id = :sid AND device = :device "
                          "AND chunk >= :first AND chunk <= :last ORDER BY chunk", sid=sid, device=device,
                          first=first, last=(1 << 62) if last is None else last)
        return [decode_columns(r[0]) for r in rows]

    def series_chunks(self, sid: int, device: int, first: int = 0, last: int | None = None) -> list[dict]:
        """The replay's per-state series in chunks first..last (CHUNK_EVENTS states each), decoded."""
        rows = self._rows("SELECT data FROM series_chunks WHERE snapshot_id = :sid AND device = :device "
                          "AND chunk >= :first AND chunk <= :last ORDER BY chunk", sid=sid, device=device,
                          first=first, last=(1 << 62) if last is None else last)
        return [decode_columns(r[0]) for r in rows]

    def series(self, sid: int, device: int) -> dict[str, np.ndarray]:
        chunks = self.series_chunks(sid, device)
        if not chunks:
            raise NotFoundError(f"{self.path}: snapshot {sid} has no device {device}")
        return {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}

    def lod_buckets(self, sid: int, device: int) -> list[int]:
        return [r[0] for r in self._rows("SELECT bucket FROM series_lod WHERE snapshot_id = :sid AND device = :device",
                                         sid=sid, device=device)]

    def lod(self, sid: int, device: int, bucket: int) -> dict[str, np.ndarray]:
        """The series summarised per bucket of `bucket` states (min and max of each figure); cached per thread."""
        key = (sid, device, bucket)
        cache = getattr(self._local, "lod", None)
        if cache is None:
            cache = self._local.lod = {}
        if key not in cache:
            row = self._one("SELECT data FROM series_lod WHERE snapshot_id = :sid AND device = :device "
                            "AND bucket = :bucket", sid=sid, device=device, bucket=bucket)
            if row is None:
                raise NotFoundError(f"{self.path}: snapshot {sid} device {device} has no level of detail {bucket}")
            if len(cache) > LOD_CACHE:
                cache.clear()
            cache[key] = decode_columns(row[0])
        return cache[key]

    def allocations(self, sid: int, device: int) -> dict[str, np.ndarray] | None:
        """The stored lifetimes' columns (fragviz.usage.lifetimes), or None for a snapshot stored before them."""
        row = self._one("SELECT data FROM allocations WHERE snapshot_id = :sid AND device = :device",
                        sid=sid, device=device)
        return None if row is None else decode_columns(row[0])

    def checkpoint(self, sid: int, device: int, event: int) -> dict[str, np.ndarray] | None:
        row = self._one("SELECT data FROM checkpoints WHERE snapshot_id = :sid AND device = :device AND event = :event",
                        sid=sid, device=device, event=event)
        return decode_columns(row[0]) if row else None

    def stale_snapshots(self) -> list[int]:
        """Snapshots whose figures were stored before schema version 5 (fragviz.library.upgrade brings them up to date)."""
        return [r[0] for r in self._rows("SELECT snapshot_id FROM stale_figures ORDER BY snapshot_id")]

    def checkpoint_events(self, sid: int, device: int) -> set[int]:
        return {r[0] for r in self._rows("SELECT event FROM checkpoints WHERE snapshot_id = :sid AND device = :device",
                                         sid=sid, device=device)}


def _row(r: tuple) -> SnapshotRow:
    sid, name, digest, size, added, warnings, summary = r
    record = Summary.from_json(summary)
    return SnapshotRow(sid, name, digest, size, added, [d.device for d in record.devices], json.loads(warnings),
                       record)


def _loads(value: str | None) -> Any:
    return None if value is None else json.loads(value)
