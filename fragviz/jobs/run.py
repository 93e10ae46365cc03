"""Ingest every rank of a job in parallel worker processes, then record the job's ranks in the store.

Each worker is a process of its own (spawned: no store connection or lock crosses a fork) that opens its own
store connection and runs `fragviz.library.ingest.ingest_file`, as `fragviz ingest` does for one file. Parsing and
replaying run in parallel; with SQLite the workers' writes queue on the store's lock (busy_timeout).
"""
from __future__ import annotations

import multiprocessing
import os
import queue as queue_module
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from fragviz.base.errors import FragvizError, SnapshotFormatError, StoreBusyError, StoreError, UsageError
from fragviz.library.ingest import IngestResult
from fragviz.jobs.ranks import RankedFile, job_files, rank_from_name, rank_from_snapshot, refuse_shared_ranks
from fragviz.base.progress import ProgressBar

REPORT_EVERY = 0.2  # seconds between a worker's progress messages
_WORKER_QUEUE: Any = None  # a worker's end of the progress queue (set by _start_worker), or None


@dataclass(frozen=True)
class RankResult:
    """What came of one rank's file: an ingest result with its rank (None where it could not be told)."""
    rank: int | None
    file: str
    id: int | None
    status: str  # a key of fragviz.library.ingest.EXIT_STATUS
    error: str | None = None
    detail: str | None = None  # an internal error's traceback (shown with --debug)

    def as_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "file": self.file, "id": self.id, "status": self.status, "error": self.error}

    def line(self) -> str:
        """`rank 3: FILE: ingested as snapshot 12`, its unchanged or its error (which names the file)."""
        who = "rank ?" if self.rank is None else f"rank {self.rank}"
        if self.id is None:
            return f"{who}: {self.error}"
        if self.status == "unchanged":
            return f"{who}: {self.file}: already in the store as snapshot {self.id} (unchanged)"
        return f"{who}: {self.file}: ingested as snapshot {self.id}"


def default_workers(files: int) -> int:
    return max(1, min(files, os.cpu_count() or 1))


def ingest_job(db: str, patterns: list[str], rank: int | None = None, workers: int | None = None,
               bar: ProgressBar | None = None) -> list[RankResult]:
    """Ingest the snapshot files that `patterns` name (directories, globs, files) as the ranks of one job,
    in `workers` processes; results in rank order. `rank` gives the rank of a single file. Two files of one
    rank raise a UsageError naming both before anything is ingested."""
    paths = job_files(patterns)
    if rank is not None and len(paths) != 1:
        raise UsageError(f"--rank goes with a single file; {patterns[0]} names {len(paths)}")
    if workers is not None and workers < 1:
        raise UsageError("--workers must be 1 or more")
    progress = JobProgress(bar, len(paths)) if bar is not None and bar.enabled else None
    context = multiprocessing.get_context("spawn")
    events = context.Queue() if progress else None
    with ProcessPoolExecutor(workers or default_workers(len(paths)), mp_context=context,
                             initializer=_start_worker, initargs=(events,)) as pool, _listening(events, progress):
        ranked = [RankedFile(paths[0], rank, "option")] if rank is not None else _ranked(pool, paths, progress)
        refuse_shared_ranks(ranked)
        results = _ingest_all(pool, db, ranked, progress)
    return sorted(results, key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.file))


def _ranked(pool: ProcessPoolExecutor, paths: list[str], progress: JobProgress | None) -> list[RankedFile]:
    """Each file's rank: from its name, else (in the workers) from the snapshot itself."""
    named = {p: rank_from_name(p) for p in paths}
    unnamed = [p for p in paths if named[p] is None]
    if progress and unnamed:
        progress.stage(f"reading ranks of {len(unnamed)} files")
    opened = {pool.submit(rank_from_snapshot, p): p for p in unnamed}
    found = {p: RankedFile(p, r, "name") for p, r in named.items() if r is not None}
    for future in as_completed(opened):
        found[opened[future]] = _opened_rank(future, opened[future])
    return [found[p] for p in paths]


def _opened_rank(future: Future, path: str) -> RankedFile:
    try:
        return future.result()
    except SnapshotFormatError as exc:
        return RankedFile(path, None, str(exc))
    except Exception as exc:  # noqa: BLE001  a dead worker or a bug: this file's error, not the job's
        return RankedFile(path, None, f"{path}: could not be opened for its rank ({type(exc).__name__}: {exc})")


def _ingest_all(pool: ProcessPoolExecutor, db: str, ranked: list[RankedFile],
                progress: JobProgress | None) -> list[RankResult]:
    results = [RankResult(None, f.path, None, "error", f.source) for f in ranked if f.rank is None]
    todo = [f for f in ranked if f.rank is not None]
    if progress:
        progress.stage("ingesting", skipped=len(results))
    running = {pool.submit(_ingest_rank, i, db, f.path): (i, f) for i, f in enumerate(todo)}
    for future in as_completed(running):
        index, file = running[future]
        results.append(_rank_result(future, file))
        if progress:
            progress.file_done(index)
    return results


def _rank_result(future: Future, file: RankedFile) -> RankResult:
    try:
        r: IngestResult = future.result()
    except Exception as exc:  # noqa: BLE001  the worker process died (killed, out of memory)
        return RankResult(file.rank, file.path, None, "internal_error",
                          f"{file.path}: the worker process ingesting it died ({type(exc).__name__}: {exc})")
    return RankResult(file.rank, r.file, r.id, r.status, r.error, r.detail)


# -- in the worker processes ---------------------------------------------------------------------------------
def _start_worker(events: Any) -> None:
    global _WORKER_QUEUE
    _WORKER_QUEUE = events


def _ingest_rank(index: int, db: str, path: str) -> IngestResult:
    """One rank's file, ingested in this worker over its own store connection."""
    from fragviz.library.ingest import ingest_file
    from fragviz.store.engine import open_store

    try:
        store = open_store(db)
    except FragvizError as exc:
        return IngestResult(path, None, "busy" if isinstance(exc, StoreBusyError) else "store_error", str(exc))
    try:
        return ingest_file(store, path, name=path, progress=_reporter(index))
    finally:
        store.close()


def _reporter(index: int):
    """A progress callback that sends (file index, events done, events) to the parent, a few times a second."""
    if _WORKER_QUEUE is None:
        return None
    last = [0.0]

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= REPORT_EVERY or done >= total:
            last[0] = now
            _WORKER_QUEUE.put((index, done, total))
    return report


# -- the job in the store -------------------------------------------------------------------------------------
def record_job(db: str, name: str, results: list[RankResult]) -> int | None:
    """Put the ranks that are in the store (ingested or unchanged) into the job `name`: new ranks join, a rank
    given again is replaced. The job's id, or None when no rank is in the store."""
    from fragviz.store.engine import open_store
    from fragviz.store.writer import add_job_ranks

    ranks = [(r.rank, r.id) for r in results if r.rank is not None and r.id is not None]
    if not ranks:
        return None
    store = open_store(db)
    try:
        return add_job_ranks(store, name, ranks)
    except StoreBusyError:
        raise StoreBusyError(f"{store.label}: the store is busy with another writer; job {name} was not recorded, "
                             "run the command again (the ranks are in the store: they come back unchanged)") from None
    except StoreError as exc:
        raise StoreError(f"job {name} could not be recorded: {exc}") from None
    finally:
        store.close()


# -- the progress bar ------------------------------------------------------------------------------------------
class JobProgress:
    """One bar for a whole job: files done, and events replayed over every file (workers report theirs)."""

    def __init__(self, bar: ProgressBar, files: int) -> None:
        self.bar = bar
        self.files = files
        self._lock = threading.Lock()
        self._events: dict[int, tuple[int, int]] = {}
        self._done: set[int] = set()
        self._skipped = 0

    def stage(self, text: str, skipped: int = 0) -> None:
        with self._lock:
            self._skipped = skipped
            self.bar.phase = text
            self.bar.update(0, 1)

    def events(self, index: int, done: int, total: int) -> None:
        with self._lock:
            self._events[index] = (done, total)
            self._draw()

    def file_done(self, index: int) -> None:
        with self._lock:
            self._done.add(index)
            self._draw()

    def _draw(self) -> None:
        running = sum(d / t for i, (d, t) in self._events.items() if i not in self._done and t > 0)
        finished = len(self._done) + self._skipped
        replayed = sum(d for d, _ in self._events.values())
        self.bar.phase = f"{finished}/{self.files} files, {replayed:,} events replayed"
        self.bar.update(int(1000 * (finished + running)), 1000 * max(self.files, 1))


class _listening:
    """Reads the workers' progress messages in a thread while the job runs."""

    def __init__(self, events: Any, progress: JobProgress | None) -> None:
        self.events, self.progress = events, progress
        self.thread = threading.Thread(target=self._read, daemon=True)

    def __enter__(self) -> "_listening":
        if self.events is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.events is not None:
            self.events.put(None)
            self.thread.join()
            self.progress.bar.close()

    def _read(self) -> None:
        while True:
            try:
                message = self.events.get(timeout=1.0)
            except queue_module.Empty:
                continue
            if message is None:
                return
            self.progress.events(*message)
