"""The library: a store's snapshots with their past states rebuilt, what the dashboard and the CLI read.

The store (fragviz.store) stores and fetches records; the replay (fragviz.library.stored) rebuilds states from
them; this is where the two meet, with the figures the timeline draws from the stored series. The web layer
reads only through a Library and never sees a connection.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from fragviz.replay.analysis import Analysis
from fragviz.model.lod import Timeline, choose_bucket, per_event
from fragviz.model.metrics import StateFigures
from fragviz.model import Frame, Segment, Trace
from fragviz.library import stored
from fragviz.library.stored import CHUNK_EVENTS
from fragviz.replay.lives import Lives
from fragviz.store.engine import Store
from fragviz.store.live import LiveReader
from fragviz.store.reader import SnapshotRow, StoreReader
from fragviz.store.records import Job
from fragviz.library.upgrade import refresh_stale
from fragviz.usage.lifetimes import Lifetimes


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


class Library:
    """Read access to a store's snapshots, jobs and live recordings. Safe to share between threads."""

    def __init__(self, records: StoreReader) -> None:
        self.records = records
        self.path = records.path  # what messages call the store
        self.live: LiveReader = records.live

    @classmethod
    def open(cls, target: str | Store, progress: Callable[[int, int], None] | None = None) -> "Library":
        """The library of the store at `target`: a SQLite path, a postgresql:// URL, or an open Store.

        Snapshots stored before the figures they keep changed meaning are brought up to date first
        (fragviz.library.upgrade); `progress(done, total)` follows that."""
        library = cls(StoreReader(target))
        refresh_stale(library.records, progress)
        return library

    def close(self) -> None:
        self.records.close()

    # -- records, as stored ----------------------------------------------------------------------------
    def list_snapshots(self) -> list[SnapshotRow]:
        return self.records.list_snapshots()

    def snapshot_row(self, sid: int) -> SnapshotRow:
        return self.records.snapshot_row(sid)

    def snapshot_meta(self, sid: int) -> dict[str, Any]:
        return self.records.snapshot_meta(sid)

    def jobs(self) -> list[Job]:
        return self.records.jobs()

    def job(self, job_id: int) -> Job:
        return self.records.job(job_id)

    def job_named(self, name: str) -> Job | None:
        return self.records.job_named(name)

    def trace_length(self, sid: int, device: int) -> int:
        return self.records.trace_length(sid, device)

    def series(self, sid: int, device: int) -> dict[str, np.ndarray]:
        return self.records.series(sid, device)

    def stacks(self, sid: int) -> tuple[tuple[Frame, ...], tuple[tuple[int, ...], ...]]:
        return self.records.stacks(sid)

    def stack_frames(self, sid: int, local_stack: int) -> list[Frame]:
        return self.records.stack_frames(sid, local_stack)

    def checkpoint(self, sid: int, device: int, event: int) -> dict[str, np.ndarray] | None:
        return self.records.checkpoint(sid, device, event)

    # -- rebuilt ---------------------------------------------------------------------------------------
    def load_analysis(self, sid: int) -> Analysis:
        """The snapshot as ingested, with lazily loaded replays: reports from it equal reports of the file."""
        return stored.load_analysis(self.records, sid)

    def trace(self, sid: int, device: int) -> Trace:
        return stored.stored_trace(self.records, sid, device)

    def device_state(self, sid: int, device: int, k: int | None = None) -> tuple[list[Segment], StateFigures, int]:
        """Segments and blocks of `device` after `k` events (the last event when None), and the event used."""
        return stored.device_state(self.records, sid, device, k)

    def device_lives(self, sid: int, device: int) -> Lives:
        """Every state of a device's trace at once, as segment and block lives (fragviz.replay.lives)."""
        return stored.device_lives(self.records, sid, device)

    def lifetimes(self, sid: int, device: int) -> Lifetimes:
        """Every allocation of a device's trace and the states it is live in (see fragviz.usage.lifetimes)."""
        n = self.trace_length(sid, device)
        columns = self.records.allocations(sid, device)
        if columns is None:  # stored by a fragviz before schema version 3: worked out from the stored trace
            return self.load_analysis(sid).replays[device].lifetimes()
        return Lifetimes.from_columns(columns, n + 1)

    # -- what the dashboard draws ----------------------------------------------------------------------
    def timeline(self, sid: int, device: int, lo: int = 0, hi: int | None = None,
                 max_points: int = 2000) -> Timeline:
        """Figures over states lo..hi: raw where few enough, else min/max per bucket (its `bucket` says which)."""
        n = self.trace_length(sid, device)
        hi = n if hi is None else min(max(hi, 0), n)
        lo = min(max(lo, 0), hi)
        bucket = choose_bucket(lo, hi, max_points, self.records.lod_buckets(sid, device))
        if bucket == 1:
            return self._with_t0(sid, device, self._states(sid, device, lo, hi))
        cols = self.records.lod(sid, device, bucket)
        i, j = lo // bucket, hi // bucket + 1
        return self._with_t0(sid, device, Timeline.from_columns(bucket, {k: v[i:j] for k, v in cols.items()}))

    def _states(self, sid: int, device: int, lo: int, hi: int) -> Timeline:
        first, last = lo // CHUNK_EVENTS, hi // CHUNK_EVENTS
        chunks = self.records.series_chunks(sid, device, first, last)
        figures = per_event({k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]})
        base = first * CHUNK_EVENTS
        values = {name: v[lo - base:hi - base + 1] for name, v in figures.items()}
        return Timeline(1, np.arange(lo, hi + 1), values, values, self._times(sid, device, lo, hi))

    def _with_t0(self, sid: int, device: int, timeline: Timeline) -> Timeline:
        if timeline.time_us is None:
            return timeline
        first = self.records.trace_chunks(sid, device, 0, 0)
        return replace(timeline, t0_us=int(first[0]["time_us"][0]) if first else None)

    def _times(self, sid: int, device: int, lo: int, hi: int) -> np.ndarray | None:
        first, last = max(0, lo - 1) // CHUNK_EVENTS, max(0, hi - 1) // CHUNK_EVENTS
        chunks = self.records.trace_chunks(sid, device, first, last)
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
        devices = self.records.devices(sid)
        names = devices[device].action_names if device in devices else ()
        trace = self.trace(sid, device) if device in devices else None
        kinds = {"oom": ("oom",), "segment_alloc": ("segment_alloc", "segment_map"),
                 "segment_free": ("segment_free", "segment_unmap"), "snapshot": ("snapshot",)}
        out: dict[str, list[int]] = {}
        for kind, actions in kinds.items():
            codes = [names.index(a) for a in actions if a in names]
            hits = np.nonzero(np.isin(trace.action, codes))[0] if codes and trace is not None else np.zeros(0, np.int64)
            if len(hits) > limit:
                hits = hits[np.linspace(0, len(hits) - 1, limit).astype(np.int64)]
            out[kind] = (hits + 1).tolist()  # the state right after the event
        return out

    def annotation_spans(self, sid: int, device: int) -> list[AnnotationSpan]:
        """external_annotations (record_function START/END pairs) of one device as spans placed on the trace
        by their time; empty where the trace has no times."""
        if device not in self.records.devices(sid):
            return []
        trace = self.trace(sid, device)
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
