"""The agent's HTTP server, in its server process: the door, the checks, and the asks to the job.

Every request is served on its own thread with a socket timeout, at most MAX_CONCURRENT at once (503 and
Retry-After beyond); errors are counted, never printed. It answers GET only (405 to anything else), to a Host
header that names this machine when it listens on loopback, with a token only in `Authorization: Bearer`, and
logs nothing. Only a request that passed all of that is asked of the job (joblink.JobLink); the door
(door.py) bounds what any connection may cost before. Standard library and fragviz.live only (the snapshot
build aside, which imports the allocator model when a simulated device's snapshot is first asked for).
"""
from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fragviz.live import protocol
from fragviz.live.door import CappedReader, Deadline, Door, HeadersTooLarge
from fragviz.live.building import TraceEntries, snapshot_blob
from fragviz.live.joblink import JobGone, JobLink

MAX_CONCURRENT = 8
REQUEST_TIMEOUT = 10.0  # seconds a client may take to send its request or read the answer
ASK_TIMEOUT = 10.0      # seconds the job may take to answer a question
SNAPSHOT_TIMEOUT = 60.0  # ... and to copy its state for a snapshot (a lock the job holds, a GIL it keeps)


class Serving:
    """What the server's request threads share: the link to the job, the token, slots and counters."""

    def __init__(self, job: JobLink, host: str, token: str | None, requested_port: int) -> None:
        self.job = job
        self.host = host
        self.token = token
        self.requested_port = requested_port
        self.port = 0
        self.slots = threading.BoundedSemaphore(MAX_CONCURRENT)
        self.snapshot_slot = threading.Lock()  # one snapshot built at a time: a second is 503, never queued
        self.trace = TraceEntries()  # the job's trace entries, built as deltas bring them (under snapshot_slot)
        self._lock = threading.Lock()
        self.errors = 0
        self.snapshots = 0

    def count(self, failed: bool) -> None:
        with self._lock:
            self.errors += int(failed)

    def snapshot_taken(self) -> None:
        with self._lock:
            self.snapshots += 1

    def stats(self) -> dict[str, Any]:
        """The job's stats object, with the server's own figures in its `agent` part."""
        header, payload = self.job.ask("stats", ASK_TIMEOUT)
        stats = json.loads(payload)
        with self._lock:
            stats["agent"].update(errors=self.errors, snapshots=self.snapshots, port=self.port,
                                  requested_port=self.requested_port, server_cpu_seconds=round(time.process_time(), 6))
        return stats


class AgentServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.door = Door()
        self.serving: Serving | None = None
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.door.admit(request):  # every open connection is being answered: this one waits for none
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.door.leave(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if self.serving is not None:
            self.serving.count(True)  # counted, never printed into the job's stderr


class AgentServer6(AgentServer):
    address_family = socket.AF_INET6


def server_for(host: str, port: int) -> AgentServer:
    """An agent server bound to host:port (OSError when it cannot be)."""
    cls = AgentServer6 if ":" in host else AgentServer
    return cls((protocol.bind_address(host), port), Handler)


class Handler(BaseHTTPRequestHandler):
    server_version = "fragviz-agent"
    protocol_version = "HTTP/1.0"
    timeout = REQUEST_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (the job's stderr is not ours)
        pass

    def setup(self) -> None:
        super().setup()
        self.rfile = CappedReader(self.rfile)  # type: ignore[assignment]
        self._deadline = Deadline(lambda: self.connection)

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except HeadersTooLarge:  # in the request line (parse_request answers 431 for the headers itself)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.send_error(431, "Request line too long")

    def parse_request(self) -> bool:
        ok = super().parse_request()
        self._deadline.cancel()
        self.rfile.lift()  # type: ignore[attr-defined]
        self.server.door.read(self.connection)  # type: ignore[attr-defined]
        return ok

    def finish(self) -> None:
        self._deadline.cancel()
        super().finish()

    def _method_not_allowed(self) -> None:
        # Every endpoint reads: nothing here changes the job, so nothing but GET is taken.
        body = json.dumps({"error": f"the agent answers GET only, not {self.command[:16]}"}).encode()
        self.send_response(405)
        for key, value in (("Allow", "GET"), ("Content-Type", "application/json"),
                           ("Content-Length", str(len(body))), ("Cache-Control", "no-store")):
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = _method_not_allowed  # noqa: N815

    def do_GET(self) -> None:  # noqa: N802  (http.server's naming)
        serving: Serving = self.server.serving  # type: ignore[attr-defined]
        if not serving.slots.acquire(blocking=False):
            self._send_json(503, {"error": "the agent is busy: try again"}, {"Retry-After": "1"})
            return
        failed = False
        try:
            self._route(serving)
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            failed = True  # the client went away: nothing to answer
        except JobGone:
            failed = True
            self._try_send_json(503, {"error": "the job has ended"})
        except TimeoutError as exc:
            failed = True
            self._try_send_json(503, {"error": str(exc)}, {"Retry-After": "5"})
        except Exception as exc:  # never into the job: counted, answered, forgotten
            failed = True
            self._try_send_json(500, {"error": f"the agent failed to answer ({type(exc).__name__}: {exc})"[:300]})
        finally:
            serving.count(failed)
            serving.slots.release()

    def _route(self, serving: Serving) -> None:
        if self._denied(serving):
            return
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if url.path == protocol.PATH_STATS:
            self._send_json(200, serving.stats())
        elif url.path == protocol.PATH_METRICS:
            self._send(200, protocol.render_metrics(serving.stats()).encode(), protocol.PROMETHEUS_CONTENT_TYPE)
        elif url.path == protocol.PATH_SNAPSHOT:
            self._snapshot(serving, query.get("trace", ["1"])[-1] not in ("0", "false", "no"))
        elif url.path == protocol.PATH_OOM:
            self._oom(serving)
        elif url.path == protocol.PATH_STATE:
            self._send(200, serving.job.ask("state", ASK_TIMEOUT)[1], "application/json")
        else:
            self._send_json(404, {"error": f"no such endpoint: {url.path[:80]}",
                                  "endpoints": [protocol.PATH_STATS, protocol.PATH_SNAPSHOT, protocol.PATH_OOM,
                                                protocol.PATH_STATE, protocol.PATH_METRICS]})

    def _snapshot(self, serving: Serving, trace: bool) -> None:
        """The snapshot now; one at a time (queueing them would only make the job copy its state again and
        again): 503 with Retry-After while another is being taken."""
        if not serving.snapshot_slot.acquire(blocking=False):
            self._send_json(503, {"error": "a snapshot is being taken: try again"}, {"Retry-After": "5"})
            return
        try:
            header, payload = serving.job.ask("snapshot", SNAPSHOT_TIMEOUT, trace=trace)
            if header.get("none"):
                self._send_json(404, {"error": str(header.get("reason", "no device"))})
                return
            blob = snapshot_blob(header, payload, serving.trace)
            del payload
            serving.snapshot_taken()
        finally:
            serving.snapshot_slot.release()
        self._send(200, blob, "application/octet-stream")

    def _oom(self, serving: Serving) -> None:
        header, payload = serving.job.ask("oom", SNAPSHOT_TIMEOUT)
        if header.get("none"):
            self._send_json(404, {"error": "no out-of-memory error has happened in this job yet"})
            return
        # an OOM's whole trace: built apart from the deltas (only the frame lists are shared)
        self._send(200, snapshot_blob(header, payload, serving.trace), "application/octet-stream")
        serving.job.tell("oom_fetched", count=header["count"])

    def _denied(self, serving: Serving) -> bool:
        if protocol.names_this_machine(serving.host) and not _loopback_host_header(self.headers.get("Host")):
            # a web page's script reaching a loopback agent under a foreign name (DNS rebinding)
            self._send_json(403, {"error": "the Host header must name this machine (localhost or 127.0.0.1)"})
            return True
        if serving.token is not None and not protocol.tokens_match(
                protocol.bearer_token(self.headers.get("Authorization")), serving.token):
            self._send_json(401, {"error": "missing or wrong token (send Authorization: Bearer TOKEN)"},
                            {"WWW-Authenticate": 'Bearer realm="fragviz-agent"'})
            return True
        return False

    def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(body).encode(), "application/json", headers)

    def _try_send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        with contextlib.suppress(Exception):
            self._send_json(status, body, headers)

    def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)


def _loopback_host_header(value: str | None) -> bool:
    if not value:
        return True  # HTTP/1.0 clients may send none (a browser always does)
    parsed = protocol.split_host_header(value)
    return parsed is not None and protocol.names_this_machine(parsed[0])
