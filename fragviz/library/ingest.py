"""Ingest: file -> safe load -> parse -> replay -> store, one transaction per file."""
from __future__ import annotations

import os
import re
import traceback
from dataclasses import dataclass
from typing import Callable

from fragviz.replay.analysis import analyze
from fragviz.replay.files import gc_paused
from fragviz.base.errors import INTERNAL_ERROR_STATUS, FragvizError, StoreBusyError, StoreError
from fragviz.base.limits import Limits
from fragviz.snapshot.loader import RawSnapshot, content_hash, decode_bytes, decode_file, file_digest
from fragviz.base.units import cut
from fragviz.snapshot.parse import parse_snapshot
from fragviz.replay.preview import DevicePreview, columns_preview
from fragviz.library.stored import record_of
from fragviz.store.engine import Store
from fragviz.store.writer import find_by_hash, write_snapshot
from fragviz.library.summaries import summary_of

PhaseFn = Callable[[str], None]
PreviewFn = Callable[[list[DevicePreview]], None]
MAX_NAME = 255
# Control characters (CR, LF, NUL...), bidirectional overrides, and lone surrogates: never stored in a name
_UNSAFE_NAME_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
ProgressFn = Callable[[int, int], None]


def clean_name(name: str, basename: bool = False) -> str:
    """A snapshot's stored name: no control characters, at most MAX_NAME characters; an upload's, its base name."""
    if basename:
        name = re.split(r"[/\\]", name)[-1]
    name = _UNSAFE_NAME_CHARS.sub("_", name).strip()
    if len(name) > MAX_NAME:
        name = name[: MAX_NAME - 3] + "..."
    return name or "upload.pickle"


# What an ingest can come to, and the exit status of `fragviz ingest` for it (the worst of a batch wins)
EXIT_STATUS = {"ingested": 0, "unchanged": 0, "busy": 75, "store_error": 74, "error": 2,
               "internal_error": INTERNAL_ERROR_STATUS}


@dataclass(frozen=True)
class IngestResult:
    file: str
    id: int | None
    status: str  # a key of EXIT_STATUS: "error" is a bad file, "busy" a store to try again later
    error: str | None = None
    detail: str | None = None  # the traceback of an internal error (shown with --debug)

    def as_dict(self) -> dict:
        return {"file": self.file, "id": self.id, "status": self.status, "error": self.error}


def ingest_file(store: Store, path: str, name: str | None = None, phase: PhaseFn | None = None,
                progress: ProgressFn | None = None, limits: Limits | None = None,
                preview: PreviewFn | None = None) -> IngestResult:
    """Ingest the file at `path`; errors come back as a result, and leave the store as it was. `phase` hears
    each step's name, `progress` the replay's events done, `preview` the first picture as soon as the trace is
    parsed (fragviz.replay.preview), long before the rest is ready."""
    source = clean_name(name or path)
    try:
        limits = limits or Limits.current()
    except FragvizError as exc:
        return IngestResult(source, None, "error", str(exc))
    return _guarded(store, lambda: file_digest(path, source, limits),
                    lambda digest: decode_file(path, source, digest, limits), source, phase, progress, limits, preview)


def ingest_bytes(store: Store, data: bytes, source: str, phase: PhaseFn | None = None,
                 progress: ProgressFn | None = None, limits: Limits | None = None) -> IngestResult:
    """Ingest a snapshot held in memory under the name `source`."""
    source = clean_name(source)
    try:
        limits = limits or Limits.current()
    except FragvizError as exc:
        return IngestResult(source, None, "error", str(exc))
    return _guarded(store, lambda: content_hash(data), lambda digest: decode_bytes(data, source, digest, limits),
                    source, phase, progress, limits)


def _guarded(store: Store, digest: Callable[[], str], decode: Callable[[str], RawSnapshot], source: str,
             phase: PhaseFn | None, progress: ProgressFn | None, limits: Limits,
             preview: PreviewFn | None = None) -> IngestResult:
    try:
        with gc_paused():
            return _ingest(store, source, digest, decode, phase or (lambda _: None), progress, limits, preview)
    except StoreBusyError:
        return IngestResult(source, None, "busy", f"{source}: the store is busy with another writer; try again")
    except StoreError as exc:  # the store's words name the store; these name the file too
        return IngestResult(source, None, "store_error", f"{source}: {exc}")
    except FragvizError as exc:
        return IngestResult(source, None, "error", str(exc))
    except MemoryError:
        return IngestResult(source, None, "error", f"{source}: too large to ingest in the memory available")
    except Exception as exc:  # a bug must not take the other files of a batch down, nor leave a partial write
        return IngestResult(source, None, "internal_error",
                            f"{source}: could not be ingested: internal error ({type(exc).__name__}: "
                            f"{cut(str(exc))}); this is a fragviz bug, please report it",
                            traceback.format_exc())


def _ingest(store: Store, source: str, digest_of: Callable[[], str], decode: Callable[[str], RawSnapshot],
            phase: PhaseFn, progress: ProgressFn | None, limits: Limits, preview: PreviewFn | None) -> IngestResult:
    phase("read")
    digest = digest_of()
    existing = find_by_hash(store, digest)
    if existing is not None:
        return IngestResult(source, existing, "unchanged")
    phase("decode")
    raw = decode(digest)
    phase("parse")
    size = raw.file_size
    early = None if preview is None else lambda segments, columns: preview(columns_preview(segments, columns))
    snapshot = parse_snapshot(raw, limits, consume=True, early=early)  # frees the plain data as it goes
    del raw
    phase("replay")
    analysis = analyze(snapshot, progress, workers=os.cpu_count() or 1)
    phase("store")
    sid, new = write_snapshot(store, record_of(analysis, summary_of(analysis), digest, size))
    return IngestResult(source, sid, "ingested" if new else "unchanged")
