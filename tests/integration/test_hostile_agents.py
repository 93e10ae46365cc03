"""Every client of an agent against agents that misbehave, as real loopback servers: one that streams forever,
one that trickles, an SSH banner, a truncated body, a huge declared size, 20,000 devices, NaN and infinities.

Each case asserts a one-line outcome, a bounded cost (memory by tracemalloc; time by the test's deadline, never
a timed assert) and, for a poller, that the recording goes on or ends properly: never a dead thread."""
from __future__ import annotations

import http.client
import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import tracemalloc
from typing import Any, Callable

import pytest

from fragviz.base.errors import AgentError
from fragviz.live import client as client_module
from fragviz.live import protocol
from fragviz.live.client import AgentClient
from fragviz.live.manager import LiveManager
from fragviz.live.poller import TargetPoller
from tests.support.helpers import ROOT as REPO, free_port, wait_for

DEADLINE = 60.0
Answer = Callable[[socket.socket, str], None]


def stats_object(pid: int = 4242, devices: int = 1, fragmentation: Any = 0.25) -> dict[str, Any]:
    device = {key: 0 for key in protocol.COUNT_KEYS}
    device.update(reserved_bytes=8 << 20, allocated_bytes=6 << 20, active_bytes=6 << 20, requested_bytes=6 << 20,
                  inactive_split_bytes=2 << 20, non_releasable_bytes=2 << 20, largest_free_block=2 << 20,
                  fragmentation=fragmentation, free_scatter=0.0, processes=[])
    return {"pid": pid, "time": time.time(), "rank": None, "simulated": True,
            "devices": [dict(device, device=i) for i in range(devices)], "agent": {}}


def state_object() -> dict[str, Any]:
    return {"time": time.time(), "pid": 4242, "segments": [
        {"device": 0, "address": 1 << 30, "total_size": 8 << 20, "stream": 0, "pool": "large", "pool_id": None,
         "is_expandable": False, "blocks": [[1 << 30, 6 << 20, 6 << 20, "active_allocated"],
                                            [(1 << 30) + (6 << 20), 2 << 20, 0, "inactive"]]}]}


def json_answer(body: Any) -> Answer:
    data = body.encode() if isinstance(body, str) else json.dumps(body).encode()

    def answer(conn: socket.socket, path: str) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n" % len(data) + data)
    return answer


def endless(conn: socket.socket, path: str) -> None:
    """200 with no length, then spaces for as long as anyone reads them."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
    chunk = b" " * 65536
    while True:
        conn.sendall(chunk)


def trickle(conn: socket.socket, path: str) -> None:
    """A byte at a time, each well inside any socket timeout."""
    for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b" " * 100000:
        conn.sendall(bytes([byte]))
        time.sleep(0.2)


def banner(conn: socket.socket, path: str) -> None:
    conn.sendall(b"SSH-2.0-OpenSSH_9.6p1 Debian-4\r\n")
    time.sleep(0.5)


def truncated(conn: socket.socket, path: str) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1685\r\n\r\n{\"pid\": 1")


def declares_a_gigabyte(conn: socket.socket, path: str) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n{")
    time.sleep(0.5)


def not_found(conn: socket.socket, path: str) -> None:
    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot found")


class HostileAgent:
    """A loopback server whose answer to each path is what `answers` says now (changeable while it runs)."""

    def __init__(self, answers: dict[str, Answer]) -> None:
        self.answers = dict(answers)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            try:
                request = b""
                while b"\r\n\r\n" not in request:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    request += chunk
                path = request.split(b" ")[1].decode().split("?")[0]
                self.requests.append(path)
                self.answers.get(path, not_found)(conn, path)
            except OSError:
                pass  # the client hung up: what a careful client does

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def hostile():
    made: list[HostileAgent] = []

    def make(**answers: Answer) -> HostileAgent:
        made.append(HostileAgent({"/v1/" + k: v for k, v in answers.items()}))
        return made[-1]
    yield make
    for agent in made:
        agent.close()


@pytest.fixture
def short_deadlines(monkeypatch):
    monkeypatch.setattr(client_module, "STATS_TIMEOUT", 1.0)
    monkeypatch.setattr(client_module, "STATE_TIMEOUT", 1.0)


def huge_nesting() -> str:
    return "[" * 100_000 + "]" * 100_000


CHECK_CASES = {
    "endless": (endless, "more than an agent's answer may take"),
    "trickle": (trickle, "no whole answer to /v1/stats within 1 s"),
    "banner": (banner, "not an HTTP answer"),
    "truncated": (truncated, "broke off after"),
    "a gigabyte declared": (declares_a_gigabyte, "declares 1.00 GiB"),
    "404": (not_found, "answered 404"),
    "20,000 devices": (json_answer(stats_object(devices=20_000)), "over the 256.00 KiB an agent's answer may take"),
    "100 devices": (json_answer(stats_object(devices=100)), "100 devices in one stats object (at most 64"),
    "NaN": (json_answer(json.dumps(stats_object(fragmentation=float("nan")))), "NaN is not a number"),
    "Infinity": (json_answer(json.dumps(stats_object(fragmentation=float("inf")))), "Infinity is not a number"),
    "a ratio of 7": (json_answer(stats_object(fragmentation=7)), "fragmentation is not a ratio"),
    "nested": (json_answer(huge_nesting()), "nested too deeply"),
}


@pytest.mark.parametrize("case", CHECK_CASES)
def test_checking_a_hostile_agent_gives_one_line_in_bounded_memory(hostile, short_deadlines, case):
    answer, expected = CHECK_CASES[case]
    agent = hostile(stats=answer)
    tracemalloc.start()
    try:
        with pytest.raises(AgentError) as err:
            AgentClient(agent.target, None).check()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(err.value)
    assert expected in message and "\n" not in message and message.startswith(agent.target), message
    assert peak < 16 << 20, f"{case}: the client took {peak / 2**20:.0f} MiB"


def test_the_dashboards_manager_refuses_what_is_not_an_agent_and_starts_nothing(hostile, tmp_path):
    manager = LiveManager(str(tmp_path / "store.sqlite"))
    for answer, expected in ((endless, "more than an agent's answer may take"), (banner, "not an HTTP answer")):
        agent = hostile(stats=answer)
        with pytest.raises(AgentError, match=expected):
            manager.attach(agent.target, None)
    assert manager._pollers == {}


def rows(db: str, sql: str) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchall()


def test_a_poller_rides_out_bad_answers_after_a_good_start_and_ends_its_attachment(hostile, short_deadlines, tmp_path):
    """Good stats, then: a state that never ends, a truncated body (a gap, then back), NaN (dropped, said once),
    20,000 devices (dropped); the thread stays alive throughout, and stopping it ends the attachment."""
    db = str(tmp_path / "store.sqlite")
    agent = hostile(stats=json_answer(stats_object()), state=endless)
    poller = TargetPoller(db, AgentClient(agent.target, None), 0.05, None, state_every=0.05)
    poller.start()
    try:
        samples = lambda: rows(db, "SELECT count(*) FROM live_samples")[0][0]  # noqa: E731
        kinds = lambda: [k for (k,) in rows(db, "SELECT kind FROM live_events ORDER BY id")]  # noqa: E731
        wait_for(lambda: "bad_answer" in kinds() and samples() >= 3, "samples and the refused state")
        agent.answers["/v1/state"] = json_answer(state_object())
        wait_for(lambda: rows(db, "SELECT count(*) FROM live_state")[0][0] == 1, "the good state stored")

        agent.answers["/v1/stats"] = truncated
        wait_for(lambda: "disconnected" in kinds(), "the truncated answer taken as a gap")
        agent.answers["/v1/stats"] = json_answer(stats_object())
        wait_for(lambda: "reconnected" in kinds(), "the agent back")

        # counted from here: the endless state's refusals count as dropped too (several on a loaded machine)
        dropped = poller.status.dropped
        agent.answers["/v1/stats"] = json_answer(json.dumps(stats_object(fragmentation=float("nan"))))
        wait_for(lambda: poller.status.dropped >= dropped + 3, "NaN samples dropped")
        agent.answers["/v1/stats"] = json_answer(stats_object(devices=20_000))
        before = samples()
        wait_for(lambda: poller.status.dropped >= dropped + 6, "20,000-device samples dropped")
        assert samples() == before, "a refused sample reached the store"
        assert poller.is_running
    finally:
        poller.stop.set()
        poller.join(DEADLINE)
    assert not poller.is_running and poller.status.error is None
    details = [d for (d,) in rows(db, "SELECT detail FROM live_events WHERE kind = 'bad_answer'")]
    assert len(details) == 2, details  # the endless state; then NaN and 20,000 devices as one run of refusals
    assert "more than an agent's answer may take" in details[0] and "NaN is not a number" in details[1]
    assert rows(db, "SELECT ended_at IS NOT NULL FROM live_attachments") == [(1,)]


def attach_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fragviz", "attach", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=DEADLINE)


def test_attach_exits_2_with_one_line_when_what_it_polls_is_not_an_agent(hostile, tmp_path):
    db = str(tmp_path / "store.sqlite")
    agent = hostile(stats=banner)
    done = attach_cli(agent.target, "--db", db, "--interval", "0.2s")
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if "not a fragviz agent" in line]
    assert len(lines) == 1 and "not an HTTP answer" in lines[0] and "Traceback" not in done.stderr, done.stderr
    assert rows(db, "SELECT ended_at IS NOT NULL FROM live_attachments") == [(1,)]


def test_attach_with_a_duration_exits_2_when_nothing_ever_answered(tmp_path):
    port = free_port()  # nothing listens there
    done = attach_cli(f"127.0.0.1:{port}", "--db", str(tmp_path / "s.sqlite"), "--duration", "1s")
    assert done.returncode == 2 and done.stderr.strip().endswith("no fragviz agent answered there"), done.stderr


def test_attach_refuses_more_than_20_polls_a_second(tmp_path):
    done = attach_cli("127.0.0.1:9", "--db", str(tmp_path / "s.sqlite"), "--interval", "1ms")
    assert done.returncode == 2 and "at most every 0.05s" in done.stderr and "Traceback" not in done.stderr


def test_the_dashboard_answers_an_attach_to_an_endless_agent_with_one_line_and_stays_small(hostile, tmp_path):
    """The real server, its live page's attach callback over HTTP: an agent streaming /v1/stats forever once grew
    the dashboard by ~500 MB/s until it died."""
    agent = hostile(stats=endless)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRAGVIZ_")}
    proc = subprocess.Popen([sys.executable, "-m", "fragviz", "serve", "--db", str(tmp_path / "s.sqlite"),
                             "--port", str(port)], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _answers(port), "the dashboard to answer")
        body = {"output": "..live-status.children...live-attachments.options...live-attachments.value..",
                "outputs": [{"id": "live-status", "property": "children"},
                            {"id": "live-attachments", "property": "options"},
                            {"id": "live-attachments", "property": "value"}],
                "inputs": [{"id": "live-attach", "property": "n_clicks", "value": 1}],
                "state": [{"id": "live-target", "property": "value", "value": agent.target},
                          {"id": "live-token", "property": "value", "value": ""},
                          {"id": "live-attachments", "property": "value", "value": []}],
                "changedPropIds": ["live-attach.n_clicks"]}
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE)
        conn.request("POST", "/_dash-update-component", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        text = resp.read().decode()
        assert resp.status == 200 and "more than an agent&#x27;s answer may take" in text.replace("'", "&#x27;"), text
        with open(f"/proc/{proc.pid}/status") as fh:
            peak_kib = int(next(line for line in fh if line.startswith("VmHWM:")).split()[1])
        assert peak_kib < 1024 * 1024, f"the dashboard peaked at {peak_kib // 1024} MiB"
    finally:
        proc.terminate()
        proc.wait(30)


def _answers(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/api/snapshots")
        return conn.getresponse().status == 200
    except OSError:
        return False
