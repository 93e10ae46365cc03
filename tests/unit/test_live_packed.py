"""A simulated device's snapshot as the live agent's server builds it, from the job's packed copies sent a piece
at a time (frames once, trace entries since the last snapshot, the oldest dropped as the job drops them), is the
snapshot the device itself builds in one piece (SimulatedDevice.snapshot, the path `fragviz capture` writes)."""
from __future__ import annotations

import json
import pickle
import socket

import pytest
import torch

from fragviz.allocator.packed import ACTIONS, PackedTrace, TraceMirror, unpack
from fragviz.live.building import TraceEntries, snapshot_blob
from fragviz.live.joblink import JobLink
from fragviz.live.sources import SimulatedSource

MiB = 2**20


class Server:
    """The server's side of the pipeline, without the socket: what JobLink's reader and the handler do."""

    def __init__(self) -> None:
        self.left, self.right = socket.socketpair()
        self.link = JobLink(self.left)
        self.entries = TraceEntries()

    def build(self, answer, trace: TraceEntries | None = None) -> dict:
        header = json.loads(json.dumps(answer.header))  # as it crosses the link
        payload = bytes(answer.payload) if answer.payload else b""
        header["tables"] = self.link.mirror.update(header)
        header["rows"] = self.link._rows(header, payload)
        return pickle.loads(snapshot_blob(header, payload, trace or self.entries))

    def close(self) -> None:
        self.left.close()
        self.right.close()


@pytest.fixture
def source():
    src = SimulatedSource(64 * MiB, None, True, max_entries=40)  # trimmed past 80 entries: drops happen
    src.install()
    yield src
    src.close()


def work(n: int, held: list) -> None:
    for i in range(n):
        held.append(torch.empty((i % 7 + 1) * 100_000, dtype=torch.uint8))
        if len(held) > 5:
            del held[0]


def the_device_s_own(src: SimulatedSource) -> dict:
    return src.device.snapshot(src._provenance(), close=False)


def test_snapshots_from_deltas_are_the_devices_own_through_drops_and_snapshots_without_trace(source):
    server, held = Server(), []
    try:
        for rounds in (3, 30, 1, 60, 0, 45):
            work(rounds, held)
            got = server.build(source.snapshot(True))
            expected = the_device_s_own(source)
            assert got["device_traces"] == expected["device_traces"]
            assert all(e["frames"] for e in got["device_traces"][0] if e["action"] == "alloc")
            assert got["segments"] == expected["segments"]
            assert got["allocator_settings"] == expected["allocator_settings"]
            none = server.build(source.snapshot(False))  # no trace: the server's copy is left as it was
            assert none["device_traces"] == [[]] and none["segments"] == expected["segments"]
        assert source.device.alloc.trace.appended > 2 * 40  # the job dropped entries on the way
    finally:
        server.close()
        del held


def test_an_oom_snapshot_is_the_whole_trace_at_the_oom_and_leaves_the_deltas_whole(source):
    server, held = Server(), []
    try:
        work(20, held)
        server.build(source.snapshot(True))
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(128 * MiB, dtype=torch.uint8)
        at_oom = the_device_s_own(source)
        work(10, held)  # the job goes on after the OOM before the OOM snapshot is fetched
        oom = server.build(source.oom_snapshot(), TraceEntries())
        assert oom["device_traces"] == at_oom["device_traces"] and oom["device_traces"][0][-1]["action"] == "oom"
        assert server.build(source.snapshot(True))["device_traces"] == the_device_s_own(source)["device_traces"]
    finally:
        server.close()
        del held


def test_a_packed_trace_gives_back_what_was_added_and_drops_its_oldest():
    trace = PackedTrace()
    added = [{"action": a, "size": 512 * (i + 1), "stream": 0, "stack": i - 1, "event": i, "addr": 4096 * i,
              "time_us": 10**15 + i} for i, a in enumerate(ACTIONS[:-1])]
    added.append({"action": "oom", "size": 1 << 40, "stream": 7, "stack": 3, "event": 9, "device_free": 12345})
    for e in added:
        trace.append(e)
    assert list(trace) == added and trace.appended == len(added)
    del trace[:3]
    assert list(trace) == added[3:] and len(trace) == len(added) - 3 and trace.appended == len(added)
    copy, new = trace.copy(since=len(added) - 2)
    assert new == 2 and list(unpack(copy[:])) == added[-2:]
    mirror = TraceMirror()
    rows, appended = mirror.update(trace.copy()[0][:], len(trace))
    assert list(unpack(rows)) == added[3:] and appended == len(trace)
    with pytest.raises(ValueError):
        mirror.update(b"\0" * 9, 1)
