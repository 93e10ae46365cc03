"""Read-only queries on the store, returning model objects and small records; one connection per thread."""
from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from fragviz.allocator.config import settings_from_snapshot
from fragviz.analysis import Analysis
from fragviz.columns import decode_columns
from fragviz.lod import choose_bucket, per_event
from fragviz.errors import NotFoundError, UsageError
from fragviz.metrics import StateFigures, state_figures
from fragviz.model import Block, BlockState, Frame, FormatInfo, Segment, Snapshot, Trace, empty_trace
from fragviz.replay import DeviceReplay, checkpoint_before, restore_layout
from fragviz.replay.layout import default_sizer
from fragviz.replay.state import layout_segments
from fragviz.store.live import LiveReader
from fragviz.store.records import Job, JobRank, Summary
from fragviz.store.schema import CHUNK_EVENTS, connect
from fragviz.store.writer import TRACE_COLUMNS
from fragviz.usage.lifetimes import Lifetimes


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


@dataclass(frozen=True)
class AnnotationSpan:
    """One record_function range from external_annotations, on the trace: states start_event..end_event, and
    its own times (end_us is the trace's last time where no END was recorded: closed is then False)."""
    name: str
    start_event: int
    end_event: int
    start_us: int
    end_us: int
    closed: bool = True


def pair_annotations(annotations: list, device: int) -> list[tuple[str, int, int | None]]:
    """(name, START time, END time or None) of each START on `device`, in START order; an END closes the latest
    open START of its name (record_function ranges nest). An END without a START is dropped."""
    spans: list[list] = []
    open_by_name: dict[str, list[int]] = {}
    timed = [a for a in annotations if isinstance(a, dict) and isinstance(a.get("time_us"), int)
             and a.get("device", device) == device]
    for a in sorted(timed, key=lambda a: a["time_us"]):
        name = str(a.get("name", ""))
        if a.get("stage") == "START":
            open_by_name.setdefault(name, []).append(len(spans))
            spans.append([name, a["time_us"], None])
        elif a.get("stage") == "END" and open_by_name.get(name):
            spans[open_by_name[name].pop()][2] = a["time_us"]
    return [tuple(s) for s in spans]


class StoreReader:
    """Read access to one store file. Safe to share between threads (each gets its own connection)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._local = threading.local()
        self._conn()  # fail early on a missing or foreign file
        self.live = LiveReader(self._conn)

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect(self.path, readonly=True)
        return conn

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- listing ---------------------------------------------------------------------------------------
    def list_snapshots(self) -> list[SnapshotRow]:
        rows = self._conn().execute(
            "SELECT id, name, content_hash, file_size, added_at, warnings, summary FROM snapshots ORDER BY id DESC")
        return [_row(r) for r in rows]

    def snapshot_row(self, sid: int) -> SnapshotRow:
        r = self._conn().execute("SELECT id, name, content_hash, file_size, added_at, warnings, summary "
                                 "FROM snapshots WHERE id = ?", (sid,)).fetchone()
        if r is None:
            raise NotFoundError(f"{self.path}: no snapshot with id {sid}")
        return _row(r)

    def snapshot_meta(self, sid: int) -> dict[str, Any]:
        """Format, allocator settings, annotations, provenance and warnings, without the traces."""
        row = self._conn().execute("SELECT format, allocator_settings, external_annotations, provenance, warnings "
                                   "FROM snapshots WHERE id = ?", (sid,)).fetchone()
        if row is None:
            raise NotFoundError(f"{self.path}: no snapshot with id {sid}")
        fmt = json.loads(row[0])
        return {"format": FormatInfo(**{**fmt, "features": tuple(fmt["features"])}),
                "allocator_settings": _loads(row[1]), "external_annotations": _loads(row[2]),
                "provenance": _loads(row[3]), "warnings": json.loads(row[4])}

    # -- jobs ------------------------------------------------------------------------------------------
    def jobs(self) -> list[Job]:
        """Every job, newest first, with its ranks."""
        rows = self._conn().execute("SELECT id FROM jobs ORDER BY id DESC").fetchall()
        return [self.job(r[0]) for r in rows]

    def job(self, job_id: int) -> Job:
        row = self._conn().execute("SELECT id, name, created_at FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"{self.path}: no job with id {job_id}")
        ranks = self._conn().execute("SELECT r.rank, r.snapshot_id, s.name FROM job_ranks r JOIN snapshots s "
                                     "ON s.id = r.snapshot_id WHERE r.job_id = ? ORDER BY r.rank", (job_id,))
        return Job(row[0], row[1], row[2], tuple(JobRank(*r) for r in ranks))

    def job_named(self, name: str) -> Job | None:
        row = self._conn().execute("SELECT id FROM jobs WHERE name = ?", (name,)).fetchone()
        return None if row is None else self.job(row[0])

    # -- whole snapshots -------------------------------------------------------------------------------
    def load_analysis(self, sid: int) -> Analysis:
        """The snapshot as ingested, with lazily loaded replays: reports from it equal reports of the file."""
        conn = self._conn()
        row = conn.execute("SELECT name, format, warnings, allocator_settings, external_annotations, strings, "
                           "provenance FROM snapshots WHERE id = ?", (sid,)).fetchone()
        if row is None:
            raise NotFoundError(f"{self.path}: no snapshot with id {sid}")
        name, fmt, warnings, settings, annotations, strings, provenance = row
        frames, stacks = self._stacks(sid)
        devices = self._devices(sid)
        traces = {d: self.trace(sid, d, info["action_names"]) for d, info in devices.items()}
        snap = Snapshot(
            source=name, format=FormatInfo(**{**json.loads(fmt), "features": tuple(json.loads(fmt)["features"])}),
            segments=tuple(self._final_segments(sid)), traces=traces, frames=frames, stacks=stacks,
            strings=tuple(json.loads(strings)), allocator_settings=_loads(settings),
            external_annotations=_loads(annotations), warnings=json.loads(warnings), provenance=_loads(provenance))
        alloc_settings = settings_from_snapshot(snap.allocator_settings)
        sizer = default_sizer(alloc_settings)
        replays = {}
        for d, info in devices.items():
            trace = traces[d]
            replays[d] = DeviceReplay(
                d, trace, _LazySeries(self, sid, d), self._block_sizes(sid, d), _LazyCheckpoints(self, sid, d),
                sizer, info["warnings"], info["pre_trace_blocks"], info["pre_trace_segments"])
        return Analysis(snap, replays, alloc_settings, list(snap.warnings))

    def _devices(self, sid: int) -> dict[int, dict[str, Any]]:
        rows = self._conn().execute("SELECT device, trace_events, action_names, pre_trace_blocks, "
                                    "pre_trace_segments, warnings FROM devices WHERE snapshot_id = ? ORDER BY device",
                                    (sid,))
        return {r[0]: {"trace_events": r[1], "action_names": tuple(json.loads(r[2])), "pre_trace_blocks": r[3],
                       "pre_trace_segments": r[4], "warnings": json.loads(r[5])} for r in rows}

    def _stacks(self, sid: int) -> tuple[tuple[Frame, ...], tuple[tuple[int, ...], ...]]:
        rows = self._conn().execute("SELECT ss.local_id, st.frame_ids FROM snapshot_stacks ss JOIN stacks st "
                                    "ON st.id = ss.stack_id WHERE ss.snapshot_id = ? ORDER BY ss.local_id", (sid,))
        raw = [np.frombuffer(blob, np.int64).tolist() for _, blob in rows]
        by_id = self._frames_by_id({f for ids in raw for f in ids})
        index = {fid: i for i, fid in enumerate(by_id)}
        return tuple(by_id.values()), tuple(tuple(index[f] for f in ids) for ids in raw)

    def _frames_by_id(self, ids) -> dict[int, Frame]:
        """Frames of the store by their ids (in ascending id order)."""
        wanted = sorted(set(ids))
        out: dict[int, Frame] = {}
        for chunk in range(0, len(wanted), 500):
            part = wanted[chunk:chunk + 500]
            q = f"SELECT id, filename, line, name FROM frames WHERE id IN ({','.join('?' * len(part))}) ORDER BY id"
            out.update({fid: Frame(f, line, name) for fid, f, line, name in self._conn().execute(q, part)})
        return out

    def _final_segments(self, sid: int) -> Iterator[Segment]:
        conn = self._conn()
        blocks: dict[tuple[int, int], list[Block]] = {}
        for dev, so, addr, size, req, state, stack in conn.execute(
                "SELECT device, segment_ord, address, size, requested_size, state, stack FROM blocks "
                "WHERE snapshot_id = ? ORDER BY device, segment_ord, ord", (sid,)):
            blocks.setdefault((dev, so), []).append(Block(addr, size, req, BlockState(state), stack))
        for dev, so, addr, total, stream, pool, pa, pb, exp, stack in conn.execute(
                "SELECT device, ord, address, total_size, stream, pool, pool_id_a, pool_id_b, is_expandable, stack "
                "FROM segments WHERE snapshot_id = ? ORDER BY device, ord", (sid,)):
            yield Segment(dev, addr, total, stream, pool, tuple(blocks.get((dev, so), ())),
                          None if pa is None else (pa, pb), None if exp is None else bool(exp), stack)

    # -- traces and series -----------------------------------------------------------------------------
    def _trace_chunks(self, sid: int, device: int, lo: int = 0, hi: int | None = None) -> list[dict]:
        hi = (1 << 62) if hi is None else hi
        rows = self._conn().execute("SELECT data FROM trace_chunks WHERE snapshot_id = ? AND device = ? "
                                    "AND chunk >= ? AND chunk <= ? ORDER BY chunk", (sid, device, lo, hi))
        return [decode_columns(r[0]) for r in rows]

    def trace(self, sid: int, device: int, action_names: tuple[str, ...]) -> Trace:
        return _trace_from(device, self._trace_chunks(sid, device), action_names)

    def _block_sizes(self, sid: int, device: int) -> np.ndarray:
        chunks = self._trace_chunks(sid, device)
        return np.concatenate([c["block_size"] for c in chunks]) if chunks else np.zeros(0, np.int64)

    def series(self, sid: int, device: int) -> dict[str, np.ndarray]:
        rows = self._conn().execute("SELECT data FROM series_chunks WHERE snapshot_id = ? AND device = ? "
                                    "ORDER BY chunk", (sid, device)).fetchall()
        chunks = [decode_columns(r[0]) for r in rows]
        if not chunks:
            raise NotFoundError(f"{self.path}: snapshot {sid} has no device {device}")
        return {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}

    def lifetimes(self, sid: int, device: int) -> Lifetimes:
        """Every allocation of a device's trace and the states it is live in (see fragviz.usage.lifetimes)."""
        n = self.trace_length(sid, device)
        row = self._conn().execute("SELECT data FROM allocations WHERE snapshot_id = ? AND device = ?",
                                   (sid, device)).fetchone()
        if row is None:  # stored by a fragviz before schema version 3: worked out from the stored trace
            return self.load_analysis(sid).replays[device].lifetimes()
        return Lifetimes.from_columns(decode_columns(row[0]), n + 1)

    def stacks(self, sid: int) -> tuple[tuple[Frame, ...], tuple[tuple[int, ...], ...]]:
        """A snapshot's frames and its stacks (frame indices, innermost first), numbered as its blocks refer to them."""
        return self._stacks(sid)

    def checkpoint(self, sid: int, device: int, event: int) -> dict[str, np.ndarray] | None:
        row = self._conn().execute("SELECT data FROM checkpoints WHERE snapshot_id = ? AND device = ? AND event = ?",
                                   (sid, device, event)).fetchone()
        return decode_columns(row[0]) if row else None

    # -- one past state, fast --------------------------------------------------------------------------
    def device_state(self, sid: int, device: int, k: int | None = None) -> tuple[list[Segment], StateFigures, int]:
        """Segments and blocks of `device` after `k` events (the last event when None), and the event used.

        Reads one checkpoint and one trace chunk, then replays at most CHUNK_EVENTS events.
        """
        devices = self._devices(sid)
        if device not in devices:
            self.snapshot_row(sid)
            raise NotFoundError(f"{self.path}: snapshot {sid} has no device {device}")
        n = devices[device]["trace_events"]
        k = n if k is None else k
        if not 0 <= k <= n:
            raise UsageError(f"event {k} is out of range for device {device} (its trace has {n} events)")
        if k == n:
            segments = [s for s in self._final_segments(sid) if s.device == device]
            return segments, state_figures(segments), k
        checkpoints = _LazyCheckpoints(self, sid, device)
        base = checkpoint_before(checkpoints, k)
        chunk = base // CHUNK_EVENTS
        cols = self._trace_chunks(sid, device, chunk, chunk + (k - base) // CHUNK_EVENTS)
        trace = _trace_from(device, cols, devices[device]["action_names"])
        sizes = np.concatenate([c["block_size"] for c in cols]) if cols else np.zeros(0, np.int64)
        layout = restore_layout(checkpoints, trace, sizes, k, default_sizer(settings_from_snapshot(None)),
                                offset=chunk * CHUNK_EVENTS)
        segments = layout_segments(layout, device)
        return segments, state_figures(segments), k


    # -- what the dashboard draws ----------------------------------------------------------------------
    def trace_length(self, sid: int, device: int) -> int:
        devices = self._devices(sid)
        if device not in devices:
            self.snapshot_row(sid)
            raise NotFoundError(f"{self.path}: snapshot {sid} has no device {device}")
        return devices[device]["trace_events"]

    def timeline(self, sid: int, device: int, lo: int = 0, hi: int | None = None,
                 max_points: int = 2000) -> dict[str, Any]:
        """Figures over states lo..hi: raw where few enough, else min/max per bucket (key "bucket" says which)."""
        n = self.trace_length(sid, device)
        hi = n if hi is None else min(max(hi, 0), n)
        lo = min(max(lo, 0), hi)
        buckets = [r[0] for r in self._conn().execute(
            "SELECT bucket FROM series_lod WHERE snapshot_id = ? AND device = ?", (sid, device))]
        bucket = choose_bucket(lo, hi, max_points, buckets)
        if bucket == 1:
            first, last = lo // CHUNK_EVENTS, hi // CHUNK_EVENTS
            rows = self._conn().execute("SELECT chunk, data FROM series_chunks WHERE snapshot_id = ? AND device = ? "
                                        "AND chunk >= ? AND chunk <= ? ORDER BY chunk", (sid, device, first, last))
            chunks = [decode_columns(r[1]) for r in rows]
            series = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
            figures = per_event(series)
            base = first * CHUNK_EVENTS
            out: dict[str, Any] = {"bucket": 1, "start": np.arange(lo, hi + 1)}
            for name, values in figures.items():
                out[name + "_min"] = out[name + "_max"] = values[lo - base:hi - base + 1]
            times = self._times(sid, device, lo, hi)
            if times is not None:
                out["time_us_min"] = times
            return self._with_t0(sid, device, out)
        cols = self._lod(sid, device, bucket)
        i, j = lo // bucket, hi // bucket + 1
        return self._with_t0(sid, device, {"bucket": bucket, **{k: v[i:j] for k, v in cols.items()}})

    def _with_t0(self, sid: int, device: int, out: dict[str, Any]) -> dict[str, Any]:
        if "time_us_min" in out:
            first = self._trace_chunks(sid, device, 0, 0)
            out["t0_us"] = int(first[0]["time_us"][0]) if first else None
        return out

    def _lod(self, sid: int, device: int, bucket: int) -> dict[str, np.ndarray]:
        key = (sid, device, bucket)
        cache = getattr(self._local, "lod", None)
        if cache is None:
            cache = self._local.lod = {}
        if key not in cache:
            row = self._conn().execute("SELECT data FROM series_lod WHERE snapshot_id = ? AND device = ? AND bucket = ?",
                                       key).fetchone()
            if len(cache) > 16:
                cache.clear()
            cache[key] = decode_columns(row[0])
        return cache[key]

    def _times(self, sid: int, device: int, lo: int, hi: int) -> np.ndarray | None:
        first, last = max(0, lo - 1) // CHUNK_EVENTS, max(0, hi - 1) // CHUNK_EVENTS
        chunks = self._trace_chunks(sid, device, first, last)
        if not chunks:
            return None
        times = np.concatenate([c["time_us"] for c in chunks])
        if (times < 0).any():
            return None
        base = first * CHUNK_EVENTS
        idx = np.clip(np.arange(lo, hi + 1) - 1, 0, None) - base
        return times[np.clip(idx, 0, len(times) - 1)]

    def markers(self, sid: int, device: int, limit: int = 5000) -> dict[str, list[int]]:
        """Event indices of OOMs, device allocations and releases, and `snapshot` actions (at most `limit` each).
        Annotations are spans: see annotation_spans."""
        devices = self._devices(sid)
        names = devices[device]["action_names"] if device in devices else ()
        trace = self.trace(sid, device, names)
        kinds = {"oom": ("oom",), "segment_alloc": ("segment_alloc", "segment_map"),
                 "segment_free": ("segment_free", "segment_unmap"), "snapshot": ("snapshot",)}
        out: dict[str, list[int]] = {}
        for kind, actions in kinds.items():
            codes = [names.index(a) for a in actions if a in names]
            hits = np.nonzero(np.isin(trace.action, codes))[0] if codes else np.zeros(0, np.int64)
            if len(hits) > limit:
                hits = hits[np.linspace(0, len(hits) - 1, limit).astype(np.int64)]
            out[kind] = (hits + 1).tolist()  # the state right after the event
        return out

    def annotation_spans(self, sid: int, device: int) -> list[AnnotationSpan]:
        """external_annotations (record_function START/END pairs) of one device as spans placed on the trace
        by their time; empty where the trace has no times."""
        devices = self._devices(sid)
        names = devices[device]["action_names"] if device in devices else ()
        trace = self.trace(sid, device, names)
        pairs = pair_annotations(self.snapshot_meta(sid)["external_annotations"] or [], device)
        if not pairs or not trace.has_time:
            return []
        times = np.maximum.accumulate(trace.time_us)  # an event without a time takes the one before it
        ends = [int(times[-1]) if end is None else end for _, _, end in pairs]
        # the state before the first event at or after each time: the events strictly before it
        first = np.searchsorted(times, [start for _, start, _ in pairs]).tolist()
        last = np.searchsorted(times, ends).tolist()
        return [AnnotationSpan(name, a, max(a, b), start, end, closed is not None)
                for (name, start, closed), a, b, end in zip(pairs, first, last, ends)]

    def stack_frames(self, sid: int, local_stack: int) -> list[Frame]:
        """The frames (innermost first) of one of a snapshot's stacks."""
        if local_stack < 0:
            return []
        row = self._conn().execute("SELECT st.frame_ids FROM snapshot_stacks ss JOIN stacks st ON st.id = ss.stack_id "
                                   "WHERE ss.snapshot_id = ? AND ss.local_id = ?", (sid, local_stack)).fetchone()
        if row is None:
            return []
        ids = np.frombuffer(row[0], np.int64).tolist()
        frames = self._frames_by_id(ids)
        return [frames[i] for i in ids]


def _trace_from(device: int, chunks: list[dict], action_names: tuple[str, ...]) -> Trace:
    if not chunks:
        return empty_trace(device)
    cols = {name: np.concatenate([c[name] for c in chunks]) for name in TRACE_COLUMNS}
    return Trace(device=device, action_names=tuple(action_names), **cols)


class _LazyCheckpoints(Mapping):
    def __init__(self, reader: StoreReader, sid: int, device: int) -> None:
        self._reader, self._sid, self._device = reader, sid, device
        self._cache: dict[int, dict[str, np.ndarray]] = {}
        self._events: set[int] | None = None

    def _keys(self) -> set[int]:
        if self._events is None:
            rows = self._reader._conn().execute(
                "SELECT event FROM checkpoints WHERE snapshot_id = ? AND device = ?", (self._sid, self._device))
            self._events = {r[0] for r in rows}
        return self._events

    def __getitem__(self, event: int) -> dict[str, np.ndarray]:
        if event not in self._cache:
            cols = self._reader.checkpoint(self._sid, self._device, event)
            if cols is None:
                raise KeyError(event)
            self._cache[event] = cols
        return self._cache[event]

    def __contains__(self, event: object) -> bool:
        return event in self._keys()

    def __iter__(self):
        return iter(sorted(self._keys()))

    def __len__(self) -> int:
        return len(self._keys())


class _LazySeries(Mapping):
    def __init__(self, reader: StoreReader, sid: int, device: int) -> None:
        self._reader, self._sid, self._device = reader, sid, device
        self._data: dict[str, np.ndarray] | None = None

    def _load(self) -> dict[str, np.ndarray]:
        if self._data is None:
            self._data = self._reader.series(self._sid, self._device)
        return self._data

    def __getitem__(self, key: str) -> np.ndarray:
        return self._load()[key]

    def __iter__(self):
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())


def _row(r: tuple) -> SnapshotRow:
    sid, name, digest, size, added, warnings, summary = r
    record = Summary.from_json(summary)
    return SnapshotRow(sid, name, digest, size, added, [d.device for d in record.devices], json.loads(warnings),
                       record)


def _loads(value: str | None) -> Any:
    return None if value is None else json.loads(value)
