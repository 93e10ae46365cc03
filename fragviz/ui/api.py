"""The HTTP API on the dashboard's server, for scripts and checks.

Uploads (POST /api/snapshots: the file as the body, `application/octet-stream` with its name URL-quoted in
X-Filename, or the multipart field `file`) are streamed to a temporary file in chunks, never held in memory,
then ingested from it: the size limit (max_upload_size) is counted as the bytes arrive, at most upload_slots
are received at once (503 and Retry-After beyond, at once), and a client that goes silent is dropped after
read_timeout (the server's socket timeout: guard.serve). The temporary file is always removed.

An upload that names itself (X-Upload-Id) can be followed while it is ingested: GET /api/uploads/<id> gives
its phase, the events replayed and, as soon as the trace is parsed, the first picture (fragviz.preview),
from the progress file the ingest child writes (fragviz ingest --progress-file).
"""
from __future__ import annotations

import os
import re
import tempfile
import threading
from collections import OrderedDict
from contextlib import contextmanager, suppress
from typing import Any, BinaryIO, Iterator
from urllib.parse import unquote

from flask import Blueprint, Flask, Request, jsonify, request
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.sansio.multipart import Data, Epilogue, Field, File, MultipartDecoder, NeedData

from fragviz.errors import FragvizError, NotFoundError, StoreBusyError, UsageError
from fragviz.ingest import IngestResult, clean_name, ingest_file
from fragviz.jobs.table import job_figures_of, ranks_csv
from fragviz.report import report_dict
from fragviz.settings import setting
from fragviz.library import Library
from fragviz.progress import read_progress
from fragviz.store.engine import Store
from fragviz.ui.export_api import add_export_routes
from fragviz.units import format_bytes

CHUNK = 1024 * 1024
RETRY_AFTER = "5"  # seconds: a slot or the store's lock is usually free again by then
MAX_REQUEST_BODY = 16 * 1024**2  # any other request's body (Dash's callbacks send a few KiB)
UPLOAD_FIELD = "file"


class UploadRefused(FragvizError):
    """An upload the server does not take: `status` says why, `retry_after` when to try again."""

    def __init__(self, status: int, message: str, retry_after: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class Writer:
    """The server's one store writer: uploads are ingested one at a time."""

    def __init__(self, path: str, store: Store) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._store = store

    def ingest_file(self, path: str, name: str) -> IngestResult:
        """Ingest a file this server trusts (the bundled samples), in this process."""
        with self._lock:
            return ingest_file(self._store, path, name=name)

    def ingest_upload(self, path: str, name: str, progress_file: str | None = None) -> IngestResult:
        """Ingest a file someone sent, in a `fragviz ingest` child: a single-threaded process caps its own
        address space while it unpickles (fragviz.snapshot.loader), which a threaded server cannot."""
        with self._lock:
            return ingest_in_child(self.path, path, name, progress_file)


def ingest_in_child(db: str, path: str, name: str, progress_file: str | None = None) -> IngestResult:
    import json
    import subprocess
    import sys

    follow = ["--progress-file", progress_file] if progress_file else []
    # the store goes by the environment: a server URL's password never shows in the process list
    proc = subprocess.run([sys.executable, "-m", "fragviz", "ingest", path, "--name", name, "--json", "--no-progress",
                           *follow], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env={**os.environ, "FRAGVIZ_DB": db})
    try:
        row = json.loads(proc.stdout)[0]
    except (ValueError, IndexError, KeyError):
        why = proc.stderr.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        return IngestResult(name, None, "internal_error", f"{name}: the ingest ended without a result ({why[0]})")
    return IngestResult(row["file"], row["id"], row["status"], row["error"])


UPLOAD_ID = re.compile(r"[A-Za-z0-9_-]{8,64}")
FINISHED_KEPT = 16


class Uploads:
    """Receives uploads into temporary files: at most `slots` at once, none larger than `max_size` bytes."""

    def __init__(self, max_size: int, slots: int) -> None:
        self.max_size = max_size
        self.slots = slots
        self._free = threading.BoundedSemaphore(slots) if slots > 0 else None
        self._following: dict[str, str] = {}  # upload id -> its ingest's progress file, while it runs
        self._finished: OrderedDict[str, dict[str, Any]] = OrderedDict()  # the last few uploads' final states

    @contextmanager
    def followed(self, upload_id: str | None) -> Iterator[str | None]:
        """A progress file for the upload `upload_id` names (none for an upload without a usable id), readable
        through `progress` while the block runs, removed after."""
        if not upload_id or not UPLOAD_ID.fullmatch(upload_id) or upload_id in self._following \
                or upload_id in self._finished:
            yield None
            return
        fd, path = tempfile.mkstemp(prefix="fragviz-progress-", suffix=".jsonl")
        os.close(fd)
        self._following[upload_id] = path
        try:
            yield path
        finally:
            # the page asks once more after the answer (a small file is done before its first look)
            self._finished[upload_id] = read_progress(path)
            while len(self._finished) > FINISHED_KEPT:
                self._finished.popitem(last=False)
            self._following.pop(upload_id, None)
            with suppress(FileNotFoundError):
                os.unlink(path)

    def progress(self, upload_id: str) -> dict[str, Any]:
        """An upload's ingest as far as it has come: {"phase", "done", "total", "preview"}."""
        path = self._following.get(upload_id)
        if path is not None:
            return read_progress(path)
        if upload_id in self._finished:
            return self._finished[upload_id]
        raise NotFoundError(f"no upload {upload_id!r} is being ingested")

    @classmethod
    def from_settings(cls) -> "Uploads":
        return cls(int(setting("max_upload_size")), int(setting("upload_slots")))

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one of the slots, or refuse at once (never wait: a waiting upload would hold its connection)."""
        if self._free is None or not self._free.acquire(blocking=False):
            raise UploadRefused(503, f"the server is receiving {self.slots} uploads already (upload_slots): "
                                     "try again shortly", RETRY_AFTER)
        try:
            yield
        finally:
            self._free.release()

    @contextmanager
    def received(self, req: Request) -> Iterator[tuple[str, str]]:
        """(the temporary file holding the upload, its clean base name); the file is removed afterwards."""
        fd, path = tempfile.mkstemp(prefix="fragviz-upload-", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as out:
                name = self._receive(req, out)
            yield path, clean_name(name, basename=True)
        finally:
            with suppress(FileNotFoundError):
                os.unlink(path)

    def _receive(self, req: Request, out: BinaryIO) -> str:
        if req.mimetype == "application/octet-stream":
            # The page sends the file itself as the body (no multipart to parse): the fast path for big files.
            _write_all(body_chunks(req, self.max_size), out)
            return unquote(req.headers.get("X-Filename", "upload.pickle"))
        if req.mimetype == "multipart/form-data":
            boundary = req.mimetype_params.get("boundary", "").encode("latin-1", "replace")
            name = receive_multipart(body_chunks(req, self.max_size), boundary, out)
            if name is not None:
                return name
        raise UploadRefused(400, f"send the snapshot as the multipart field '{UPLOAD_FIELD}', or as the body "
                                 "(Content-Type: application/octet-stream, its name in X-Filename)")


def too_large(limit: int) -> UploadRefused:
    return UploadRefused(413, f"the upload is larger than max_upload_size ({format_bytes(limit)}): raise it with "
                              "FRAGVIZ_MAX_UPLOAD_SIZE or max_upload_size in fragviz.toml")


def body_chunks(req: Request, limit: int) -> Iterator[bytes]:
    """The request's body in chunks, counted against `limit` as they arrive (with or without Content-Length)."""
    length = req.content_length
    if length is not None and length > limit:
        raise too_large(limit)  # said before a byte of it is read
    stream = req.environ["wsgi.input"]
    if length is None and not req.environ.get("wsgi.input_terminated"):
        length = 0  # neither a length nor chunked: no body
    return _counted(stream, length, limit)


def _counted(stream: BinaryIO, length: int | None, limit: int) -> Iterator[bytes]:
    received = 0
    while length is None or received < length:
        data = _read(stream, CHUNK if length is None else min(CHUNK, length - received))
        if not data:
            if length is not None:
                raise UploadRefused(400, f"the upload ended after {received} of its {length} bytes")
            return
        received += len(data)
        if received > limit:
            raise too_large(limit)
        yield data


def _read(stream: BinaryIO, size: int) -> bytes:
    try:
        return stream.read(size)
    except TimeoutError:
        raise UploadRefused(408, "the upload stalled: nothing arrived within read_timeout "
                                 "(FRAGVIZ_READ_TIMEOUT)") from None
    except OSError as exc:  # the client went away, or a broken chunked body
        raise UploadRefused(400, f"the upload broke off ({exc})") from None


def _write_all(chunks: Iterator[bytes], out: BinaryIO) -> None:
    for data in chunks:
        _write(out, data)


def _write(out: BinaryIO, data: bytes) -> None:
    try:
        out.write(data)
    except OSError as exc:
        raise UploadRefused(507, f"the server could not keep the upload ({exc.strerror or exc})") from None


def receive_multipart(chunks: Iterator[bytes], boundary: bytes, out: BinaryIO) -> str | None:
    """Write the first file in the field UPLOAD_FIELD to `out` as it arrives; its file name, or None if none."""
    if not boundary:
        raise UploadRefused(400, "the multipart body names no boundary")
    # The decoder buffers at most a chunk and a part's headers: fields other than the file are dropped unread.
    decoder = MultipartDecoder(boundary, max_form_memory_size=2 * CHUNK, max_parts=16)
    part = _FilePart(out)
    try:
        for data in chunks:
            decoder.receive_data(data)
            part.take(decoder)
        decoder.receive_data(None)
        part.take(decoder)
    except (ValueError, RequestEntityTooLarge) as exc:
        raise UploadRefused(400, f"not a multipart body fragviz takes ({str(exc)[:120]})") from None
    return part.name


class _FilePart:
    """Follows a multipart decoder's events, writing the first file in UPLOAD_FIELD to `out`."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.name: str | None = None
        self._writing = False

    def take(self, decoder: MultipartDecoder) -> None:
        event = decoder.next_event()
        while not isinstance(event, (Epilogue, NeedData)):
            if isinstance(event, (File, Field)):
                self._writing = isinstance(event, File) and event.name == UPLOAD_FIELD and self.name is None
                if self._writing:
                    self.name = event.filename or "upload.pickle"
            elif isinstance(event, Data) and self._writing:
                _write(self.out, event.data)
            event = decoder.next_event()


def snapshot_entry(row) -> dict[str, Any]:
    devices = row.summary.devices
    return {"id": row.id, "name": row.name, "devices": row.devices, "file_size": row.file_size,
            "added_at": row.added_at, "content_hash": row.content_hash,
            "reserved_bytes": sum(d.reserved_bytes for d in devices),
            "peak_reserved_bytes": sum(d.peak_reserved_bytes for d in devices),
            "fragmentation": worst_fragmentation(devices),
            "ooms": row.summary.ooms, "warnings": len(row.warnings)}


def worst_fragmentation(devices) -> float | None:
    """The highest fragmentation of a snapshot's devices at the end (a ratio is not summed over devices); None
    where no device's was recorded (a summary stored before the figure existed)."""
    values = [d.fragmentation for d in devices if d.fragmentation is not None]
    return max(values) if values else None


def state_json(segments, figures, event: int, device: int) -> dict[str, Any]:
    return {"device": device, "event": event, "reserved_bytes": figures.reserved_bytes,
            "allocated_bytes": figures.allocated_bytes, "requested_bytes": figures.requested_bytes,
            "free_bytes": figures.free_bytes, "largest_free_block": figures.largest_free_block,
            "non_releasable_bytes": figures.non_releasable_bytes, "fragmentation": figures.fragmentation,
            "free_scatter": figures.free_scatter,
            "segments": [{"address": s.address, "total_size": s.total_size, "stream": s.stream, "pool": s.pool,
                          "is_expandable": s.is_expandable,
                          "blocks": [{"address": b.address, "size": b.size, "requested_size": b.requested_size,
                                      "state": b.state.value, "stack": b.stack} for b in s.blocks]}
                         for s in segments]}


def ingest_answer(result: IngestResult) -> tuple[Any, int, dict[str, str]]:
    """An ingest result as HTTP: a bad file is 422, a store busy with another writer 503 (try again)."""
    failed = {"error": result.error, "file": result.file}  # the error names the file: "FILE: problem"
    if result.status == "busy":
        return jsonify(failed), 503, {"Retry-After": RETRY_AFTER}
    if result.status == "error":
        return jsonify(failed), 422, {}
    if result.id is None:  # the store could not be written (507), or a fragviz bug (500)
        return jsonify(failed), 507 if result.status == "store_error" else 500, {}
    return jsonify({"id": result.id, "status": result.status}), 201 if result.status == "ingested" else 200, {}


def api_blueprint(reader: Library, writer: Writer, uploads: Uploads) -> Blueprint:
    bp = Blueprint("api", __name__, url_prefix="/api")

    @bp.get("/snapshots")
    def list_snapshots():
        return jsonify([snapshot_entry(r) for r in reader.list_snapshots()])

    @bp.post("/snapshots")
    def upload():
        with uploads.slot(), uploads.followed(request.headers.get("X-Upload-Id")) as progress_file:
            with uploads.received(request) as (path, name):
                return ingest_answer(writer.ingest_upload(path, name, progress_file))

    @bp.get("/uploads/<upload_id>")
    def upload_progress(upload_id: str):
        return jsonify(uploads.progress(upload_id))

    @bp.get("/snapshots/<int:sid>/report")
    def report(sid: int):
        device = request.args.get("device", type=int)
        at = request.args.get("at", type=int)
        return jsonify(report_dict(reader.load_analysis(sid), at, device))

    @bp.get("/snapshots/<int:sid>/state")
    def state(sid: int):
        device = request.args.get("device", default=None, type=int)
        if device is None:
            devices = reader.snapshot_row(sid).devices
            device = devices[0] if devices else 0
        event = request.args.get("event", default=None, type=int)
        segments, figures, k = reader.device_state(sid, device, event)
        return jsonify(state_json(segments, figures, k, device))

    @bp.get("/jobs/<int:job_id>/ranks.csv")
    def job_ranks_csv(job_id: int):
        figures = job_figures_of(reader, job_id)
        return ranks_csv(figures), 200, {"Content-Type": "text/csv; charset=utf-8", "Content-Disposition":
                                         f'attachment; filename="job-{job_id}-ranks.csv"'}

    add_export_routes(bp, reader)  # GET /api/snapshots/<id>/export and /api/jobs/<id>/export

    @bp.errorhandler(UploadRefused)
    def upload_refused(exc: UploadRefused):
        return jsonify({"error": str(exc)}), exc.status, {"Retry-After": exc.retry_after} if exc.retry_after else {}

    @bp.errorhandler(FragvizError)
    def fragviz_error(exc: FragvizError):
        if isinstance(exc, StoreBusyError):
            return jsonify({"error": str(exc)}), 503, {"Retry-After": RETRY_AFTER}
        status = 404 if isinstance(exc, NotFoundError) else 400 if isinstance(exc, UsageError) else 422
        return jsonify({"error": str(exc)}), status

    return bp


def install_api(server: Flask, reader: Library, writer: Writer, uploads: Uploads | None = None) -> None:
    server.register_blueprint(api_blueprint(reader, writer, uploads or Uploads.from_settings()))
    # Uploads read the raw input themselves (counted against max_upload_size); this bounds every other body.
    server.config["MAX_CONTENT_LENGTH"] = MAX_REQUEST_BODY
