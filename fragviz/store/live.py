"""Live recordings in the store: attachments, their samples, events and latest segments.

Records in, records out: `LiveRecorder` writes (one per poller thread, each write its own short
transaction), `LiveReader` reads; both through a Store (fragviz.store.engine).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable

from sqlalchemy import Connection

from fragviz.model import Block, BlockState, Segment
from fragviz.store import schema as tables
from fragviz.store.engine import Store

LIVE_WINDOW = 15.0  # seconds without a sample after which an attachment no longer counts as live

# stats key -> live_samples column, in table order after (t, device, pid, gap)
SAMPLE_FIELDS = (("allocated_bytes", "allocated"), ("requested_bytes", "requested"), ("reserved_bytes", "reserved"),
                 ("active_bytes", "active"), ("inactive_split_bytes", "inactive_split"),
                 ("num_alloc_retries", "alloc_retries"), ("num_ooms", "ooms"),
                 ("device_total_bytes", "device_total"), ("device_free_bytes", "device_free"),
                 ("nvml_used_bytes", "nvml_used"), ("largest_free_block", "largest_free"),
                 ("fragmentation", "fragmentation"), ("non_releasable_bytes", "non_releasable"))
SAMPLE_COLUMNS = ("id", "t", "device", "pid", "gap") + tuple(c for _, c in SAMPLE_FIELDS)


@dataclass(frozen=True)
class Attachment:
    id: int
    target: str
    owner: str
    pid: int | None
    simulated: bool | None
    rank: int | None
    started_at: float
    last_seen: float | None
    ended_at: float | None

    def is_live(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        return self.ended_at is None and self.last_seen is not None and now - self.last_seen < LIVE_WINDOW

    @property
    def label(self) -> str:
        rank = f"rank {self.rank} · " if self.rank is not None else ""
        pid = f"pid {self.pid} · " if self.pid is not None else ""
        sim = " · simulated" if self.simulated else ""
        return f"{rank}{self.target} · {pid}#{self.id}{sim}"


@dataclass(frozen=True)
class LiveEvent:
    id: int
    attachment_id: int
    t: float
    kind: str  # disconnected, reconnected, restarted, oom, snapshot, refused
    detail: str
    snapshot_id: int | None


class LiveRecorder:
    """The poller's writes. Each call is one short transaction (the dashboard's writer shares the store)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _write(self, fn: Callable[[Connection], Any]) -> Any:
        with self.store.writing() as conn:
            return fn(conn)

    def open_attachment(self, target: str, owner: str) -> int:
        return self._write(lambda c: int(c.execute(tables.live_attachments.insert().values(
            target=target, owner=owner, started_at=time.time()).returning(tables.live_attachments.c.id)).scalar_one()))

    def record(self, aid: int, stats: dict[str, Any], gap: bool) -> None:
        """One poll: a row per device, and the attachment's pid, rank and last_seen brought up to date."""
        rows = [{"attachment_id": aid, "t": stats["time"], "device": d["device"], "pid": stats["pid"], "gap": int(gap),
                 **{column: _cell(d.get(key)) for key, column in SAMPLE_FIELDS}} for d in stats["devices"]]

        def write(c: Connection) -> None:
            if rows:
                c.execute(tables.live_samples.insert(), rows)
            c.execute(tables.live_attachments.update().where(tables.live_attachments.c.id == aid).values(
                pid=stats["pid"], simulated=int(bool(stats.get("simulated"))), rank=stats.get("rank"),
                last_seen=time.time()))
        self._write(write)

    def event(self, aid: int, kind: str, detail: str = "", snapshot_id: int | None = None,
              t: float | None = None) -> None:
        self._write(lambda c: c.execute(tables.live_events.insert().values(
            attachment_id=aid, t=time.time() if t is None else t, kind=kind, detail=detail,
            snapshot_id=snapshot_id)))

    def state(self, aid: int, t: float, segments: list[dict[str, Any]]) -> None:
        by_device: dict[int, list] = {}
        for seg in segments:
            by_device.setdefault(int(seg.get("device", 0)), []).append(seg)

        def write(c: Connection) -> None:
            c.execute(tables.live_state.delete().where(tables.live_state.c.attachment_id == aid))
            if by_device:
                c.execute(tables.live_state.insert(), [{"attachment_id": aid, "device": dev, "t": t,
                                                   "segments": json.dumps(segs, separators=(",", ":"))}
                                                  for dev, segs in by_device.items()])
        self._write(write)

    def end(self, aid: int) -> None:
        self._write(lambda c: c.execute(tables.live_attachments.update().where(tables.live_attachments.c.id == aid).values(
            ended_at=time.time())))


def _cell(value: Any) -> Any:
    return None if value is None else (float(value) if isinstance(value, float) else int(value))


class LiveReader:
    """Reads live recordings from a store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _rows(self, sql: str, **params: Any) -> list[tuple]:
        return self.store.rows(sql, **params)

    def attachments(self) -> list[Attachment]:
        rows = self._rows("SELECT id, target, owner, pid, simulated, rank, started_at, last_seen, ended_at "
                          "FROM live_attachments ORDER BY id DESC")
        return [_attachment(r) for r in rows]

    def attachment(self, aid: int) -> Attachment | None:
        rows = self._rows("SELECT id, target, owner, pid, simulated, rank, started_at, last_seen, ended_at "
                          "FROM live_attachments WHERE id = :aid", aid=aid)
        return _attachment(rows[0]) if rows else None

    def samples(self, aid: int, after_id: int = 0, device: int | None = None) -> dict[str, list]:
        """Samples with id > after_id, as columns (SAMPLE_COLUMNS), oldest first."""
        sql = f"SELECT {', '.join(SAMPLE_COLUMNS)} FROM live_samples WHERE attachment_id = :aid AND id > :after"
        if device is not None:
            sql += " AND device = :device"
        rows = self._rows(sql + " ORDER BY id", aid=aid, after=after_id, device=device)
        return {name: [r[i] for r in rows] for i, name in enumerate(SAMPLE_COLUMNS)}

    def devices(self, aid: int) -> list[int]:
        return [r[0] for r in self._rows(
            "SELECT DISTINCT device FROM live_samples WHERE attachment_id = :aid ORDER BY device", aid=aid)]

    def events(self, aid: int, after_id: int = 0, kind: str | None = None) -> list[LiveEvent]:
        sql = ("SELECT id, attachment_id, t, kind, detail, snapshot_id FROM live_events WHERE attachment_id = :aid "
               "AND id > :after")
        if kind is not None:
            sql += " AND kind = :kind"
        return [LiveEvent(*r) for r in self._rows(sql + " ORDER BY id", aid=aid, after=after_id, kind=kind)]

    def latest_state(self, aid: int, device: int) -> tuple[float, list[Segment]] | None:
        """(time, segments) of the latest state recorded for this device, or None."""
        rows = self._rows("SELECT t, segments FROM live_state WHERE attachment_id = :aid AND device = :device",
                          aid=aid, device=device)
        return None if not rows else (rows[0][0], [_segment(s) for s in json.loads(rows[0][1])])

    def state_time(self, aid: int, device: int) -> float | None:
        """When the latest segments of this device were recorded (cheap: the segments are not read)."""
        rows = self._rows("SELECT t FROM live_state WHERE attachment_id = :aid AND device = :device",
                          aid=aid, device=device)
        return rows[0][0] if rows else None


def _segment(s: dict[str, Any]) -> Segment:
    blocks = tuple(Block(a, size, req, BlockState(state)) for a, size, req, state in s["blocks"])
    pool_id = tuple(s["pool_id"]) if s.get("pool_id") else None
    return Segment(s.get("device", 0), s["address"], s["total_size"], s.get("stream", 0), s.get("pool", "large"),
                   blocks, pool_id, s.get("is_expandable"))


def _attachment(r: tuple) -> Attachment:
    return Attachment(r[0], r[1], r[2], r[3], None if r[4] is None else bool(r[4]), r[5], r[6], r[7], r[8])
