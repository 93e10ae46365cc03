"""The agent's server process: listens on the agent's port and serves it, so the job never does.

The job starts it (agent.py, `spawn`) with one end of a socket pair, and sends its settings as the first
message. It binds the port; one the job cannot have (taken by another job, not allowed) is not the job's
problem: it serves on the next free one (PORT + k * STEP, STEP the local world size under torchrun, so each
rank keeps its place) or any free port, says where on the job's stderr in one line, and tells the job. Where
it cannot listen at all, it says so and ends; the job runs on.

HTTP, the door, tokens and the building and pickling of snapshots all happen here, at a lower priority
(NICENESS) than the job: the job's process only answers asks that passed the door (joblink.py), and for a
snapshot only copies its state. When the job ends (its end of the link closes) or this process finds its
parent gone (a job killed while a fork child of it lives on), it closes the port and exits at once. Ctrl-C
is the job's to handle: the server ignores SIGINT and ends with the job.

    python -I -c 'from fragviz.live.server import main; main()' FD     (agent.server_command)
"""
from __future__ import annotations

import errno
import os
import signal
import socket
import sys
import threading
import time
from fragviz.live import link, protocol
from fragviz.live.handler import AgentServer, Serving, server_for
from fragviz.live.joblink import JobLink

NICENESS = 10       # the job first: this process gets a tenth of what the job gets of a core both want
NEXT_PORTS = 32     # ports tried past a taken one before any free port
REBIND_WAIT = 1.0   # seconds a taken port is tried again first (a job restarted on it: its last server closing)
PARENT_CHECK = 0.5  # seconds between checks that the job is still this process's parent


def main(argv: list[str] | None = None) -> None:
    try:
        serve(sys.argv[1:] if argv is None else argv)
    except Exception as exc:  # one line in the job's stderr, never a traceback
        _say(f"fragviz: the live agent's server failed ({type(exc).__name__}: {exc}): the job runs without it")


def serve(argv: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        os.nice(NICENESS)
    except OSError:
        pass
    sock = socket.socket(fileno=int(argv[0]))
    first = link.receive(sock)
    if first is None:
        return  # the job ended before it said anything
    config = first[0]
    server, note = listen(config["host"], config["port"], max(1, int(config.get("step") or 1)))
    if server is None:
        _say(f"fragviz: the live agent for {config['who']}pid {config['pid']} cannot listen on "
             f"{config['host']}:{config['port']} ({note}): the job runs without it")
        link.send(sock, {"op": "listening", "port": None, "note": note})
        return
    port = int(server.server_address[1])
    url = protocol.target_url(config["host"], port)
    job = JobLink(sock)
    server.serving = serving = Serving(job, config["host"], config.get("token"), int(config["port"]))
    serving.port = port
    link.send(sock, {"op": "listening", "port": port, "url": url, "note": note})
    moved = f", {note}," if note else ""
    _say(f"fragviz: live agent for {config['who']}pid {config['pid']}{moved} serving {config['what']} on {url}")
    job.start()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="fragviz-server",
                     daemon=True).start()
    _until_the_job_ends(job, int(config["pid"]))
    server.socket.close()  # the port is free the moment the job ends
    os._exit(0)


def _until_the_job_ends(job: JobLink, pid: int) -> None:
    while not job.gone.wait(PARENT_CHECK):
        if os.getppid() != pid:  # the job is gone; a fork child of it may still hold its end of the link
            return


def listen(host: str, port: int, step: int) -> tuple[AgentServer | None, str | None]:
    """A server on host:port, else on the next free port (or any), with a note of why; (None, why) when
    nothing can be listened on."""
    try:
        return server_for(host, port), None
    except OSError as exc:
        first = exc
    if port == 0 or first.errno not in (errno.EADDRINUSE, errno.EACCES):
        return None, _reason(first)
    if first.errno == errno.EADDRINUSE:
        server = _again(host, port)
        if server is not None:
            return server, None
        for k in range(1, NEXT_PORTS + 1):
            if port + k * step > 65535:
                break
            try:
                return server_for(host, port + k * step), f"port {port} taken"
            except OSError:
                continue
    try:
        return server_for(host, 0), f"port {port} {'taken' if first.errno == errno.EADDRINUSE else 'not allowed'}"
    except OSError as exc:
        return None, _reason(exc)


def _again(host: str, port: int) -> AgentServer | None:
    deadline = time.monotonic() + REBIND_WAIT
    while time.monotonic() < deadline:
        time.sleep(0.1)
        try:
            return server_for(host, port)
        except OSError:
            continue
    return None


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _say(line: str) -> None:
    try:
        os.write(2, (line + "\n").encode(errors="replace"))
    except OSError:
        pass
