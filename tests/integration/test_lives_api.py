"""GET /api/snapshots/<id>/devices/<d>/lives from a real server: the binary answer decoded as its docstring
says (fragviz.ui.http.lives_api), the state it gives after an event (rows whose span holds it, filtered here)
equal to /api/snapshots/<id>/state's, and the refusals: a trace over page_state_events, an unknown device."""
from __future__ import annotations

import json
import struct
import urllib.error
import urllib.request

import numpy as np
import pytest

from tests.support.helpers import real
from tests.support.server import Server

FILES = ("hanmin_train_19k.pickle", "verl_mempools_pending.pickle", "selectn_dev1_notrace.pickle")
STATES = {0: "active_allocated", 1: "active_pending_free", 2: "inactive"}


@pytest.fixture(scope="module")
def server(tmp_path_factory, real_dir):
    folder = tmp_path_factory.mktemp("lives_api")
    srv = Server(str(folder / "store.sqlite"), samples=False, env={"FRAGVIZ_PAGE_STATE_EVENTS": "15000"})
    try:
        ids = {name: srv.upload(real(name)) for name in FILES}
        yield srv, ids
    finally:
        srv.stop()


def fetch(srv: Server, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(srv.url + path, timeout=120) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def decode(body: bytes) -> tuple[dict, dict[str, dict[str, np.ndarray]]]:
    assert body[:8] == b"FVLIVES1"
    (length,) = struct.unpack("<I", body[8:12])
    header = json.loads(body[12:12 + length])
    base = 12 + length
    assert base % 8 == 0
    tables: dict[str, dict[str, np.ndarray]] = {"segments": {}, "blocks": {}}
    for table, name, dtype, offset in header["columns"]:
        assert offset % 8 == 0
        tables[table][name] = np.frombuffer(body, "<" + dtype, header[table], base + offset)
    return header, tables


def state_from(tables: dict[str, dict[str, np.ndarray]], k: int) -> list[dict]:
    """The segments after k events as /api/.../state gives them, from the rows alive at k."""
    segs, blocks = tables["segments"], tables["blocks"]
    alive = np.flatnonzero((blocks["first"] <= k) & (k < blocks["end"]))
    out = []
    for row in sorted(np.flatnonzero((segs["first"] <= k) & (k < segs["end"])), key=lambda r: segs["address"][r]):
        lo, hi = int(segs["address"][row]), int(segs["address"][row] + segs["size"][row])
        mine = sorted((r for r in alive if lo <= blocks["address"][r] < hi), key=lambda r: blocks["address"][r])
        listed = [{"address": int(blocks["address"][r]), "size": int(blocks["size"][r]),
                   "requested_size": int(blocks["requested"][r]), "state": STATES[int(blocks["state"][r])],
                   "stack": int(blocks["stack"][r])} for r in mine]
        out.append({"address": lo, "total_size": hi - lo, "blocks": with_gaps(lo, hi, listed)})
    return out


def with_gaps(lo: int, hi: int, listed: list[dict]) -> list[dict]:
    if any(b["state"] == "inactive" for b in listed):
        return listed  # the last state lists its free blocks
    out, cursor = [], lo
    for b in listed:
        if b["address"] > cursor:
            out.append({"address": cursor, "size": b["address"] - cursor, "requested_size": 0, "state": "inactive",
                        "stack": -1})
        out.append(b)
        cursor = b["address"] + b["size"]
    if hi > cursor:
        out.append({"address": cursor, "size": hi - cursor, "requested_size": 0, "state": "inactive", "stack": -1})
    return out


def server_state(srv: Server, sid: int, device: int, k: int) -> list[dict]:
    got = srv.get_json(f"/api/snapshots/{sid}/state?device={device}&event={k}")
    return [{"address": s["address"], "total_size": s["total_size"], "blocks": s["blocks"]} for s in got["segments"]]


@pytest.mark.parametrize("name", FILES[1:])
def test_the_decoded_lives_give_the_server_s_state(server, name):
    srv, ids = server
    sid = ids[name]
    devices = next(r["devices"] for r in srv.get_json("/api/snapshots") if r["id"] == sid)
    for device in devices:
        status, body = fetch(srv, f"/api/snapshots/{sid}/devices/{device}/lives")
        assert status == 200, body[:200]
        header, tables = decode(body)
        n = header["states"] - 1
        assert header["device"] == device
        for k in sorted({0, n // 3, n // 2, n - 1, n} - {-1}):
            assert state_from(tables, k) == server_state(srv, sid, device, k), f"{name} device {device} event {k}"
        stacks = set(tables["blocks"]["stack"].tolist()) - {-1}
        assert set(map(int, header["sites"])) <= stacks | set(tables["segments"]["stack"].tolist())


def test_a_trace_over_the_budget_is_413_and_an_unknown_device_404(server):
    srv, ids = server
    status, body = fetch(srv, f"/api/snapshots/{ids['hanmin_train_19k.pickle']}/devices/0/lives")
    assert status == 413
    assert "over page_state_events (15,000)" in json.loads(body)["error"]
    status, body = fetch(srv, f"/api/snapshots/{ids['verl_mempools_pending.pickle']}/devices/7/lives")
    assert status == 404 and "has no device 7" in json.loads(body)["error"]
