"""What browser tests do on the dashboard's pages: wait for a Plotly graph to draw, upload files through the
library page, and post a file to the HTTP API as the page's upload does."""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
import uuid


def wait_for_plot(page, graph_id: str, timeout: int = 30000) -> None:
    page.wait_for_function(f"(() => {{ const p = document.querySelector('#{graph_id} .js-plotly-plot');"
                           f" return p && p._fullData && p._fullData.length > 0; }})()", timeout=timeout)


def upload(page, server, *paths: str) -> None:
    page.goto(server.url + "/")
    page.wait_for_selector("#upload input[type=file]", state="attached")
    page.set_input_files("#upload input[type=file]", list(paths))
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
