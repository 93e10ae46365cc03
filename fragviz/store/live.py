"""Live recordings in the store: attachments, their samples, events and latest segments.

Records in, records out: `LiveRecorder` writes (one per poller thread, each write its own short
transaction), `LiveReader` reads through a connection it is handed (the StoreReader's, per thread).
"""
from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Any, Callable

from fragviz.model import Block, BlockState, Segment

LIVE_WINDOW = 15.0  # seconds without a sample after which an attachment no longer counts as live

# stats key -> live_samples column, in table order after (t, device, pid, gap)
SAMPLE_FIELDS = (("allocated_bytes", "allocated"), ("requested_bytes", "requested"), ("reserved_bytes", "reserved"),
                 ("active_bytes", "active"), ("inactive_split_bytes", "inactive_split"),
                 ("num_alloc_retries", "alloc_retries"), ("num_ooms", "ooms"),
                 ("device_total_bytes", "device_total"), ("device_free_bytes", "device_free"),
                 ("nvml_used_bytes", "nvml_used"), ("largest_free_block", "largest_free"),
                 ("fragmentation", "fragmentation"))
SAMPLE_COLUMNS = ("id", "t", "device", "pid", "gap") + tuple(c for _, c in SAMPLE_FIELDS)
_INSERT_SAMPLE = (f"INSERT INTO live_samples (attachment_id, {', '.join(SAMPLE_COLUMNS[1:])}) "
                  f"VALUES ({', '.join('?' * len(SAMPLE_COLUMNS))})")


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
    """The poller's writes. Each call is one short transaction (the dashboard's writer shares the file)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def _write(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            out = fn(self.conn)
            self.conn.execute("COMMIT")
            return out
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def open_attachment(self, target: str, owner: str) -> int:
        return self._write(lambda c: int(c.execute(
            "INSERT INTO live_attachments (target, owner, started_at) VALUES (?, ?, ?)",
            (target, owner, time.time())).lastrowid))

    def record(self, aid: int, stats: dict[str, Any], gap: bool) -> None:
        """One poll: a row per device, and the attachment's pid, rank and last_seen brought up to date."""
        rows = [(aid, stats["time"], d["device"], stats["pid"], int(gap), *(_cell(d.get(k)) for k, _ in SAMPLE_FIELDS))
                for d in stats["devices"]]

        def write(c: sqlite3.Connection) -> None:
            c.executemany(_INSERT_SAMPLE, rows)
            c.execute("UPDATE live_attachments SET pid = ?, simulated = ?, rank = ?, last_seen = ? WHERE id = ?",
                      (stats["pid"], int(bool(stats.get("simulated"))), stats.get("rank"), time.time(), aid))
        self._write(write)

    def event(self, aid: int, kind: str, detail: str = "", snapshot_id: int | None = None,
              t: float | None = None) -> None:
        self._write(lambda c: c.execute(
            "INSERT INTO live_events (attachment_id, t, kind, detail, snapshot_id) VALUES (?, ?, ?, ?, ?)",
            (aid, time.time() if t is None else t, kind, detail, snapshot_id)))

    def state(self, aid: int, t: float, segments: list[dict[str, Any]]) -> None:
        by_device: dict[int, list] = {}
        for seg in segments:
            by_device.setdefault(int(seg.get("device", 0)), []).append(seg)

        def write(c: sqlite3.Connection) -> None:
            c.execute("DELETE FROM live_state WHERE attachment_id = ?", (aid,))
            c.executemany("INSERT INTO live_state VALUES (?, ?, ?, ?)",
                          [(aid, dev, t, json.dumps(segs, separators=(",", ":"))) for dev, segs in by_device.items()])
        self._write(write)

    def end(self, aid: int) -> None:
        self._write(lambda c: c.execute("UPDATE live_attachments SET ended_at = ? WHERE id = ?", (time.time(), aid)))


def _cell(value: Any) -> Any:
    return None if value is None else (float(value) if isinstance(value, float) else int(value))


class LiveReader:
    """Reads live recordings through `conn()`, a callable giving this thread's read-only connection."""

    def __init__(self, conn: Callable[[], sqlite3.Connection]) -> None:
        self._conn = conn

    def attachments(self) -> list[Attachment]:
        rows = self._conn().execute("SELECT id, target, owner, pid, simulated, rank, started_at, last_seen, ended_at "
                                    "FROM live_attachments ORDER BY id DESC")
        return [_attachment(r) for r in rows]

    def attachment(self, aid: int) -> Attachment | None:
        r = self._conn().execute("SELECT id, target, owner, pid, simulated, rank, started_at, last_seen, ended_at "
                                 "FROM live_attachments WHERE id = ?", (aid,)).fetchone()
        return _attachment(r) if r else None

    def samples(self, aid: int, after_id: int = 0, device: int | None = None) -> dict[str, list]:
        """Samples with id > after_id, as columns (SAMPLE_COLUMNS), oldest first."""
        sql = f"SELECT {', '.join(SAMPLE_COLUMNS)} FROM live_samples WHERE attachment_id = ? AND id > ?"
        args: list[Any] = [aid, after_id]
        if device is not None:
            sql += " AND device = ?"
            args.append(device)
        rows = self._conn().execute(sql + " ORDER BY id", args).fetchall()
        return {name: [r[i] for r in rows] for i, name in enumerate(SAMPLE_COLUMNS)}

    def devices(self, aid: int) -> list[int]:
        return [r[0] for r in self._conn().execute(
            "SELECT DISTINCT device FROM live_samples WHERE attachment_id = ? ORDER BY device", (aid,))]

    def events(self, aid: int, after_id: int = 0, kind: str | None = None) -> list[LiveEvent]:
        sql = "SELECT id, attachment_id, t, kind, detail, snapshot_id FROM live_events WHERE attachment_id = ? AND id > ?"
        args: list[Any] = [aid, after_id]
        if kind is not None:
            sql += " AND kind = ?"
            args.append(kind)
        return [LiveEvent(*r) for r in self._conn().execute(sql + " ORDER BY id", args)]

    def latest_state(self, aid: int, device: int) -> tuple[float, list[Segment]] | None:
        """(time, segments) of the latest state recorded for this device, or None."""
        row = self._conn().execute("SELECT t, segments FROM live_state WHERE attachment_id = ? AND device = ?",
                                   (aid, device)).fetchone()
        return None if row is None else (row[0], [_segment(s) for s in json.loads(row[1])])

    def state_time(self, aid: int, device: int) -> float | None:
        """When the latest segments of this device were recorded (cheap: the segments are not read)."""
        row = self._conn().execute("SELECT t FROM live_state WHERE attachment_id = ? AND device = ?",
                                   (aid, device)).fetchone()
        return row[0] if row else None


def _segment(s: dict[str, Any]) -> Segment:
    blocks = tuple(Block(a, size, req, BlockState(state)) for a, size, req, state in s["blocks"])
    pool_id = tuple(s["pool_id"]) if s.get("pool_id") else None
    return Segment(s.get("device", 0), s["address"], s["total_size"], s.get("stream", 0), s.get("pool", "large"),
                   blocks, pool_id, s.get("is_expandable"))


def _attachment(r: tuple) -> Attachment:
    return Attachment(r[0], r[1], r[2], r[3], None if r[4] is None else bool(r[4]), r[5], r[6], r[7], r[8])
