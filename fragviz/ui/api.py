"""The HTTP API on the dashboard's server, for scripts and checks."""
from __future__ import annotations

import os
import threading
from typing import Any
from urllib.parse import unquote

from flask import Blueprint, Flask, jsonify, request

from fragviz.errors import FragvizError, NotFoundError, UsageError
from fragviz.ingest import ingest_bytes
from fragviz.report import report_dict
from fragviz.store.reader import StoreReader
from fragviz.store.schema import connect


class Writer:
    """The server's one store writer: uploads are ingested one at a time."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._conn = connect(path)

    def ingest(self, data: bytes, name: str):
        with self._lock:
            return ingest_bytes(self._conn, data, name)


def snapshot_entry(row) -> dict[str, Any]:
    devices = row.summary["devices"]
    return {"id": row.id, "name": row.name, "devices": row.devices, "file_size": row.file_size,
            "added_at": row.added_at, "content_hash": row.content_hash,
            "reserved_bytes": sum(d["reserved_bytes"] for d in devices),
            "peak_reserved_bytes": sum(d["peak_reserved_bytes"] for d in devices),
            "ooms": sum(d["trace_actions"].get("oom", 0) for d in devices), "warnings": len(row.warnings)}


def state_json(segments, figures, event: int, device: int) -> dict[str, Any]:
    return {"device": device, "event": event, "reserved_bytes": figures.reserved_bytes,
            "allocated_bytes": figures.allocated_bytes, "requested_bytes": figures.requested_bytes,
            "free_bytes": figures.free_bytes, "largest_free_block": figures.largest_free_block,
            "fragmentation": figures.fragmentation,
            "segments": [{"address": s.address, "total_size": s.total_size, "stream": s.stream, "pool": s.pool,
                          "is_expandable": s.is_expandable,
                          "blocks": [{"address": b.address, "size": b.size, "requested_size": b.requested_size,
                                      "state": b.state.value, "stack": b.stack} for b in s.blocks]}
                         for s in segments]}


def api_blueprint(reader: StoreReader, writer: Writer) -> Blueprint:
    bp = Blueprint("api", __name__, url_prefix="/api")

    @bp.get("/snapshots")
    def list_snapshots():
        return jsonify([snapshot_entry(r) for r in reader.list_snapshots()])

    @bp.post("/snapshots")
    def upload():
        if request.mimetype == "application/octet-stream":
            # The page sends the file itself as the body (no multipart to parse): the fast path for big files.
            data, name = request.get_data(cache=False), unquote(request.headers.get("X-Filename", "upload.pickle"))
        else:
            f = request.files.get("file")
            if f is None:
                return jsonify({"error": "send the snapshot as the multipart field 'file'"}), 400
            data, name = f.read(), f.filename or "upload.pickle"
        result = writer.ingest(data, os.path.basename(name) or "upload.pickle")
        if result.status == "error":
            return jsonify({"error": result.error}), 422
        return jsonify({"id": result.id, "status": result.status}), 201 if result.status == "ingested" else 200

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

    @bp.errorhandler(FragvizError)
    def fragviz_error(exc: FragvizError):
        status = 404 if isinstance(exc, NotFoundError) else 400 if isinstance(exc, UsageError) else 422
        return jsonify({"error": str(exc)}), status

    return bp


def install_api(server: Flask, reader: StoreReader, writer: Writer) -> None:
    server.register_blueprint(api_blueprint(reader, writer))
    server.config["MAX_CONTENT_LENGTH"] = 4 * 1024**3
