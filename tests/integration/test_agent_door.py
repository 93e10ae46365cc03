"""The agent's door before any token: a real `fragviz run` training loop, 300 connections that send their request
a few bytes at a time, and 40 that send 95 headers of 60 KB each. The job keeps its threads and memory, keeps
training, and a real client still gets its answer; nothing is printed into the job's stderr.

Nothing here times anything: the conditions are counts of threads, bytes of memory and answers."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from fragviz.live.door import HEADER_BYTES, MAX_CONNECTIONS
from tests.support.helpers import TESTS, free_port, wait_for

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
LOOP = os.path.join(TESTS, "live", "train_loop.py")
DEADLINE = 60.0


def proc_status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return int(next(line for line in fh if line.startswith(field + ":")).split()[1])


def stats(port: int) -> dict | None:
    try:
        return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/stats", timeout=10).read())
    except (OSError, ValueError):
        return None


@pytest.fixture
def job(tmp_path):
    port = free_port()
    err = open(tmp_path / "job.err", "w+")
    proc = subprocess.Popen([FRAGVIZ, "run", "--port", str(port), "--device-memory", "256MiB", "--", "python", LOOP,
                             "--step-ms", "20"], stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1)
    steps: list[str] = []
    threading.Thread(target=lambda: steps.extend(line for line in proc.stdout), daemon=True).start()
    try:
        wait_for(lambda: stats(port) and len(steps) > 5, "the job to train and its agent to answer")
        yield proc, port, steps, err
    finally:
        proc.kill()
        proc.wait()
        err.close()


def slow_connections(port: int, n: int) -> list[socket.socket]:
    """`n` connections that each send the start of a request line, then nothing."""
    out = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(10)
        try:
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /v1/st")
        except OSError:
            pass
        out.append(s)
    return out


def header_flood(port: int) -> str:
    """One connection sending 95 headers of 60 KB: what the agent answered (its status line), or how it ended."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(b"GET /v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            for i in range(95):
                s.sendall(b"X-Flood-%d: " % i + b"a" * 60_000 + b"\r\n")
            s.sendall(b"\r\n")
        except OSError:
            pass  # the agent stopped reading: it answered or closed
        try:
            return s.recv(64).split(b"\r\n")[0].decode(errors="replace") or "closed"
        except OSError:
            return "closed"


def server_of(pid: int) -> int:
    """The agent's server process: the job's one child."""
    kids = [int(k) for task in os.listdir(f"/proc/{pid}/task")
            for k in open(f"/proc/{pid}/task/{task}/children").read().split()]
    assert len(kids) == 1, kids
    return kids[0]


def test_slow_connections_and_header_floods_cost_the_job_little_and_a_client_still_gets_its_answer(job):
    """They never reach the job's process: its threads do not change, and its memory hardly; the agent's server
    process holds the connections, a bounded number of them."""
    proc, port, steps, err = job
    server = server_of(proc.pid)
    threads_idle, rss_idle = proc_status(proc.pid, "Threads"), proc_status(proc.pid, "VmRSS")
    server_threads_idle = proc_status(server, "Threads")
    held = slow_connections(port, 300)
    try:
        answers = []
        floods = [threading.Thread(target=lambda: answers.append(header_flood(port))) for _ in range(40)]
        for t in floods:
            t.start()
        # a real client, while the flood goes on: it takes the place of the slowest sender
        assert wait_for(lambda: stats(port), "a real client's answer during the flood")["pid"] == proc.pid
        for t in floods:
            t.join(DEADLINE)
        assert all(a.startswith("HTTP/1.0 431") or a == "closed" for a in answers), answers
        assert any(a.startswith("HTTP/1.0 431") for a in answers), answers
        # each open connection is a thread of the server and its deadline's timer, never more than MAX_CONNECTIONS
        assert proc_status(server, "Threads") <= server_threads_idle + 2 * MAX_CONNECTIONS + 2
        assert proc_status(proc.pid, "Threads") == threads_idle
        assert proc_status(proc.pid, "VmRSS") - rss_idle < 8 * 1024, "the flood grew the job by 8 MiB or more"
        trained = len(steps)
        wait_for(lambda: len(steps) > trained + 5, "the job to keep training")
    finally:
        for s in held:
            s.close()
    assert stats(port)["pid"] == proc.pid
    err.seek(0)
    assert "Traceback" not in err.read()


def test_a_request_that_trickles_is_cut_off_at_its_deadline_not_per_read(job):
    """A byte every 0.5 s would pass a per-read timeout for ever; the whole request has REQUEST_DEADLINE."""
    _, port, _, _ = job
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        request = b"GET /v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Slow: " + b"a" * 100

        def trickle() -> bool:
            for byte in request:
                try:
                    s.sendall(bytes([byte]))
                except OSError:
                    return True  # cut off
                time.sleep(0.5)
            return False
        assert trickle(), f"{len(request)} bytes at 2 a second were all taken"


def test_headers_past_the_cap_are_431(job):
    _, port, _, _ = job
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"GET /v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (HEADER_BYTES + 10) + b"\r\n\r\n")
        assert s.recv(64).startswith(b"HTTP/1.0 431")
