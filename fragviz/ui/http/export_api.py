"""The export routes of the HTTP API: a stored snapshot's or job's data (fragviz.library.export) as a Parquet or CSV
attachment. GET /api/snapshots/<id>/export and /api/jobs/<id>/export take what=series|allocations|segments
(default series), format=parquet|csv (default parquet), device=D and, for segments, at=EVENT. Refusals are the
API's JSON errors (a bad parameter 400, an unknown id 404), from the blueprint's error handler."""
from __future__ import annotations

import io
from typing import TYPE_CHECKING

from flask import Blueprint, Response, request, send_file

from fragviz.base.errors import UsageError
from fragviz.library.export import (FORMATS, MEDIA_TYPES, ExportRequest, job_file_name, job_frame, snapshot_file_name,
                            snapshot_frame, write_frame)

if TYPE_CHECKING:
    from fragviz.library import Library


def add_export_routes(bp: Blueprint, reader: Library) -> None:
    """Add the two export routes to the API's blueprint (under its /api prefix)."""

    @bp.get("/snapshots/<int:sid>/export")
    def export_snapshot(sid: int) -> Response:
        req, fmt = export_request()
        return attachment(snapshot_frame(reader, sid, req), fmt, snapshot_file_name(reader, sid, req.what, fmt))

    @bp.get("/jobs/<int:job_id>/export")
    def export_job(job_id: int) -> Response:
        req, fmt = export_request()
        return attachment(job_frame(reader, job_id, req), fmt, job_file_name(reader, job_id, req.what, fmt))


def export_request() -> tuple[ExportRequest, str]:
    """What the query asks for, and the file format."""
    fmt = request.args.get("format", "parquet")
    if fmt not in FORMATS:
        raise UsageError(f"format must be one of {', '.join(FORMATS)}, not '{fmt[:40]}'")
    return ExportRequest(request.args.get("what", "series"), _int_arg("device"), _int_arg("at")), fmt


def _int_arg(name: str) -> int | None:
    value = request.args.get(name, "")
    if value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{name} must be a whole number, not '{value[:40]}'") from None


def attachment(frame, fmt: str, name: str) -> Response:
    """The frame written as `fmt`, sent as a file download named `name`."""
    body = io.BytesIO()
    write_frame(frame, fmt, body)
    body.seek(0)
    return send_file(body, mimetype=MEDIA_TYPES[fmt], as_attachment=True, download_name=name, max_age=0)
