"""The HTTP API on the dashboard's server, for scripts and checks.

Uploads (POST /api/snapshots) are received by fragviz.ui.http.uploads into the server's spool, then ingested by a
child process (fragviz.ui.http.ingest_child) that ends when the client goes away or the server stops. An upload
that names itself (X-Upload-Id) can be followed while it is ingested: GET /api/uploads/<id> gives its phase,
the events replayed and, as soon as the trace is parsed, the first picture (fragviz.replay.preview).
"""
from __future__ import annotations

import json
import os
import threading
from typing import Any, Callable

from flask import Blueprint, Flask, jsonify, request

from fragviz.base.errors import FragvizError, NotFoundError, StoreBusyError, UsageError, public_message
from fragviz.base.units import MiB
from fragviz.library.ingest import IngestResult, ingest_file
from fragviz.jobs.table import job_figures_of, ranks_csv
from fragviz.doctor.report import report_of
from fragviz.library import Library
from fragviz.store.engine import Store
from fragviz.ui.http.export_api import add_export_routes
from fragviz.ui.http.guard import ON_STOP
from fragviz.ui.http.lives_api import add_lives_route, stack_sites
from fragviz.ui.http.ingest_child import Abandoned, ChildIngest, Stopping, run_child
from fragviz.ui.http.uploads import RETRY_AFTER, UploadRefused, Uploads, client_gone

MAX_REQUEST_BODY = 16 * MiB  # any other request's body (Dash's callbacks send a few KiB)


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

    def ingest_upload(self, path: str, name: str, progress_file: str | None = None, spool: str | None = None,
                      abandoned: Callable[[], bool] = lambda: False) -> IngestResult:
        """Ingest a file someone sent, in a `fragviz ingest` child: a single-threaded process caps its own
        address space while it unpickles (fragviz.snapshot.loader), which a threaded server cannot. The child
        is stopped (UploadRefused) as soon as `abandoned()` says the client is gone."""
        with self._lock:
            if abandoned():
                raise UploadRefused(400, "the client went away before its upload was ingested")
            return ingest_in_child(self.path, ChildIngest(path, name, progress_file, spool, os.getpid()), abandoned)


def ingest_in_child(db: str, job: ChildIngest, abandoned: Callable[[], bool] = lambda: False) -> IngestResult:
    """`job` ingested into the store `db` by a child process (fragviz.ui.http.ingest_child)."""
    # the store goes by the environment: a server URL's password never shows in the process list
    try:
        status, out, err = run_child(job, {**os.environ, "FRAGVIZ_DB": db}, abandoned)
    except Abandoned:
        raise UploadRefused(400, "the client went away while its upload was ingested: it was not stored") from None
    except Stopping:
        raise UploadRefused(503, "the server is stopping: the upload was not stored; send it again once the "
                                 "server is back", RETRY_AFTER) from None
    try:
        row = json.loads(out)[0]
    except (ValueError, IndexError, KeyError):
        why = err.strip().splitlines()[-1:] or [f"exit status {status}"]
        return IngestResult(job.name, None, "internal_error",
                            f"{job.name}: the ingest ended without a result ({why[0]})")
    return IngestResult(row["file"], row["id"], row["status"], row["error"])


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


def state_json(segments, figures, event: int, device: int, sites: dict[int, str]) -> dict[str, Any]:
    """A state as the API gives it: its figures, its segments and blocks, the short site of each stack."""
    return {"device": device, "event": event, "reserved_bytes": figures.reserved_bytes,
            "allocated_bytes": figures.allocated_bytes, "requested_bytes": figures.requested_bytes,
            "free_bytes": figures.free_bytes, "largest_free_block": figures.largest_free_block,
            "non_releasable_bytes": figures.non_releasable_bytes, "fragmentation": figures.fragmentation,
            "free_scatter": figures.free_scatter,
            "sites": {str(k): v for k, v in sites.items()},
            "segments": [{"address": s.address, "total_size": s.total_size, "stream": s.stream, "pool": s.pool,
                          "is_expandable": s.is_expandable, "pool_id": s.pool_id, "stack": s.stack,
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
                result = writer.ingest_upload(path, name, progress_file, uploads.spool.path,
                                              client_gone(request.environ))
                return ingest_answer(result)

    @bp.get("/uploads/<upload_id>")
    def upload_progress(upload_id: str):
        return jsonify(uploads.progress(upload_id, sending=request.args.get("sending") == "1"))

    @bp.get("/snapshots/<int:sid>/report")
    def report(sid: int):
        device = request.args.get("device", type=int)
        at = request.args.get("at", type=int)
        return jsonify(report_of(reader.load_analysis(sid), at, device).as_dict())

    @bp.get("/snapshots/<int:sid>/state")
    def state(sid: int):
        device = request.args.get("device", default=None, type=int)
        if device is None:
            devices = reader.snapshot_row(sid).devices
            device = devices[0] if devices else 0
        event = request.args.get("event", default=None, type=int)
        segments, figures, k = reader.device_state(sid, device, event)
        used = [s.stack for s in segments] + [b.stack for s in segments for b in s.blocks]
        return jsonify(state_json(segments, figures, k, device, stack_sites(reader, sid, used)))

    @bp.get("/jobs/<int:job_id>/ranks.csv")
    def job_ranks_csv(job_id: int):
        figures = job_figures_of(reader, job_id)
        return ranks_csv(figures), 200, {"Content-Type": "text/csv; charset=utf-8", "Content-Disposition":
                                         f'attachment; filename="job-{job_id}-ranks.csv"'}

    add_export_routes(bp, reader)  # GET /api/snapshots/<id>/export and /api/jobs/<id>/export
    add_lives_route(bp, reader)  # GET /api/snapshots/<id>/devices/<device>/lives

    @bp.errorhandler(UploadRefused)
    def upload_refused(exc: UploadRefused):
        return jsonify({"error": str(exc)}), exc.status, {"Retry-After": exc.retry_after} if exc.retry_after else {}

    @bp.errorhandler(FragvizError)
    def fragviz_error(exc: FragvizError):
        message = public_message(exc, reader.records.path)
        if isinstance(exc, StoreBusyError):
            return jsonify({"error": message}), 503, {"Retry-After": RETRY_AFTER}
        status = 404 if isinstance(exc, NotFoundError) else 400 if isinstance(exc, UsageError) else 422
        return jsonify({"error": message}), status

    return bp


def install_api(server: Flask, reader: Library, writer: Writer, uploads: Uploads | None = None) -> None:
    uploads = uploads or Uploads.from_settings()
    server.register_blueprint(api_blueprint(reader, writer, uploads))
    server.extensions.setdefault(ON_STOP, []).append(uploads.close)  # guard.serve calls it as the server stops
    # Uploads read the raw input themselves (counted against max_upload_size); this bounds every other body.
    server.config["MAX_CONTENT_LENGTH"] = MAX_REQUEST_BODY
