"""The library, compare and what-if pages in a real browser against a real server: the
compare page's event boxes and device pickers, in-app jumps that leave no error in the server's log, the
library's device counts and upload errors, the what-if figure's run colours and the recorded OOM."""
from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys

import pytest

from tests.support.helpers import REAL, ROOT
from tests.support.pages import wait_for_state, wait_settled
from tests.support.server import Server

from fragviz.replay.analysis import analyze
from fragviz.snapshot import load_snapshot
from fragviz.base.units import format_bytes

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
TWO_DEVICES = os.path.join(REAL, "layoutedit_dump_2dev.pickle")  # devices 0 and 1; device 1 holds the segments
TRAIN = os.path.join(ROOT, "sample_snapshots", "gpt_train.pickle.gz")
FRAG_SAMPLE = os.path.join(ROOT, "sample_snapshots", "gpt_train_fragmentation_oom.pickle.gz")
NOT_A_SNAPSHOT = os.path.join(REAL, "negative", "mygpt_not_a_snapshot.pickle")


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    where = tmp_path_factory.mktemp("pages")
    srv = Server(str(where / "store.sqlite"), log=str(where / "server.log"))
    yield srv
    srv.stop()


def report(path: str, device: int, at: int | None = None) -> dict:
    """`fragviz report FILE --json` of one device: read from the file, not through the store or the page."""
    args = [FRAGVIZ, "report", path, "--json", "--device", str(device)] + (["--at", str(at)] if at is not None else [])
    out = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
    return next(d for d in out["devices"] if d["device"] == device)


def peak(path: str, device: int) -> int:
    """The state of most allocated bytes of a device, from the file's replay (the compare page's default event)."""
    return int(analyze(load_snapshot(path)).replays[device].series["allocated"].argmax())


def summary_lines(d: dict) -> list[str]:
    """The compare page's figures of a state, as its summary card writes them."""
    return [f"reserved\n{format_bytes(d['reserved_bytes'])}", f"allocated\n{format_bytes(d['allocated_bytes'])}",
            f"fragmentation\n{d['fragmentation']:.1%}", f"non-releasable\n{format_bytes(d['non_releasable_bytes'])}",
            f"largest request the cache can serve\n{format_bytes(d['largest_free_block'])}",
            f"cached free\n{format_bytes(d['free_bytes'])}", f"free scatter\n{d['free_scatter']:.1%}",
            f"segments\n{d['segments']}"]


def raw(path: str) -> dict:
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as fh:
        return pickle.load(fh)


def side(page, label: str) -> str:
    """The text of one side's summary card ('A' or 'B')."""
    return page.locator(f"#compare-summary section:has(h3:text-matches('^{label}: '))").inner_text()


def wait_summary(page, text: str) -> None:
    """Until the compare summary says `text` (bounded by the page's default wait, tests/browser/conftest.py)."""
    page.wait_for_function("(document.querySelector('#compare-summary') || {innerText: ''}).innerText"
                           f".includes({json.dumps(text)})")


def console_errors(page, allowed: str | None = None) -> list[str]:
    return [e for e in page.errors if not (allowed and allowed in e)]


def test_compare_event_box_takes_a_click_and_seven_digits(page, logged):
    sid = logged.sample_id("gpt_train.pickle.gz")
    page.goto(f"{logged.url}/compare?a={sid}&b={sid}")
    wait_summary(page, 'B: ')
    box = page.locator("#compare-eb").bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # a person's click, no focus()
    assert page.evaluate("document.activeElement.id") == "compare-eb"
    page.keyboard.press("Control+A")  # the box holds B's peak
    page.keyboard.type("40")
    page.keyboard.press("Enter")
    page.wait_for_function("location.search.includes('eb=40')")
    wait_summary(page, 'after 40 events')
    b = side(page, "B")
    assert b.startswith("B: gpt_train.pickle.gz, cuda:0, after 40 events")
    assert all(line in b for line in summary_lines(report(TRAIN, 0, at=40)))
    n = len(raw(TRAIN)["device_traces"][0])
    assert f"after {peak(TRAIN, 0)} events" in side(page, "A")  # A left at its peak

    # a 7-digit event fits in the box, and is answered (here: past the trace's end)
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.keyboard.press("Control+A")
    page.keyboard.type("1234567")
    fits = page.evaluate("(() => { const e = document.querySelector('#compare-eb');"
                         " return [e.value, e.scrollWidth <= e.clientWidth, e.clientWidth]; })()")
    assert fits[0] == "1234567" and fits[1], fits
    page.keyboard.press("Enter")
    wait_summary(page, 'out of range')
    assert f"event 1234567 is out of range for device 0 (its trace has {n} events)" in \
        page.locator("#compare-summary").inner_text()
    assert console_errors(page) == []


def test_compare_the_chosen_devices(page, logged):
    sid = logged.upload(TWO_DEVICES)
    page.goto(f"{logged.url}/compare?a={sid}&b={sid}")
    wait_summary(page, 'B: ')
    assert side(page, "A").startswith("A: layoutedit_dump_2dev.pickle, cuda:0, ")
    page.click("#compare-device-a")
    page.click("[role=option]:has-text('cuda:1')")
    page.wait_for_function("location.search.includes('da=1')")
    wait_summary(page, 'cuda:1')
    a, b = side(page, "A"), side(page, "B")
    assert report(TWO_DEVICES, 1)["segments"] == 673 and report(TWO_DEVICES, 0)["segments"] == 0  # SOURCES.md
    # each side at its own peak: a new device puts its side at that device's peak
    one, zero = report(TWO_DEVICES, 1, at=peak(TWO_DEVICES, 1)), report(TWO_DEVICES, 0, at=peak(TWO_DEVICES, 0))
    assert a.startswith(f"A: layoutedit_dump_2dev.pickle, cuda:1, after {peak(TWO_DEVICES, 1)} events")
    assert all(line in a for line in summary_lines(one)), a
    assert b.startswith("B: layoutedit_dump_2dev.pickle, cuda:0, ")
    assert all(line in b for line in summary_lines(zero)), b
    assert page.locator("#compare-table td").count() > 0  # device 1's sites, gone on device 0

    # the view is in the URL: opened afresh, the same devices
    page.goto(f"{logged.url}/compare?a={sid}&da=1&b={sid}&db=0")
    wait_summary(page, 'cuda:1')
    assert page.locator("#compare-device-a").inner_text() == "cuda:1"
    assert all(line in side(page, "A") for line in summary_lines(one))
    assert console_errors(page) == []


def test_in_app_jumps_leave_no_error_in_the_server_log(page, logged):
    sid = logged.sample_id("gpt_train.pickle.gz")
    start = logged.log_size()
    page.goto(f"{logged.url}/snapshots/{sid}?device=0&event=40")
    wait_for_state(page)
    page.click(".fv-header nav a:text-is('Library')")  # a dcc.Link: the app routes it, no reload
    page.wait_for_selector("#library-table table")
    page.wait_for_load_state("networkidle")
    page.click(f"#library-table a[href='/snapshots/{sid}']")
    wait_for_state(page)
    page.click("a.fv-action:text-is('compare…')")
    page.wait_for_function(f"location.pathname === '/compare' && location.search.includes('a={sid}')")
    page.wait_for_selector("#compare-a")
    page.wait_for_load_state("networkidle")
    page.go_back()  # back to the snapshot page, then the what-if link
    wait_for_state(page)
    page.click("a.fv-action:text-is('what if…')")
    page.wait_for_selector("#whatif-run")
    page.wait_for_load_state("networkidle")
    log = logged.logged(start)
    assert "POST /_dash-update-component" in log  # the log holds the callbacks' requests: their absence is not it
    assert '" 500 ' not in log and "Traceback" not in log and "Exception on" not in log, log[-3000:]
    assert console_errors(page) == []


def devices_of(path: str) -> list[int]:
    """The devices a snapshot file holds something on: its segments' devices and its non-empty traces."""
    data = raw(path)
    return sorted({s["device"] for s in data["segments"]} | {i for i, t in enumerate(data["device_traces"]) if t})


def test_library_says_how_many_devices(page, logged):
    sid = logged.upload(TWO_DEVICES)
    assert devices_of(TWO_DEVICES) == [0, 1] and devices_of(TRAIN) == [0]
    page.goto(logged.url + "/")
    page.wait_for_selector("#library-table table")
    row = page.locator(f"#library-table tr:has(a[href='/snapshots/{sid}'])")
    assert row.locator("td").nth(1).inner_text() == "2 (cuda:0, cuda:1)"
    train = page.locator(f"#library-table tr:has(a[href='/snapshots/{logged.sample_id('gpt_train.pickle.gz')}'])")
    assert train.locator("td").nth(1).inner_text() == "1 (cuda:0)"
    assert console_errors(page) == []


def bad_files(tmp_path) -> dict[str, str]:
    """Real and hand-made bad files, and the problem the page must state for each (in words, no b'...')."""
    made = {"notes.pickle": b"hello\nworld, not a pickle\n",
            "bytes_keys.pickle": pickle.dumps({b"segments": [], b"device_traces": []}),
            "numbers.pickle": pickle.dumps([1, 2, 3]),
            "cut_short.pickle": pickle.dumps({"segments": [{"address": 1}] * 50})[:40]}
    for name, data in made.items():
        (tmp_path / name).write_bytes(data)
    return {NOT_A_SNAPSHOT: "is not a PyTorch memory snapshot: no 'segments' or 'device_traces' key (keys: betekenisvol",
            str(tmp_path / "notes.pickle"): 'is not a snapshot: unrecognised content starting with "hello\\x0awo"',
            str(tmp_path / "bytes_keys.pickle"): 'keys: "device_traces" (bytes), "segments" (bytes)',
            str(tmp_path / "numbers.pickle"): "is not a PyTorch memory snapshot: a list of 3 items whose first is 1, "
                                              "not a segment",
            str(tmp_path / "cut_short.pickle"): "is a corrupt pickle (pickle data was truncated)"}


def test_upload_errors_name_the_file_once_and_say_the_problem(page, logged, tmp_path):
    files = bad_files(tmp_path)
    page.goto(logged.url + "/")
    page.wait_for_selector("#upload input[type=file]", state="attached")
    assert not page.locator("#upload input[type=file]").is_visible()  # one control: the area itself
    assert page.locator("#upload").inner_text().count("choose files") == 1
    with page.expect_file_chooser() as chooser:
        page.mouse.click(*centre(page, "#upload"))
    chooser.value.set_files(list(files))
    page.wait_for_function(f"document.querySelectorAll('#upload-results .fv-bad').length >= {len(files)}",
                           timeout=120000)
    rows = page.evaluate("[...document.querySelectorAll('#upload-results .fv-upload-row')].map(r => r.innerText)")
    for path, problem in files.items():
        name = os.path.basename(path)
        (row,) = [r for r in rows if r.startswith(name)]
        assert row.count(name) == 1 and problem in row, row
        assert "b'" not in row and 'b"' not in row and row.strip().count("\n") <= 1, row  # name, then one line
    names = [r["name"] for r in logged.get_json("/api/snapshots")]
    assert not set(map(os.path.basename, files)) & set(names)  # a bad file stores nothing

    # and from the keyboard: Enter opens the chooser (once the library has redrawn after the uploads: a redraw
    # under the focus would take it away)
    wait_settled(page)
    page.focus("#upload")
    page.wait_for_function("document.activeElement && document.activeElement.id === 'upload'")
    with page.expect_file_chooser():
        page.keyboard.press("Enter")
    assert console_errors(page, allowed="status of 422") == []


def centre(page, selector: str) -> tuple[float, float]:
    box = page.locator(selector).bounding_box()
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


def test_whatif_runs_have_their_own_colours_and_the_recorded_oom_is_marked(page, logged):
    trace = raw(FRAG_SAMPLE)["device_traces"][0]
    (oom,) = [i for i, e in enumerate(trace) if e["action"] == "oom"]
    page.goto(f"{logged.url}/whatif/{logged.sample_id('gpt_train_fragmentation_oom.pickle.gz')}?device=0")
    page.wait_for_selector("#whatif-run")
    page.fill("#whatif-conf", "expandable_segments:True")
    page.click("#whatif-run")
    page.wait_for_function("(() => { const p = document.querySelector('#whatif-timeline .js-plotly-plot');"
                           " return p && p.data && p.data.length === 4; })()", timeout=120000)
    plot = "document.querySelector('#whatif-timeline .js-plotly-plot')"
    lines = dict(page.evaluate(f"{plot}.data.map(t => [t.name, t.line.color])"))
    assert set(lines) == {"reserved, recorded", "fragmentation, recorded", "reserved, expandable_segments:True",
                          "fragmentation, expandable_segments:True"}
    assert lines["fragmentation, recorded"] != lines["fragmentation, expandable_segments:True"]
    assert lines["reserved, recorded"] == lines["fragmentation, recorded"]  # a run keeps its colour
    shapes = page.evaluate(f"{plot}.layout.shapes.map(s => [s.x0, s.x1])")
    assert shapes == [[oom, oom]]
    notes = page.evaluate(f"{plot}.layout.annotations.map(a => [a.x, a.text])")
    assert notes == [[oom, f"recorded OOM (event {oom})"]]
    # drawn: the label is on the page, not only in the figure's data
    page.wait_for_function(f"document.querySelector('#whatif-timeline').textContent.includes('recorded OOM (event {oom})')")
    assert console_errors(page) == []
