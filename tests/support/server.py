"""The dashboard as a user runs it: `python app.py` (or `fragviz serve`) in a subprocess, on a free port."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

from tests.support.helpers import ROOT, free_port, wait_for


class Server:
    """`python app.py` (or, without samples, `fragviz serve`) in a subprocess. Its stderr (the request log, any
    traceback) goes to the file `log`, to be read with `logged()`, or to a temporary file: never to a pipe that
    no one reads, which fills after a few hundred requests and stops the server."""

    def __init__(self, db: str, env: dict | None = None, samples: bool = True, log: str | None = None) -> None:
        self.db = db
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, os.path.join(ROOT, "app.py"), "--db", db, "--port", str(self.port)]
        if not samples:
            args = [sys.executable, "-m", "fragviz.cli", "serve", "--db", db, "--port", str(self.port)]
        self._temporary = log is None
        if log is None:
            fd, log = tempfile.mkstemp(prefix="fragviz-server-", suffix=".log")
            os.close(fd)
        self.log_path = log
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(args, cwd=ROOT, env={**os.environ, **(env or {})},
                                     stdout=subprocess.DEVNULL, stderr=self._log)
        wait_for(self._up, f"the server on port {self.port}", deadline=90, interval=0.3, gone=self._exited)

    def _up(self) -> bool:
        try:
            urllib.request.urlopen(self.url + "/", timeout=2)
        except urllib.error.HTTPError:
            pass  # up, and answering (a token-protected server says 401)
        except OSError:
            return False
        return True

    def _exited(self) -> str | None:
        if self.proc.poll() is None:
            return None
        return "the server exited: " + self.logged()[-2000:]

    def get_json(self, path: str, headers: dict | None = None):
        req = urllib.request.Request(self.url + path, headers=headers or {})
        with urllib.request.urlopen(req, timeout=120) as resp:
            return json.loads(resp.read())

    def upload(self, path: str) -> int:
        """Upload a file through the HTTP API (the body is the file): its snapshot id."""
        req = urllib.request.Request(self.url + "/api/snapshots", data=open(path, "rb").read(), method="POST",
                                     headers={"Content-Type": "application/octet-stream",
                                              "X-Filename": os.path.basename(path)})
        try:
            with urllib.request.urlopen(req, timeout=300) as resp:
                return json.loads(resp.read())["id"]
        except (OSError, KeyError) as exc:  # a timeout or a refusal: say what the server said
            raise AssertionError(f"uploading {path} failed ({exc!r}); the server's log ends:\n"
                                 + self.logged()[-3000:]) from exc

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
        self._log.close()
        if self._temporary and os.path.exists(self.log_path):
            os.unlink(self.log_path)
