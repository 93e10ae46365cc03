"""The live agent in this very process (real HTTP over loopback): the simulated device follows the job's
empty_cache(), the poller records segments only when they change, and the agent lingers for an unfetched OOM."""
from __future__ import annotations

import http.client
import json
import pickle
import threading
import time
import urllib.request
from typing import Any

import pytest
import torch

from fragviz.base.errors import AgentError
from fragviz.live import start_agent
from fragviz.live.client import AgentClient
from fragviz.live.poller import TargetPoller
from fragviz.library import Library

MiB = 2**20


@pytest.fixture
def agent():
    a = start_agent(device_memory=256 * MiB, linger=0)
    yield a
    a.stop()


def reserved(a) -> int:
    return json.loads(urllib.request.urlopen(a.url + "/v1/stats", timeout=10).read())["devices"][0]["reserved_bytes"]


def test_empty_cache_releases_the_simulated_devices_cached_segments(agent):
    x = torch.empty(64 * MiB, dtype=torch.uint8)
    assert reserved(agent) == 64 * MiB
    del x
    assert reserved(agent) == 64 * MiB  # freed into the cache, still reserved, as on CUDA
    torch.cuda.empty_cache()
    assert reserved(agent) == 0


def test_empty_cache_is_torchs_own_again_after_the_agent_stops():
    a = start_agent(device_memory=256 * MiB, linger=0)
    a.stop()
    assert torch.cuda.empty_cache.__module__ == "torch.cuda.memory"


def test_the_poller_records_the_segments_only_when_they_change(agent, tmp_path):
    db = str(tmp_path / "live.sqlite")
    held = torch.empty(8 * MiB, dtype=torch.uint8)
    poller = TargetPoller(db, AgentClient(f"127.0.0.1:{agent.port}", None), 0.05, None, state_every=0.01)
    reader = Library.open(db)
    assert poller.poll_once()
    first = reader.live.state_time(poller.attachment_id, 0)
    time.sleep(0.02)
    assert poller.poll_once()
    assert reader.live.state_time(poller.attachment_id, 0) == first  # nothing changed: nothing rewritten
    more = torch.empty(32 * MiB, dtype=torch.uint8)
    time.sleep(0.02)
    assert poller.poll_once()
    t, segments = reader.live.latest_state(poller.attachment_id, 0)
    assert t > first and sum(s.total_size for s in segments) == 20 * MiB + 32 * MiB  # 8 MiB takes a 20 MiB segment
    del held, more


def test_the_agent_lingers_until_the_newest_oom_snapshot_is_fetched():
    a = start_agent(device_memory=16 * MiB, linger=0)
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(64 * MiB, dtype=torch.uint8)
    fetched = []

    def fetch_later() -> None:
        time.sleep(0.5)
        fetched.append(urllib.request.urlopen(a.url + "/v1/oom", timeout=10).read())

    threading.Thread(target=fetch_later).start()
    a.stop(linger=30)
    assert fetched and fetched[0][:1] == b"\x80"  # stop waited for the fetch (a pickle came back)


def test_a_poller_pointed_at_something_else_records_nothing_and_stops(tmp_path):
    import http.server

    class Junk(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = json.dumps({"time": 1.0, "pid": 1, "devices": [{"device": 0, "reserved_bytes": "lots"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Junk)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        target = f"127.0.0.1:{server.server_address[1]}"
        with pytest.raises(Exception) as err:
            AgentClient(target, None).check()
        assert "is not a fragviz agent" in str(err.value) and "is not a count" in str(err.value)
        poller = TargetPoller(str(tmp_path / "s.sqlite"), AgentClient(target, None), 0.05, None)
        with pytest.raises(AgentError, match="not a fragviz agent"):
            poller.poll_once()  # never an agent there: the recording stops (run() ends the attachment)
        assert Library.open(str(tmp_path / "s.sqlite")).live.samples(poller.attachment_id)["id"] == []
    finally:
        server.shutdown()


# -- the agent's door: GET only, Host, Bearer, slots, no logs, no public bind without a token ----------------

def agent_request(a, method: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=30)
    try:
        conn.request(method, path, body=b"{}" if method in ("POST", "PUT", "PATCH") else None, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"])
def test_the_agent_answers_get_only(agent, method):
    status, headers, body = agent_request(agent, method, "/v1/stats")
    assert status == 405 and headers["Allow"] == "GET"
    assert b"devices" not in body
    assert agent_request(agent, "GET", "/v1/stats")[0] == 200


@pytest.mark.parametrize("host", ["localhost.evil.example:{port}", "localhost.evil.example", "127.0.0.1.nip.io:{port}",
                                  "evil.example:{port}", "localhost@evil.example:{port}", "[::1]evil.example",
                                  "10.0.0.1:{port}"])
def test_the_agent_refuses_foreign_host_names(agent, host):
    status, _, body = agent_request(agent, "GET", "/v1/stats", {"Host": host.format(port=agent.port)})
    assert status == 403 and b"devices" not in body


@pytest.mark.parametrize("host", ["localhost:{port}", "localhost.:{port}", "127.0.0.1:{port}", "[::1]:{port}",
                                  "127.0.0.9"])
def test_the_agent_answers_its_loopback_names(agent, host):
    assert agent_request(agent, "GET", "/v1/stats", {"Host": host.format(port=agent.port)})[0] == 200


def in_threads(calls: list) -> tuple[list, list[threading.Thread]]:
    """Start each call on its own thread; (their results as they come, the threads)."""
    results: list = []
    threads = [threading.Thread(target=lambda c=c: results.append(c()), daemon=True) for c in calls]
    for t in threads:
        t.start()
    return results, threads


def test_beyond_its_slots_the_agent_says_503_and_when_to_retry(agent):
    """While the job cannot answer (its allocator's lock held), requests past the server's slots are 503 at
    once; those in the slots are answered once the job can."""
    from fragviz.live.handler import MAX_CONCURRENT

    with agent.source.device.lock:
        done, threads = in_threads([lambda: agent_request(agent, "GET", "/v1/state")] * (MAX_CONCURRENT + 2))
        wait_until(lambda: len(done) == 2, "the requests past the slots to be refused")
        assert [status for status, _, _ in done] == [503, 503] and all(int(h["Retry-After"]) > 0 for _, h, _ in done)
    for t in threads:
        t.join(30)
    assert [status for status, _, _ in done[2:]] == [200] * MAX_CONCURRENT
    assert agent_request(agent, "GET", "/v1/stats")[0] == 200


def wait_until(condition, what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {seconds:.0f} s for {what}")
        time.sleep(0.02)


def test_a_token_agent_takes_only_a_bearer_header_and_logs_nothing(capfd):
    token = "agent-tok-5e1d"
    a = start_agent(device_memory=64 * MiB, linger=0, token=token)
    try:
        capfd.readouterr()
        assert agent_request(a, "GET", f"/v1/stats?token={token}")[0] == 401  # never in the URL
        assert agent_request(a, "GET", "/v1/stats", {"Authorization": token})[0] == 401  # nor without its scheme
        assert agent_request(a, "GET", "/v1/stats", {"Authorization": f"Bearer {token}x"})[0] == 401
        assert agent_request(a, "GET", "/v1/stats", {"Authorization": f"bearer {token}"})[0] == 200
        assert agent_request(a, "POST", f"/v1/stats?token={token}", {"Authorization": f"Bearer {token}"})[0] == 405
        out, err = capfd.readouterr()
        assert token not in out and token not in err
    finally:
        a.stop()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.1", "localhost.evil.example"])
def test_the_agent_refuses_a_public_address_without_a_token(host):
    with pytest.raises(AgentError, match="token"):
        start_agent(host=host, device_memory=64 * MiB, linger=0)


@pytest.mark.parametrize("host", ["127.0.0.2", "localhost."])
def test_the_agent_serves_loopback_names_without_a_token(host):
    a = start_agent(host=host, device_memory=64 * MiB, linger=0)
    try:
        conn = http.client.HTTPConnection("127.0.0.2" if host == "127.0.0.2" else "127.0.0.1", a.port, timeout=30)
        conn.request("GET", "/v1/stats")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        a.stop()


# -- snapshots that do not stall the job ----------------------------------------------------------------------

def test_the_job_only_copies_its_state_and_the_server_builds_the_snapshot(agent, monkeypatch):
    """The snapshot is built and pickled in the agent's server process: with the builder and pickle's dumps
    broken in the job's process, the snapshot still comes, complete. The copy under the lock is what the agent
    reports."""
    from fragviz.allocator import state

    held = [torch.empty(MiB, dtype=torch.uint8) for _ in range(50)]  # a trace and blocks with stacks

    def broken(*args, **kwargs):
        raise AssertionError("the snapshot was built in the job's process")

    monkeypatch.setattr(state, "build_snapshot", broken)
    monkeypatch.setattr(pickle, "dumps", broken)
    monkeypatch.setattr(pickle, "Pickler", broken)
    blob = urllib.request.urlopen(agent.url + "/v1/snapshot?trace=1", timeout=30).read()
    monkeypatch.undo()
    data = pickle.loads(blob)
    device = agent.source.device
    assert len(data["device_traces"][0]) == len(device.alloc.trace) >= 50 and data["segments"]
    live = sorted(b["size"] for s in data["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
    assert live.count(MiB) == 50
    assert all(any(f["filename"] == __file__ for f in b["frames"]) for s in data["segments"] for b in s["blocks"]
               if b["state"] == "active_allocated" and b["size"] == MiB)
    stats = json.loads(urllib.request.urlopen(agent.url + "/v1/stats", timeout=10).read())["agent"]
    assert stats["snapshots"] == 1 and 0 < stats["snapshot_lock_seconds"] == round(device.lock_seconds, 6)
    del held


def test_frames_are_sent_once_and_every_snapshot_has_them_all(agent):
    """The job sends each interned frame and stack to its server once; later snapshots still carry them all."""
    first = torch.empty(MiB, dtype=torch.uint8)
    one = pickle.loads(urllib.request.urlopen(agent.url + "/v1/snapshot", timeout=30).read())
    sent = agent.source._sent
    second = torch.empty(2 * MiB, dtype=torch.uint8)  # a new line: a new stack
    two = pickle.loads(urllib.request.urlopen(agent.url + "/v1/snapshot", timeout=30).read())
    assert agent.source._sent[1] > sent[1]
    for data in (one, two):
        allocs = [e for e in data["device_traces"][0] if e["action"] == "alloc"]
        assert allocs and all(any(f["filename"] == __file__ for f in e["frames"]) for e in allocs)
    lines = {f["line"] for e in two["device_traces"][0] if e["action"] == "alloc" for f in e["frames"]
             if f["filename"] == __file__}
    assert len(lines) == 2
    del first, second


def test_a_snapshot_without_its_trace_never_copies_the_trace(agent):
    held = torch.empty(MiB, dtype=torch.uint8)
    trace = agent.source.device.alloc.trace

    def untouchable():
        raise AssertionError("the trace was copied")

    trace.copy = untouchable
    try:
        data = pickle.loads(urllib.request.urlopen(agent.url + "/v1/snapshot?trace=0", timeout=30).read())
    finally:
        del trace.copy
    assert data["device_traces"] == [[]] and any(b["size"] == MiB for s in data["segments"] for b in s["blocks"])
    del held


def test_one_snapshot_at_a_time_and_the_next_is_answered(agent):
    """A second snapshot while one is being taken (the job's lock held: its copy waits) is 503 with
    Retry-After at once; the first is answered once the job can copy."""
    with agent.source.device.lock:
        done, threads = in_threads([lambda: agent_request(agent, "GET", "/v1/snapshot?trace=0")] * 2)
        wait_until(lambda: len(done) == 1, "the second snapshot to be refused")
        assert done[0][0] == 503 and done[0][1]["Retry-After"] == "5"
    threads[0].join(30)
    threads[1].join(30)
    assert done[1][0] == 200 and pickle.loads(done[1][2])["segments"] is not None


def test_a_hole_in_the_series_is_marked_as_a_gap(agent, tmp_path):
    """Samples more than three intervals apart (a poll that waited, a job that stalled) are not joined by a line."""
    db = str(tmp_path / "live.sqlite")
    poller = TargetPoller(db, AgentClient(f"127.0.0.1:{agent.port}", None), 0.05, None, state_every=60)
    assert poller.poll_once() and poller.poll_once()
    time.sleep(2.2)  # more than max(3 x 0.05 s, 0.05 s + 2 s) without a poll
    assert poller.poll_once()
    gaps = Library.open(db).live.samples(poller.attachment_id)["gap"]
    assert gaps == [0, 0, 1]
