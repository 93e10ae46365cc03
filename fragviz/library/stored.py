"""A replayed snapshot to and from the store's records.

`record_of` turns an analysis into the record the store writes (its trace, series, level-of-detail tables,
checkpoints and lifetimes as columnar chunks). `load_analysis` and `device_state` rebuild a snapshot, or one
past state, from what a store gives back through `StoredTrace` (fragviz.store.reader.Library implements
it): one checkpoint and one chunk of trace, then at most CHUNK_EVENTS events replayed.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Iterator, Protocol

import numpy as np

from fragviz.allocator.config import settings_from_snapshot
from fragviz.replay.analysis import Analysis
from fragviz.model.columns import encode_columns
from fragviz.base.errors import UsageError
from fragviz.model.lod import bucket_sizes, per_event, summarise
from fragviz.model.metrics import StateFigures, state_figures
from fragviz.model import Frame, Segment, Snapshot, Trace, empty_trace
from fragviz.replay import DeviceReplay, checkpoint_before, restore_layout
from fragviz.replay.engine import CHECKPOINT_EVERY
from fragviz.replay.layout import default_sizer
from fragviz.replay.lives import Lives, state_lives
from fragviz.replay.state import layout_segments
from fragviz.store.records import DeviceInfo, DeviceRecord, SnapshotRecord, Summary

CHUNK_EVENTS = CHECKPOINT_EVERY  # events per stored trace chunk: one checkpoint and one chunk rebuild any state
TRACE_COLUMNS = ("action", "addr", "size", "stream", "time_us", "stack", "compile_context", "user_metadata")


class StoredTrace(Protocol):
    """What rebuilding a stored snapshot reads (the store's reader implements it)."""

    def snapshot_meta(self, sid: int) -> dict: ...
    def devices(self, sid: int) -> dict[int, DeviceInfo]: ...
    def device_info(self, sid: int, device: int) -> DeviceInfo: ...
    def stacks(self, sid: int) -> tuple[tuple[Frame, ...], tuple[tuple[int, ...], ...]]: ...
    def final_segments(self, sid: int, device: int | None = None) -> list[Segment]: ...
    def trace_chunks(self, sid: int, device: int, first: int = 0, last: int | None = None) -> list[dict]: ...
    def series(self, sid: int, device: int) -> dict[str, np.ndarray]: ...
    def checkpoint(self, sid: int, device: int, event: int) -> dict[str, np.ndarray] | None: ...
    def checkpoint_events(self, sid: int, device: int) -> set[int]: ...


# -- to the store ------------------------------------------------------------------------------------------

def record_of(analysis: Analysis, summary: Summary, content_hash: str, file_size: int) -> SnapshotRecord:
    """The store's record of an analysed snapshot; its chunks are encoded as the writer reads them."""
    snap = analysis.snapshot
    return SnapshotRecord(
        name=snap.source, content_hash=content_hash, file_size=file_size, format=snap.format.as_dict(),
        warnings=list(analysis.warnings), allocator_settings=snap.allocator_settings,
        external_annotations=snap.external_annotations, strings=tuple(snap.strings), provenance=snap.provenance,
        summary=summary, frames=tuple(snap.frames), stacks=tuple(snap.stacks),
        devices=tuple(_device_record(snap, analysis.replays[d]) for d in snap.devices()))


def _device_record(snap: Snapshot, replay: DeviceReplay) -> DeviceRecord:
    trace = replay.trace
    info = DeviceInfo(replay.device, len(trace), tuple(trace.action_names), replay.pre_trace_blocks,
                      replay.pre_trace_segments, list(replay.warnings))
    return DeviceRecord(
        info=info, segments=tuple(snap.segments_of(replay.device)),
        trace_chunks=_trace_chunks(trace, replay.block_size), series_chunks=_series_chunks(replay.series),
        series_lod=series_lod(replay),
        checkpoints=((event, encode_columns(cols)) for event, cols in replay.checkpoints.items()),
        allocations=lambda: encode_columns(replay.lifetimes().columns()))


def series_blobs(replay: DeviceReplay) -> tuple[Iterator[bytes], Iterator[tuple[int, bytes]]]:
    """The stored form of a replay's series: its chunks, and its level-of-detail tables (bucket, blob)."""
    return _series_chunks(replay.series), series_lod(replay)


def series_lod(replay: DeviceReplay) -> Iterator[tuple[int, bytes]]:
    figures = per_event(replay.series, replay.trace.time_us)
    return ((b, encode_columns(summarise(figures, b))) for b in bucket_sizes(len(figures["reserved"])))


def _trace_chunks(trace: Trace, block_size: np.ndarray) -> Iterator[bytes]:
    for lo in range(0, len(trace), CHUNK_EVENTS):
        hi = lo + CHUNK_EVENTS
        cols = {name: getattr(trace, name)[lo:hi] for name in TRACE_COLUMNS}
        cols["block_size"] = block_size[lo:hi]
        yield encode_columns(cols)


def _series_chunks(series: dict[str, np.ndarray]) -> Iterator[bytes]:
    n = len(next(iter(series.values())))
    for lo in range(0, n, CHUNK_EVENTS):
        yield encode_columns({k: v[lo:lo + CHUNK_EVENTS] for k, v in series.items()})


# -- from the store ----------------------------------------------------------------------------------------

def trace_from(device: int, chunks: list[dict], action_names: tuple[str, ...]) -> Trace:
    """A trace (or a run of it) from its stored chunks."""
    if not chunks:
        return empty_trace(device)
    cols = {name: np.concatenate([c[name] for c in chunks]) for name in TRACE_COLUMNS}
    return Trace(device=device, action_names=tuple(action_names), **cols)


def block_sizes_from(chunks: list[dict]) -> np.ndarray:
    return np.concatenate([c["block_size"] for c in chunks]) if chunks else np.zeros(0, np.int64)


def stored_trace(source: StoredTrace, sid: int, device: int) -> Trace:
    info = source.device_info(sid, device)
    return trace_from(device, source.trace_chunks(sid, device), info.action_names)


def load_analysis(source: StoredTrace, sid: int) -> Analysis:
    """The snapshot as ingested, with lazily loaded replays: reports from it equal reports of the file."""
    meta = source.snapshot_meta(sid)
    frames, stacks = source.stacks(sid)
    devices = source.devices(sid)
    chunks = {d: source.trace_chunks(sid, d) for d in devices}
    traces = {d: trace_from(d, chunks[d], info.action_names) for d, info in devices.items()}
    snap = Snapshot(
        source=meta["name"], format=meta["format"], segments=tuple(source.final_segments(sid)), traces=traces,
        frames=frames, stacks=stacks, strings=meta["strings"], allocator_settings=meta["allocator_settings"],
        external_annotations=meta["external_annotations"], warnings=meta["warnings"], provenance=meta["provenance"])
    alloc_settings = settings_from_snapshot(snap.allocator_settings)
    sizer = default_sizer(alloc_settings)
    replays = {d: DeviceReplay(d, traces[d], _LazySeries(source, sid, d), block_sizes_from(chunks[d]),
                               _LazyCheckpoints(source, sid, d), sizer, info.warnings, info.pre_trace_blocks,
                               info.pre_trace_segments)
               for d, info in devices.items()}
    return Analysis(snap, replays, alloc_settings, list(snap.warnings))


def device_state(source: StoredTrace, sid: int, device: int,
                 k: int | None = None) -> tuple[list[Segment], StateFigures, int]:
    """Segments and blocks of `device` after `k` events (the last event when None), and the event used.

    Reads one checkpoint and one trace chunk, then replays at most CHUNK_EVENTS events."""
    info = source.device_info(sid, device)
    n = info.trace_events
    k = n if k is None else k
    if not 0 <= k <= n:
        raise UsageError(f"event {k} is out of range for device {device} (its trace has {n} events)")
    if k == n:
        segments = source.final_segments(sid, device)
        return segments, state_figures(segments), k
    checkpoints = _LazyCheckpoints(source, sid, device)
    base = checkpoint_before(checkpoints, k)
    chunk = base // CHUNK_EVENTS
    cols = source.trace_chunks(sid, device, chunk, chunk + (k - base) // CHUNK_EVENTS)
    trace = trace_from(device, cols, info.action_names)
    layout = restore_layout(checkpoints, trace, block_sizes_from(cols), k, default_sizer(settings_from_snapshot(None)),
                            offset=chunk * CHUNK_EVENTS)
    segments = layout_segments(layout, device)
    return segments, state_figures(segments), k


def device_lives(source: StoredTrace, sid: int, device: int) -> Lives:
    """Every state of `device` as lives (fragviz.replay.lives), each one what `device_state` gives."""
    info = source.device_info(sid, device)
    chunks = source.trace_chunks(sid, device)
    trace = trace_from(device, chunks, info.action_names)
    return state_lives(source.final_segments(sid, device), trace, block_sizes_from(chunks),
                       _LazyCheckpoints(source, sid, device), default_sizer(settings_from_snapshot(None)), device)


class _LazyCheckpoints(Mapping):
    def __init__(self, source: StoredTrace, sid: int, device: int) -> None:
        self._source, self._sid, self._device = source, sid, device
        self._cache: dict[int, dict[str, np.ndarray]] = {}
        self._events: set[int] | None = None

    def _keys(self) -> set[int]:
        if self._events is None:
            self._events = self._source.checkpoint_events(self._sid, self._device)
        return self._events

    def __getitem__(self, event: int) -> dict[str, np.ndarray]:
        if event not in self._cache:
            cols = self._source.checkpoint(self._sid, self._device, event)
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
    def __init__(self, source: StoredTrace, sid: int, device: int) -> None:
        self._source, self._sid, self._device = source, sid, device
        self._data: dict[str, np.ndarray] | None = None

    def _load(self) -> dict[str, np.ndarray]:
        if self._data is None:
            self._data = self._source.series(self._sid, self._device)
        return self._data

    def __getitem__(self, key: str) -> np.ndarray:
        return self._load()[key]

    def __iter__(self):
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())
