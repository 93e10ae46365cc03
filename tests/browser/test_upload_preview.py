"""An upload's first picture, on its page and through the API it follows,: while the server ingests a file, its page row shows requested and reserved bytes
over time, drawn from the trace before the replay, with the peaks and event count an independent replay gives."""
from __future__ import annotations

import os
import pickle

import numpy as np

import json
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest

from tests.support.server import Server
from fragviz.replay.analysis import analyze
from fragviz.replay.preview import POINTS
from fragviz.snapshot import load_snapshot
from fragviz.allocator.synth import synthetic_snapshot
from tests.support.helpers import REAL
from tests.support.pages import upload, wait_for_state


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def test_an_upload_shows_its_first_picture_then_its_link(page, server, tmp_path):
    path = tmp_path / "preview_steps.pickle"
    with open(path, "wb") as fh:
        pickle.dump(synthetic_snapshot(30000, seed=5), fh, protocol=4)
    replay = analyze(load_snapshot(str(path))).replays[0]
    n = len(replay.trace)

    notrace = os.path.join(REAL, "selectn_dev1_notrace.pickle")  # two files: the page stays, a row for each
    upload(page, server, str(path), notrace)
    page.wait_for_selector(".fv-preview svg polyline.fv-preview-reserved", timeout=60000)
    label = page.locator(".fv-preview-label").text_content()
    assert f"peak reserved {gib(int(np.max(replay.series['reserved'])))}" in label
    assert f"peak requested {gib(int(np.max(replay.series['requested'])))}" in label
    assert f"{n:,} events" in label
    points = page.locator("polyline.fv-preview-reserved").get_attribute("points").split()
    assert len(points) == min(POINTS, n + 1)
    ys = [float(p.split(",")[1]) for p in points]
    top = 12 + 110 - 110 / 1.1  # the reserved peak is drawn a tenth below the top (reserved is never below requested)
    assert abs(min(ys) - top) < 0.06
    assert page.locator("#upload-results .fv-ok a").all_inner_texts() == ["view it", "view it"]
    # one picture, of the file with a trace (a snapshot without one has no line over events to draw), and
    # no caption promising what the link now gives
    assert page.locator(".fv-preview").count() == 1 and page.locator(".fv-preview-note").count() == 0
    assert page.errors == []


def test_one_file_dropped_opens_its_snapshot_page(page, server):
    upload(page, server, os.path.join(REAL, "cs336silmont_small.pickle"))
    page.wait_for_url("**/snapshots/*")
    drawn = wait_for_state(page)
    assert drawn["event"] == drawn["n"] == 97
    assert page.locator("h2").inner_text() == "cs336silmont_small.pickle"
    assert page.errors == []


def test_the_server_tells_an_upload_s_progress_and_first_picture(tmp_path):
    path = tmp_path / "steps.pickle"
    with open(path, "wb") as fh:
        pickle.dump(synthetic_snapshot(150000, seed=6), fh, protocol=4)
    server = Server(str(tmp_path / "store.sqlite"), samples=False)
    try:
        upload_id = uuid.uuid4().hex
        answer = {}

        def send():
            req = urllib.request.Request(server.url + "/api/snapshots", data=path.read_bytes(), method="POST",
                                         headers={"Content-Type": "application/octet-stream",
                                                  "X-Filename": "steps.pickle", "X-Upload-Id": upload_id})
            with urllib.request.urlopen(req, timeout=300) as resp:
                answer.update(json.loads(resp.read()))

        sender = threading.Thread(target=send)
        sender.start()
        seen = []
        while sender.is_alive():
            try:
                state = server.get_json(f"/api/uploads/{upload_id}")
                seen.append(state["phase"])
            except urllib.error.HTTPError as exc:
                assert exc.code == 404  # not yet registered, or already done
            time.sleep(0.05)
        sender.join()
        assert answer["status"] == "ingested"
        final = server.get_json(f"/api/uploads/{upload_id}")  # kept a while for the page's last look
        assert final["phase"] == "store" and final["done"] == final["total"] == 150000
        replay = analyze(load_snapshot(str(path))).replays[0]
        [picture] = final["preview"]
        assert picture["events"] == 150000
        assert max(picture["requested"]) == int(np.max(replay.series["requested"]))
        assert {"replay"} & set(seen) or {"parse", "store"} & set(seen), "the phases show while it runs"
        with pytest.raises(urllib.error.HTTPError) as info:
            server.get_json("/api/uploads/not-an-upload-at-all")
        assert info.value.code == 404
        # the page asks while it still sends: an id the server has not seen yet is being sent, not missing
        assert server.get_json("/api/uploads/not-an-upload-at-all?sending=1") == {
            "phase": "send", "done": 0, "total": 0, "preview": None}
        with pytest.raises(urllib.error.HTTPError) as info:
            server.get_json("/api/uploads/bad.id?sending=1")  # not an id an upload can have
        assert info.value.code == 404
    finally:
        server.stop()
