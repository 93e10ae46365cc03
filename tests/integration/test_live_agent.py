"""The live agent in this very process (real HTTP over loopback): the simulated device follows the job's
empty_cache(), the poller records segments only when they change, and the agent lingers for an unfetched OOM."""
from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest
import torch

from fragviz.live import start_agent
from fragviz.live.poller import AgentClient, TargetPoller
from fragviz.store.reader import StoreReader

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
    reader = StoreReader(db)
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


def test_a_poller_pointed_at_something_else_records_nothing_and_carries_on(tmp_path):
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
        assert "no fragviz agent answers there" in str(err.value) and "is not a count" in str(err.value)
        poller = TargetPoller(str(tmp_path / "s.sqlite"), AgentClient(target, None), 0.05, None)
        assert poller.poll_once() is False and poller.poll_once() is False
        assert StoreReader(str(tmp_path / "s.sqlite")).live.samples(poller.attachment_id)["id"] == []
    finally:
        server.shutdown()
