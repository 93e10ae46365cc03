"""The live agent: a small HTTP server inside a training job that serves its allocator's figures.

    agent = fragviz.live.start_agent(port=9400)    # first thing in train.py, or `fragviz run -- python train.py`
    ...
    agent.stop()

It runs in daemon threads and never disturbs the job: every request is served on its own thread with a
socket timeout, at most MAX_CONCURRENT at once (503 and Retry-After beyond), and its errors are counted, never
raised into the job. It answers GET only (405 to anything else), to a Host header that names this machine
when it listens on loopback, with a token only in `Authorization: Bearer`, and logs nothing. Standard
library, fragviz.live.protocol, lazy torch and fragviz's core only (see sources.py).
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fragviz.base.errors import AgentError
from fragviz.live import protocol
from fragviz.live.door import CappedReader, Deadline, Door, HeadersTooLarge
from fragviz.live.sources import CudaSource, SimulatedSource, Source, rank_env

MAX_CONCURRENT = 8
REQUEST_TIMEOUT = 10.0  # seconds a client may take to send its request or read the answer
DEFAULT_DEVICE_MEMORY = 16 * 1024**3


class Agent:
    """A running agent: `.port`, `.url`, `.stats()`, `.stop()`."""

    def __init__(self, source: Source, host: str, port: int, token: str | None) -> None:
        self.source = source
        self.token = token
        self.host = host
        self.ranks = rank_env()
        self.process_start_time = process_start_time()
        self.polls = 0
        self.errors = 0
        self.cpu_seconds = 0.0
        self.oom_fetched = 0  # how many OOM snapshots the source had taken when one was last served
        self._counter_lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(MAX_CONCURRENT)
        self.snapshot_slot = threading.Lock()  # one snapshot built at a time: a second is 503, never queued
        self.snapshots = 0
        self._server = _server_for(host, port)
        self._server.agent = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="fragviz-agent", daemon=True)
        self._stopped = False

    def start(self) -> "Agent":
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return protocol.target_url(self.host, self.port)

    def stats(self) -> dict[str, Any]:
        """The `/v1/stats` object."""
        devices = self.source.device_stats()
        with self._counter_lock:
            self.polls += 1
            agent = {"polls": self.polls, "cpu_seconds": round(self.cpu_seconds, 6), "errors": self.errors,
                     "snapshots": self.snapshots,
                     "snapshot_lock_seconds": round(getattr(self.source, "lock_seconds", 0.0), 6),
                     "state_walk_seconds": round(getattr(self.source, "walk_seconds", 0.0), 6)}
        return {"time": time.time(), "pid": os.getpid(), "process_start_time": self.process_start_time,
                "simulated": self.source.simulated, **self.ranks, "devices": devices, "agent": agent}

    def count(self, cpu: float, failed: bool) -> None:
        with self._counter_lock:
            self.cpu_seconds += cpu
            self.errors += int(failed)

    def stop(self, linger: float = 0.0) -> None:
        """Stop serving. With `linger`, first wait up to that many seconds for an OOM snapshot nobody has
        fetched yet to be fetched (a poller comes for it within its interval), so a dying job's failure
        state is not lost."""
        if self._stopped:
            return
        deadline = time.monotonic() + linger
        while self.oom_fetched < self.source.oom_count and time.monotonic() < deadline:
            time.sleep(0.05)
        self._stopped = True
        atexit.unregister(self.stop)
        self._server.shutdown()
        self._server.server_close()
        self.source.close()


def process_start_time() -> float:
    """When this process started, in Unix time (Linux: /proc; elsewhere, when the agent started)."""
    try:
        with open("/proc/self/stat") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime: clock ticks after boot
        with open("/proc/stat") as fh:
            boot = int(next(line for line in fh if line.startswith("btime")).split()[1])
        return round(boot + ticks / os.sysconf("SC_CLK_TCK"), 2)
    except (OSError, ValueError, IndexError, StopIteration):
        return round(time.time(), 2)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.door = Door()
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
        self.agent.count(0.0, True)  # type: ignore[attr-defined]  (counted, never printed into the job's stderr)


class _Server6(_Server):
    address_family = socket.AF_INET6


def _server_for(host: str, port: int) -> _Server:
    cls = _Server6 if ":" in host else _Server
    try:
        return cls((protocol.bind_address(host), port), _Handler)
    except OSError as exc:
        raise AgentError(f"the live agent cannot listen on {host}:{port} ({exc.strerror or exc})") from None


class _Handler(BaseHTTPRequestHandler):
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
        agent: Agent = self.server.agent  # type: ignore[attr-defined]
        if not agent.slots.acquire(blocking=False):
            self._send_json(503, {"error": "the agent is busy: try again"}, {"Retry-After": "1"})
            return
        started, failed = time.thread_time(), False
        try:
            self._route(agent)
        except (BrokenPipeError, ConnectionError, socket.timeout):
            failed = True  # the client went away: nothing to answer
        except Exception as exc:  # never into the job: counted, answered, forgotten
            failed = True
            self._try_send_json(500, {"error": f"the agent failed to answer ({type(exc).__name__}: {exc})"[:300]})
        finally:
            agent.count(time.thread_time() - started, failed)
            agent.slots.release()

    def _route(self, agent: Agent) -> None:
        denied = self._denied(agent)
        if denied:
            return
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if url.path == protocol.PATH_STATS:
            self._send_json(200, agent.stats())
        elif url.path == protocol.PATH_METRICS:
            self._send(200, protocol.render_metrics(agent.stats()).encode(), protocol.PROMETHEUS_CONTENT_TYPE)
        elif url.path == protocol.PATH_SNAPSHOT:
            self._snapshot(agent, query.get("trace", ["1"])[-1] not in ("0", "false", "no"))
        elif url.path == protocol.PATH_OOM:
            count, blob = agent.source.oom_count, agent.source.oom_snapshot()
            if blob is None:
                self._send_json(404, {"error": "no out-of-memory error has happened in this job yet"})
            else:
                self._send(200, blob, "application/octet-stream")
                agent.oom_fetched = max(agent.oom_fetched, count)
        elif url.path == protocol.PATH_STATE:
            self._send_json(200, {"time": time.time(), "pid": os.getpid(), "segments": agent.source.state()})
        else:
            self._send_json(404, {"error": f"no such endpoint: {url.path[:80]}",
                                  "endpoints": [protocol.PATH_STATS, protocol.PATH_SNAPSHOT, protocol.PATH_OOM,
                                                protocol.PATH_STATE, protocol.PATH_METRICS]})

    def _snapshot(self, agent: Agent, trace: bool) -> None:
        """The snapshot now; one at a time (building one costs the job a little, queueing them would cost it
        a lot): 503 with Retry-After while another is being built."""
        if not agent.snapshot_slot.acquire(blocking=False):
            self._send_json(503, {"error": "a snapshot is being taken: try again"}, {"Retry-After": "5"})
            return
        try:
            blob = agent.source.snapshot(trace)
            with agent._counter_lock:
                agent.snapshots += 1
        finally:
            agent.snapshot_slot.release()
        self._send(200, blob, "application/octet-stream")

    def _denied(self, agent: Agent) -> bool:
        if protocol.names_this_machine(agent.host) and not _loopback_host_header(self.headers.get("Host")):
            # a web page's script reaching a loopback agent under a foreign name (DNS rebinding)
            self._send_json(403, {"error": "the Host header must name this machine (localhost or 127.0.0.1)"})
            return True
        if agent.token is not None and not protocol.tokens_match(
                protocol.bearer_token(self.headers.get("Authorization")), agent.token):
            self._send_json(401, {"error": "missing or wrong token (send Authorization: Bearer TOKEN)"},
                            {"WWW-Authenticate": 'Bearer realm="fragviz-agent"'})
            return True
        return False

    def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(body).encode(), "application/json", headers)

    def _try_send_json(self, status: int, body: Any) -> None:
        try:
            self._send_json(status, body)
        except Exception:
            pass

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


def start_agent(port: int = 0, host: str = "127.0.0.1", token: str | None = None, record_history: bool = True,
                max_entries: int = 100_000, *, simulate: bool | None = None, device_memory: int | None = None,
                alloc_conf: str | None = None, root_file: str | None = None, linger: float = 10.0) -> Agent:
    """Start serving this process's allocator on `host:port` (port 0: any free port; see `.port`).

    Without CUDA (or with `simulate=True`) the tensors this thread creates on the CPU from now on are
    mirrored into fragviz's allocator model as on a CUDA device of `device_memory` bytes (16 GiB by
    default), which raises PyTorch's OOM error where that device would run out. Binding to anything but
    loopback needs a `token`. At exit the agent waits up to `linger` seconds for an unfetched OOM snapshot.
    """
    token = token or None  # an empty token protects nothing: treated as none
    if not protocol.names_this_machine(host) and not token:
        raise AgentError(f"refusing to serve the live agent on {host} without a token: other machines could "
                         "read this job's memory (pass token=..., or --token / FRAGVIZ_TOKEN)")
    source = _source(simulate, record_history, max_entries, device_memory, alloc_conf, root_file)
    try:
        agent = Agent(source, host, port, token).start()
    except BaseException:
        source.close()
        raise
    if isinstance(source, SimulatedSource):
        source.install()
    atexit.register(agent.stop, linger)
    return agent


def _source(simulate: bool | None, record_history: bool, max_entries: int, device_memory: int | None,
            alloc_conf: str | None, root_file: str | None) -> Source:
    import torch

    if simulate is None:
        simulate = not torch.cuda.is_available()
    if simulate:
        return SimulatedSource(device_memory or DEFAULT_DEVICE_MEMORY, alloc_conf, record_history, max_entries,
                               root_file)
    return CudaSource(record_history, max_entries)
