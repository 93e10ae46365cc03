"""A real fragviz server in a subprocess and Debian's Chromium driven by Playwright."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`python app.py` (or, without samples, `fragviz serve`) in a subprocess; with `log`, its stderr (the
    request log, any traceback) goes to that file, to be read with `logged()`."""

    def __init__(self, db: str, env: dict | None = None, samples: bool = True, log: str | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, os.path.join(ROOT, "app.py"), "--db", db, "--port", str(self.port)]
        if not samples:
            args = [sys.executable, "-m", "fragviz.cli", "serve", "--db", db, "--port", str(self.port)]
        self.log_path = log
        self._log = open(log, "wb") if log else None
        self.proc = subprocess.Popen(args, cwd=ROOT, env={**os.environ, **(env or {})},
                                     stdout=subprocess.DEVNULL, stderr=self._log or subprocess.PIPE)
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                urllib.request.urlopen(self.url + "/", timeout=2)
                return
            except urllib.error.HTTPError:
                return  # up, and answering (a token-protected server says 401)
            except OSError:
                if self.proc.poll() is not None:
                    said = self.logged() if self._log else self.proc.stderr.read().decode()
                    raise RuntimeError("the server exited: " + said[-2000:])
                time.sleep(0.3)
        raise RuntimeError("the server did not start within 90 s")

    def get_json(self, path: str, headers: dict | None = None):
        req = urllib.request.Request(self.url + path, headers=headers or {})
        with urllib.request.urlopen(req, timeout=120) as resp:
            return json.loads(resp.read())

    def upload(self, path: str) -> int:
        """Upload a file through the HTTP API (the body is the file): its snapshot id."""
        req = urllib.request.Request(self.url + "/api/snapshots", data=open(path, "rb").read(), method="POST",
                                     headers={"Content-Type": "application/octet-stream",
                                              "X-Filename": os.path.basename(path)})
        with urllib.request.urlopen(req, timeout=120) as resp:
            return json.loads(resp.read())["id"]

    def sample_id(self, name: str) -> int:
        """The id of the stored snapshot named `name` (a bundled sample, say)."""
        return next(r["id"] for r in self.get_json("/api/snapshots") if r["name"] == name)

    def logged(self, since: int = 0) -> str:
        """What the server wrote to its log file, from byte `since` on."""
        with open(self.log_path, "rb") as fh:
            fh.seek(since)
            return fh.read().decode(errors="replace")

    def log_size(self) -> int:
        return os.path.getsize(self.log_path)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if self._log:
            self._log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(str(tmp_path_factory.mktemp("ui") / "store.sqlite"))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (scripts/setup.sh does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = context.new_page()
    pg.errors = []
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    pg.on("dialog", lambda d: (pg.errors.append(f"dialog: {d.message}"), d.dismiss()))
    yield pg
    context.close()
