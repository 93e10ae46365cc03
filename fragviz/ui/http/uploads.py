"""Uploads as the dashboard's server receives them (POST /api/snapshots, routed in fragviz.ui.http.api).

The file comes as the body (`application/octet-stream`, its name URL-quoted in X-Filename) or as the
multipart field `file`, and is streamed to a temporary file in the server's spool folder (fragviz.ui.http.spool)
in chunks, never held in memory: the size limit (max_upload_size) is counted as the bytes arrive; at most
upload_slots are received at once (503 and Retry-After beyond, at once, never queued); a client silent for
read_timeout is dropped (guard.serve), and so is one whose upload brings fewer than upload_min_rate bytes a
second over a read_timeout (fragviz.ui.http.pace), so that trickling clients cannot hold the slots. The
temporary files are always removed: when the upload is done, and with the spool when the server stops.

An upload that names itself (X-Upload-Id) can be followed while it is ingested (`Uploads.progress`), from
the progress file the ingest child writes (fragviz ingest --progress-file).
"""
from __future__ import annotations

import os
import re
import select
import socket
import threading
from collections import OrderedDict
from contextlib import contextmanager, nullcontext, suppress
from typing import Any, BinaryIO, Callable, Iterator
from urllib.parse import unquote

from flask import Request
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.sansio.multipart import Data, Epilogue, Field, File, MultipartDecoder, NeedData

from fragviz.base.errors import FragvizError, NotFoundError
from fragviz.library.ingest import clean_name
from fragviz.base.progress import no_progress, read_progress
from fragviz.base.settings import setting
from fragviz.ui.http.ingest_child import stop_all
from fragviz.ui.http.pace import PACE_KEY, TooSlow
from fragviz.ui.http.spool import Spool
from fragviz.base.units import MiB, format_bytes

CHUNK = MiB
RETRY_AFTER = "5"  # seconds: a slot or the store's lock is usually free again by then
UPLOAD_FIELD = "file"


class UploadRefused(FragvizError):
    """An upload the server does not take: `status` says why, `retry_after` when to try again."""

    def __init__(self, status: int, message: str, retry_after: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def client_gone(environ: dict[str, Any]) -> Callable[[], bool]:
    """A check of whether the request's client has closed its connection (its socket reads as ended)."""
    sock = environ.get("werkzeug.socket")

    def gone() -> bool:
        if sock is None:
            return False
        try:
            if not select.select([sock], [], [], 0)[0]:
                return False
            return sock.recv(1, socket.MSG_PEEK | getattr(socket, "MSG_DONTWAIT", 0)) == b""
        except BlockingIOError:
            return False
        except (OSError, ValueError):
            return True  # reset, or closed

    return gone


UPLOAD_ID = re.compile(r"[A-Za-z0-9_-]{8,64}")
FINISHED_KEPT = 16


class Uploads:
    """Receives uploads into temporary files in the server's spool: at most `slots` at once, none larger than
    `max_size` bytes, none slower than `min_rate` bytes a second over a window (fragviz.ui.http.pace)."""

    def __init__(self, max_size: int, slots: int, min_rate: float = 0, spool: Spool | None = None) -> None:
        self.max_size = max_size
        self.slots = slots
        self.min_rate = min_rate
        self.spool = spool or Spool()
        self.spool.sweep()  # the spools of servers that were killed
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
        fd, path = self.spool.mkstemp("fragviz-progress-", ".jsonl")
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

    def progress(self, upload_id: str, sending: bool = False) -> dict[str, Any]:
        """An upload's ingest as far as it has come: {"phase", "done", "total", "preview"}. With `sending`, the
        asker says it is still sending that upload: an id not seen yet (its request has not reached the server's
        handler) reads as phase "send" instead of an error."""
        path = self._following.get(upload_id)
        if path is not None:
            return read_progress(path)
        if upload_id in self._finished:
            return self._finished[upload_id]
        if sending and UPLOAD_ID.fullmatch(upload_id):
            return no_progress("send")
        raise NotFoundError(f"no upload {upload_id!r} is being ingested")

    @classmethod
    def from_settings(cls) -> "Uploads":
        return cls(int(setting("max_upload_size")), int(setting("upload_slots")), float(setting("upload_min_rate")))

    def close(self) -> None:
        """The server is stopping: end the ingest children, remove the spool and every file in it."""
        stop_all()
        self.spool.close()

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
        fd, path = self.spool.mkstemp("fragviz-upload-", ".part")
        pace = req.environ.get(PACE_KEY)
        try:
            with os.fdopen(fd, "wb") as out, pace.required(self.min_rate) if pace else nullcontext():
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
    except TooSlow as exc:
        raise UploadRefused(408, f"the upload came too slowly ({exc}: upload_min_rate, FRAGVIZ_UPLOAD_MIN_RATE)"
                            ) from None
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
