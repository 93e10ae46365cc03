"""The right device everywhere, in a real browser against a real server, on real multi-device snapshots: the
snapshot page opens on the device of the first OOM without rewriting its URL, its OOM card follows the page's
device, names device and event and links to the OOM's state; the what-if page picks its device and says which
device its results are of; the library says where it sums over devices.

No real snapshot in ../shared/real_snapshots records an `oom` trace action (SOURCES.md says so), so the OOM case
is the real two-device layoutedit_dump_2dev.pickle (segments on device 1) with one `oom` entry appended to
device 1's trace, written to a temporary folder; the what-if case puts two real single-device workloads on
devices 0 and 1 of one file (no real file has a workload on a device other than 0)."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest

from tests.support.server import Server
from tests.support.helpers import REAL, write_pickle

from fragviz.base.units import format_bytes

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
TWO_DEVICES = os.path.join(REAL, "layoutedit_dump_2dev.pickle")  # device 0: no segment; device 1: 10.5 GiB
SMALL = os.path.join(REAL, "cs336silmont_small.pickle")  # 97 events on device 0
MINI = os.path.join(REAL, "nuggets_nightly_mini.pickle")  # 50 events on device 0
REQUEST = 2 * 2**30  # more than device 1's cache and the device's free memory (0) could give: exhaustion
OOM_EVENT = 1  # the appended entry's index: device 1's trace holds one event before it


def read(path: str) -> dict:
    with open(path, "rb") as fh:
        return pickle.load(fh)


def with_oom_on_device_1(data: dict) -> dict:
    """The snapshot with an `oom` entry as PyTorch writes one (addr: the device's free bytes) after device 1's
    last event."""
    trace = data["device_traces"][1]
    trace.append({"action": "oom", "addr": 0, "size": REQUEST, "stream": 0, "time_us": trace[-1]["time_us"] + 1,
                  "frames": []})
    return data


def on_device(data: dict, device: int) -> tuple[list[dict], list[dict]]:
    """A single-device snapshot's segments and trace, moved to `device`."""
    return [{**s, "device": device} for s in data["segments"]], data["device_traces"][0]


def two_workloads() -> dict:
    """MINI's workload on device 0 and SMALL's on device 1, in one file."""
    mini, small = read(MINI), read(SMALL)
    seg0, trace0 = on_device(mini, 0)
    seg1, trace1 = on_device(small, 1)
    return {"segments": seg0 + seg1, "device_traces": [trace0, trace1],
            "allocator_settings": mini["allocator_settings"]}


def cli_json(*args: str) -> dict:
    return json.loads(subprocess.run([FRAGVIZ, *args, "--json"], capture_output=True, text=True, check=True).stdout)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    where = tmp_path_factory.mktemp("devices")
    oom = with_oom_on_device_1(read(TWO_DEVICES))
    return {"oom": write_pickle(str(where / "layoutedit_dump_2dev_oom.pickle"), oom),
            "pair": write_pickle(str(where / "mini_and_small.pickle"), two_workloads())}


@pytest.fixture(scope="module")
def server(tmp_path_factory, files):
    where = tmp_path_factory.mktemp("devices-server")
    srv = Server(str(where / "store.sqlite"), samples=False, log=str(where / "server.log"))
    try:
        srv.ids = {name: srv.upload(path) for name, path in files.items()}
        srv.ids["small"] = srv.upload(SMALL)
        yield srv
    finally:
        srv.stop()


def text_of(page, selector: str) -> str:
    return page.locator(selector).inner_text()


def wait_text(page, selector: str, text: str, timeout: int = 60000) -> None:
    page.wait_for_function(f"(document.querySelector({json.dumps(selector)}) || {{innerText: ''}}).innerText"
                           f".includes({json.dumps(text)})", timeout=timeout)


def pick(page, picker: str, label: str) -> None:
    page.click(picker)
    page.click(f"[role=option]:has-text('{label}')")


def no_server_errors(server) -> None:
    log = server.logged()
    assert '" 500 ' not in log and "Traceback" not in log and "Exception on" not in log, log[-3000:]


def test_the_snapshot_page_opens_on_the_oom_device_and_its_card_names_it(page, server, files):
    sid = server.ids["oom"]
    (oom,) = cli_json("doctor", files["oom"])["ooms"]  # read from the file, not through the store
    assert oom["verdict"] == "exhaustion" and oom["requested_bytes"] == REQUEST
    page.goto(f"{server.url}/snapshots/{sid}")
    title = f"True exhaustion on cuda:1 at event {OOM_EVENT}"
    wait_text(page, "#oom-verdict", title)
    wait_text(page, "#event-info", "after 2 of 2 events")  # device 1's two events, not device 0's one
    assert text_of(page, "#device") == "cuda:1"
    assert text_of(page, "#snapshot-sub").endswith("2 trace events on device 1")
    assert page.locator("#oom-verdict h4").all_inner_texts() == [title]
    assert format_bytes(REQUEST) in text_of(page, "#oom-verdict")
    assert page.get_attribute("#snapshot-whatif-link", "href") == f"/whatif/{sid}?device=1"
    page.wait_for_load_state("networkidle")
    assert page.evaluate("location.search") == ""  # opened without a device, the URL is left as it came

    # the card's link: the OOM's state, a choice of its own in the history
    link = page.locator("#oom-verdict a.fv-oom-link")
    assert link.get_attribute("href") == f"/snapshots/{sid}?device=1&event={OOM_EVENT}"
    link.click()
    page.wait_for_function(f"location.search === '?device=1&event={OOM_EVENT}'")
    wait_text(page, "#event-info", f"after {OOM_EVENT} of 2 events")
    page.go_back()
    page.wait_for_function("location.search === ''")
    wait_text(page, "#event-info", "after 2 of 2 events")
    assert page.errors == []
    no_server_errors(server)


def test_the_oom_card_follows_the_device_picked_and_the_url(page, server):
    sid = server.ids["oom"]
    page.goto(f"{server.url}/snapshots/{sid}?device=1")
    wait_text(page, "#oom-verdict", "on cuda:1")
    pick(page, "#device", "cuda:0")
    page.wait_for_function("location.search === '?device=0'")
    wait_text(page, "#oom-verdict", "No out-of-memory error is recorded on cuda:0.")
    card = text_of(page, "#oom-verdict")
    assert f"cuda:1 records 1 OOM: the first at event {OOM_EVENT}" in card and "exhaustion" not in card
    wait_text(page, "#snapshot-sub", "1 trace events on device 0")  # what follows the device beside the card
    page.wait_for_function(f"document.querySelector('#snapshot-whatif-link').getAttribute('href')"
                           f" === '/whatif/{sid}?device=0'")
    wait_text(page, "#timeline-note", "a single event")  # device 0's trace: one `snapshot` entry

    # a link to another device's OOM moves the picker, and the card with it; Back moves both back
    page.click("#oom-verdict a.fv-oom-link")
    page.wait_for_function(f"location.search === '?device=1&event={OOM_EVENT}'")
    wait_text(page, "#oom-verdict", f"True exhaustion on cuda:1 at event {OOM_EVENT}")
    wait_text(page, "#device", "cuda:1")
    wait_text(page, "#snapshot-sub", "2 trace events on device 1")
    page.go_back()
    page.wait_for_function("location.search === '?device=0'")
    wait_text(page, "#device", "cuda:0")
    wait_text(page, "#oom-verdict", "No out-of-memory error is recorded on cuda:0.")
    assert page.errors == []
    no_server_errors(server)


def test_the_whatif_page_picks_its_device(page, server):
    sid = server.ids["oom"]
    page.goto(f"{server.url}/whatif/{sid}")  # no device: the OOM's, as on the snapshot page
    wait_text(page, "#whatif-status", "device 1's trace holds 2 events but no alloc")
    assert text_of(page, "#whatif-device") == "cuda:1"
    assert page.get_attribute("#whatif-snapshot-link", "href") == f"/snapshots/{sid}?device=1"
    pick(page, "#whatif-device", "cuda:0")
    page.wait_for_function("location.search === '?device=0'")
    wait_text(page, "#whatif-status", "device 0's trace holds 1 events but no alloc")
    page.wait_for_function(f"document.querySelector('#whatif-snapshot-link').getAttribute('href')"
                           f" === '/snapshots/{sid}?device=0'")
    page.go_back()
    page.wait_for_function("location.search === ''")
    wait_text(page, "#whatif-status", "device 1's trace holds 2 events but no alloc")
    wait_text(page, "#whatif-device", "cuda:1")
    assert page.errors == []


def peak_reserved_cells(page) -> list[str]:
    return page.evaluate("[...document.querySelectorAll('#whatif-status table tbody tr')]"
                         ".map(r => r.cells[1].innerText)")


def test_the_whatif_runs_on_the_chosen_device_and_says_so(page, server, files):
    sid = server.ids["pair"]
    conf = "expandable_segments:True"
    expected = {d["device"]: d for d in cli_json("simulate", files["pair"], "--alloc-conf", conf)["devices"]}
    cells = {d: [format_bytes(v) for v in (e["recorded"]["peak_reserved_bytes"], e["baseline"]["peak_reserved_bytes"],
                                           e["peak_reserved_bytes"])] for d, e in expected.items()}
    assert cells[0] != cells[1]  # two workloads: the figures tell which device ran
    page.goto(f"{server.url}/whatif/{sid}?device=0")
    page.wait_for_selector("#whatif-run")
    pick(page, "#whatif-device", "cuda:1")
    page.wait_for_function("location.search === '?device=1'")
    wait_text(page, "#whatif-body", "on cuda:1: recorded and simulated")  # the new device's own controls
    page.fill("#whatif-conf", conf)
    page.click("#whatif-run")
    page.wait_for_selector("#whatif-status table", timeout=120000)
    assert "On cuda:1: its recorded run, and its workload simulated." in text_of(page, "#whatif-status")
    assert peak_reserved_cells(page) == cells[1]
    page.wait_for_function("(() => { const p = document.querySelector('#whatif-timeline .js-plotly-plot');"
                           " return p && p.data && p.data.length === 4; })()")
    assert page.errors == []
    no_server_errors(server)


def test_the_library_says_where_it_sums_over_devices(page, server, files):
    page.goto(server.url + "/")
    page.wait_for_selector("#library-table table")
    heads = page.evaluate("[...document.querySelectorAll('#library-table thead th')].map(c => c.innerText)")
    by_name = {r[0]: dict(zip(heads, r)) for r in page.evaluate(
        "[...document.querySelectorAll('#library-table tbody tr')].map(r => [...r.cells].map(c => c.innerText))")}
    report = cli_json("report", files["oom"])["devices"]
    reserved = sum(d["reserved_bytes"] for d in report)
    row = by_name["layoutedit_dump_2dev_oom.pickle"]
    assert row["devices"] == "2 (cuda:0, cuda:1)"
    assert row["reserved"] == f"{format_bytes(reserved)} (total over 2 devices)"
    assert row["peak reserved"].endswith(" (total over 2 devices)") and row["OOMs"] == "1 (total over 2 devices)"
    single = by_name["cs336silmont_small.pickle"]
    assert "total over" not in " ".join(single.values()) and single["devices"] == "1 (cuda:0)"
    assert page.errors == []
