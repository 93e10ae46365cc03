"""What browser tests do on the dashboard's pages: wait for a Plotly graph to draw, wait for the snapshot page's
state (drawn on canvases) and read or click what it drew, upload files through the library page, and post a
file to the HTTP API as the page's upload does."""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
import uuid

# Counts the page's Dash callback requests in flight (window.fvCallbacksInFlight), so that a test can wait for a
# page to settle: the renderer keeps its pending callbacks to itself.
COUNT_CALLBACKS = """
(() => {
  window.fvCallbacksInFlight = 0;
  const fetched = window.fetch;
  window.fetch = function (input, init) {
    const url = typeof input === 'string' ? input : (input && input.url) || '';
    if (!url.includes('_dash-update-component')) return fetched.apply(this, arguments);
    window.fvCallbacksInFlight += 1;
    return fetched.apply(this, arguments).finally(() => { window.fvCallbacksInFlight -= 1; });
  };
})();
"""


def wait_for_plot(page, graph_id: str, timeout: int = 30000) -> None:
    page.wait_for_function(f"(() => {{ const p = document.querySelector('#{graph_id} .js-plotly-plot');"
                           f" return p && p._fullData && p._fullData.length > 0; }})()", timeout=timeout)


def wait_settled(page, timeout: int = 90000) -> None:
    """Wait until no Dash callback is in flight: nothing left to redraw or move what a test is about to click."""
    page.wait_for_function("window.fvCallbacksInFlight === 0", timeout=timeout)


def click_plot(page, graph_id: str, fx: float, fy: float = 0.5) -> dict:
    """A person's click on a Plotly graph at a fraction (fx, fy) of its plot area, once the page has settled and
    Plotly has drawn its hover label there: Plotly reports a click on the point it hovers, so a click that lands
    before the hover (or on a plot redrawn under the pointer) reports nothing. The plot area's box."""
    wait_settled(page)
    area = page.locator(f"#{graph_id} .nsewdrag").first
    area.scroll_into_view_if_needed()
    box = area.bounding_box()
    x, y = box["x"] + box["width"] * fx, box["y"] + box["height"] * fy
    page.mouse.move(x - 3, y)
    page.mouse.move(x, y)
    page.wait_for_function(f"document.querySelector('#{graph_id} .hoverlayer').childElementCount > 0")
    page.mouse.click(x, y)
    return box


def wait_for_state(page, event: int | None = None, timeout: int = 30000) -> dict:
    """What the snapshot page's state view drew (fragviz.stateView.drawn(), assets/state_view.js), once it has
    drawn a state (the state after `event` events, where given)."""
    test = "d !== null" if event is None else f"d !== null && d.event === {int(event)}"
    page.wait_for_function(f"(() => {{ const v = window.fragviz && window.fragviz.stateView;"
                           f" const d = v && v.drawn(); return {test}; }})()", timeout=timeout)
    return page.evaluate("fragviz.stateView.drawn()")


def click_block(page, state: str = "active_allocated") -> dict:
    """Click the middle of the widest drawn block in `state` on the segment map's canvas; the block clicked."""
    drawn = wait_for_state(page)
    rows = [(r, b) for r in drawn["rows"] for b in r["blocks"] if b["state"] == state]
    row, block = max(rows, key=lambda rb: rb[1]["x1"] - rb[1]["x0"])
    canvas = page.locator("#segment-map canvas.fv-map-rows")
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    x, y = box["x"] + (block["x0"] + block["x1"]) / 2, box["y"] + (row["y0"] + row["y1"]) / 2
    page.mouse.move(x, y)
    page.mouse.click(x, y)
    return block


def upload(page, server, *paths: str) -> None:
    """Upload files through the library page. One file, once stored, opens its snapshot page (this waits for
    it, or for the file's error); several end as rows, a link or an error each."""
    page.goto(server.url + "/")
    page.wait_for_selector("#upload input[type=file]", state="attached")
    page.set_input_files("#upload input[type=file]", list(paths))
    if len(paths) == 1:
        page.wait_for_function("location.pathname.startsWith('/snapshots/') || "
                               "document.querySelector('#upload-results .fv-upload-row.fv-bad') !== null",
                               timeout=120000)
        return
    page.wait_for_function(f"document.querySelectorAll('#upload-results .fv-upload-row.fv-ok, "
                           f"#upload-results .fv-upload-row.fv-bad').length >= {len(paths)}", timeout=120000)


def post_file(server, path, data: bytes | None = None, name: str | None = None):
    data = data if data is not None else open(path, "rb").read()
    name = name or os.path.basename(path)
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    req = urllib.request.Request(server.url + "/api/snapshots", data=body, method="POST",
                                 headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return json.loads(resp.read()), resp.status
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read()), exc.code
