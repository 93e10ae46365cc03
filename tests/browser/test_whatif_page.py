"""The what-if page in a real browser against a real server: it refuses a snapshot without a trace, and sets a
recorded OOM beside the simulated runs, claiming only what the simulation covered."""
from __future__ import annotations

import gzip
import json
import os
import pickle
import urllib.request
import uuid

from tests.support.helpers import REAL, ROOT

FRAG_SAMPLE = os.path.join(ROOT, "sample_snapshots", "gpt_train_fragmentation_oom.pickle.gz")


def upload(server, path: str) -> int:
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{os.path.basename(path)}\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode() + open(path, "rb").read() \
        + f"\r\n--{boundary}--\r\n".encode()
    req = urllib.request.Request(server.url + "/api/snapshots", data=body, method="POST",
                                 headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())["id"]


def table_rows(page) -> list[list[str]]:
    return page.evaluate("[...document.querySelectorAll('#whatif-status table tbody tr')]"
                         ".map(r => [...r.cells].map(c => c.innerText))")


def simulate(page, conf: str, memory: str = "") -> None:
    page.fill("#whatif-conf", conf)
    page.fill("#whatif-memory", memory)
    page.click("#whatif-run")
    page.wait_for_selector("#whatif-status table", timeout=120000)


def test_a_snapshot_without_a_trace_cannot_be_simulated(page, server):
    sid = upload(server, os.path.join(REAL, "cs336kk_notrace_75gb.pickle"))
    page.goto(f"{server.url}/whatif/{sid}?device=0")
    page.wait_for_selector("#whatif-status")
    assert page.locator("#whatif-status").inner_text().startswith(
        "Cannot simulate this snapshot: device 0 has no trace (memory history was off")
    assert page.locator("#whatif-run").count() == 0 and page.locator("#whatif-timeline").count() == 0
    assert page.errors == []


def recorded_by_hand() -> tuple[int, int, int]:
    """Peak reserved, the OOM's event and its request, walking the sample's raw trace from its empty start."""
    with gzip.open(FRAG_SAMPLE, "rb") as fh:
        trace = pickle.load(fh)["device_traces"][0]
    reserved = peak = 0
    for e in trace:
        reserved += {"segment_alloc": e["size"], "segment_free": -e["size"]}.get(e["action"], 0)
        peak = max(peak, reserved)
    (k,) = [i for i, e in enumerate(trace) if e["action"] == "oom"]
    return peak, k, trace[k]["size"]


def test_a_recorded_oom_stands_beside_the_simulated_runs(page, server):
    peak, event, _ = recorded_by_hand()
    page.goto(f"{server.url}/whatif/{server.sample_id('gpt_train_fragmentation_oom.pickle.gz')}?device=0")
    page.wait_for_selector("#whatif-run")
    simulate(page, "expandable_segments:True")
    recorded, baseline, given = table_rows(page)
    assert recorded == ["recorded", f"{peak / 2**20:.2f} MiB", recorded[2], f"1 OOM(s), the first at event {event}"]
    assert baseline[0] == "simulated, recorded settings" and baseline[3] == f"1 OOM(s), the first at event {event}"
    assert given[0] == "simulated, expandable_segments:True" and given[3] == "no OOM up to the end of the recording"
    status = page.locator("#whatif-status").inner_text()
    assert "Device size 1.00 GiB (the first recorded OOM)." in status
    assert "Result: expandable_segments:True gets past the recorded failure" in status  # the sample ends there
    assert "the rest of the run was not recorded" in status and "avoids" not in status
    page.wait_for_function("(() => { const p = document.querySelector('#whatif-timeline .js-plotly-plot');"
                           " return p && p.data && p.data.length === 4; })()")
    names = page.evaluate("document.querySelector('#whatif-timeline .js-plotly-plot').data.map(t => t.name)")
    assert names == ["reserved, recorded", "fragmentation, recorded", "reserved, expandable_segments:True",
                     "fragmentation, expandable_segments:True"]
    assert page.errors == []


def test_no_oom_claim_without_a_device_size(page, server):
    page.goto(f"{server.url}/whatif/{server.sample_id('gpt_train.pickle.gz')}?device=0")
    page.wait_for_selector("#whatif-run")
    simulate(page, "expandable_segments:True")
    _, baseline, given = table_rows(page)
    assert baseline[3] == given[3] == "not simulated (device size unknown)"
    assert "Cannot tell: the device size is unknown" in page.locator("#whatif-status").inner_text()
    simulate(page, "expandable_segments:True", "80GiB")
    page.wait_for_function("document.querySelector('#whatif-status').innerText.includes('Device size 80.00 GiB')")
    _, baseline, given = table_rows(page)
    assert baseline[3] == given[3] == "no OOM"
    assert "Result: with expandable_segments:True the run fits a device of 80.00 GiB: no OOM" in \
        page.locator("#whatif-status").inner_text()
    assert page.errors == []
