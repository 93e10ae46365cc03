"""The dashboard's web door, against the real server (`python -m fragviz serve` in a subprocess) over real
HTTP and raw sockets: uploads streamed in constant memory, the size limit, the upload slots, read timeouts,
the minimum rate, binding, Host and same-origin checks, tokens (Bearer, a cookie of this server's and this
run's own, never logged), framing, a busy store, upload names, deep JSON, and ingest children that end with
their upload (the client gone, the server stopped or killed) leaving no file behind.

No timing asserts: every wait is on a condition, with a generous deadline. An ingest is caught in the middle
by stopping its child (SIGSTOP) once its progress shows, and let go (SIGCONT) once it has been told to end."""
from __future__ import annotations

import http.client
import json
import os
import pickle
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Iterable, Iterator
from urllib.parse import quote

import pytest

from fragviz.allocator.synth import synthetic_snapshot
from tests.support.helpers import MiB, block, free_port, segment, snapshot, wait_for, write_pickle
from tests.support.processes import children, command_line, proc_state, running

TOKEN = "tok-3f9a7c1e5b"
Answer = tuple[int, Any, bytes]  # status, headers, body


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRAGVIZ_")}
    env.update(extra)
    return env


class Served:
    """`python -m fragviz serve` on a free port, its stderr kept in a file."""

    def __init__(self, tmp: str, env: dict[str, str] | None = None, host: str = "127.0.0.1", args: Iterable[str] = (),
                 connect_to: str = "127.0.0.1", port: int | None = None) -> None:
        self.port, self.connect_to, self.host = port or free_port(), connect_to, host
        self.db = os.path.join(tmp, f"store-{self.port}.sqlite")
        self.err_path = os.path.join(tmp, f"serve-{self.port}.err")
        self._err = open(self.err_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "fragviz", "serve", "--db", self.db, "--host", host,
                                      "--port", str(self.port), *args], cwd=tmp, env=clean_env(**(env or {})),
                                     stdout=subprocess.DEVNULL, stderr=self._err)
        wait_for(self._up, "the server to answer", 120)

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"the server exited ({self.proc.returncode}): {self.stderr()[-2000:]}")
        try:
            self.request("GET", "/api/snapshots", timeout=5)
            return True
        except OSError:
            return False

    @property
    def host_header(self) -> str:
        return f"{self.connect_to}:{self.port}"

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
                timeout: float = 120) -> Answer:
        conn = http.client.HTTPConnection(self.connect_to, self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.headers, resp.read()
        finally:
            conn.close()

    def upload(self, data: bytes, name: str = "upload.pickle", headers: dict[str, str] | None = None) -> Answer:
        return self.request("POST", "/api/snapshots", data, {"Content-Type": "application/octet-stream",
                                                            "X-Filename": quote(name), **(headers or {})})

    def snapshots(self, headers: dict[str, str] | None = None) -> list[dict]:
        status, _, body = self.request("GET", "/api/snapshots", headers=headers)
        assert status == 200, body
        return json.loads(body)

    def stderr(self) -> str:
        with open(self.err_path, encoding="utf-8", errors="replace") as fh:
            return fh.read()

    def proc_status(self, field: str) -> int:
        with open(f"/proc/{self.proc.pid}/status") as fh:
            line = next(l for l in fh if l.startswith(field + ":"))
        return int(line.split()[1])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(15)
        self._err.close()


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A 1 MiB upload limit, two upload slots, a store that waits 1 s for its lock, a long read timeout."""
    srv = Served(str(tmp_path_factory.mktemp("small")), {"FRAGVIZ_MAX_UPLOAD_SIZE": "1MiB", "FRAGVIZ_UPLOAD_SLOTS": "2",
                                                         "FRAGVIZ_BUSY_TIMEOUT": "1s", "FRAGVIZ_READ_TIMEOUT": "120s"})
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def brisk(tmp_path_factory):
    """A 2 s read timeout, uploads at 1 KiB/s at least, two upload slots; its temporary files in `brisk.spool`."""
    tmp = tmp_path_factory.mktemp("brisk")
    spool = tmp / "spool"
    spool.mkdir()
    srv = Served(str(tmp), {"FRAGVIZ_READ_TIMEOUT": "2s", "FRAGVIZ_UPLOAD_MIN_RATE": "1KiB",
                            "FRAGVIZ_UPLOAD_SLOTS": "2", "TMPDIR": str(spool)})
    srv.spool = spool
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def tokened(tmp_path_factory):
    srv = Served(str(tmp_path_factory.mktemp("token")), {"FRAGVIZ_TOKEN": TOKEN})
    yield srv
    srv.stop()


def tiny_snapshot(tmp: str, mib: int) -> bytes:
    """A valid snapshot of its own (the size makes its content, so its hash, unique)."""
    path = write_pickle(os.path.join(tmp, f"tiny-{mib}.pickle"),
                        snapshot([segment(0x7F0000000000, [block(0x7F0000000000, mib * MiB),
                                                           block(0x7F0000000000 + mib * MiB, 2 * MiB, "inactive")])]))
    with open(path, "rb") as fh:
        return fh.read()


def one_line_error(body: bytes) -> str:
    error = json.loads(body)["error"]
    assert isinstance(error, str) and "\n" not in error and len(error) < 400, error
    return error


def raw_post(port: int, headers: dict[str, str], chunks: Iterable[bytes], chunked: bool = False) -> Answer:
    """POST /api/snapshots over a raw socket, the body sent chunk by chunk until the server answers (it may
    answer before the body is complete: a refusal does not wait for it)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    try:
        head = {"Host": f"127.0.0.1:{port}", **headers, **({"Transfer-Encoding": "chunked"} if chunked else {})}
        sock.sendall(("POST /api/snapshots HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items())
                      + "\r\n").encode())
        _send_until_answered(sock, chunks, chunked)
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        return resp.status, resp.headers, resp.read()
    finally:
        sock.close()


def _send_until_answered(sock: socket.socket, chunks: Iterable[bytes], chunked: bool) -> None:
    try:
        for chunk in chunks:
            if select.select([sock], [], [], 0)[0]:
                return  # the answer is there
            sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" if chunked else chunk)
        if chunked:
            sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered and closed: the answer is read next


def stalled_upload(port: int, length: int = 512 * 1024, sent: int = 1024) -> socket.socket:
    """An upload that declares `length` bytes, sends `sent` of them and goes silent."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    sock.sendall((f"POST /api/snapshots HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/octet-stream"
                  f"\r\nContent-Length: {length}\r\n\r\n").encode() + b"\0" * sent)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed this connection (whatever it answered first)."""
    try:
        while select.select([sock], [], [], 0)[0]:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, OSError):
        return True
    return False


# -- uploads ---------------------------------------------------------------------------------------------

def test_a_300_mib_upload_is_streamed_to_a_temporary_file_in_constant_memory(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    srv = Served(str(tmp_path), {"FRAGVIZ_MAX_UPLOAD_SIZE": "1GiB", "TMPDIR": str(spool)})
    try:
        srv.snapshots()
        baseline = srv.proc_status("VmRSS")
        size, chunk = 300 * MiB, bytes(range(256)) * 4096  # 1 MiB of a generated file, 300 times
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=600)
        conn.putrequest("POST", "/api/snapshots")
        for k, v in (("Content-Type", "application/octet-stream"), ("Content-Length", str(size)),
                     ("X-Filename", "big.pickle")):
            conn.putheader(k, v)
        conn.endheaders()
        peak, spooled = baseline, 0
        for i in range(size // len(chunk)):
            peak = max(peak, srv.proc_status("VmRSS"))  # sampled before each send: the server is still receiving
            if i == 200:
                spooled = sum(p.stat().st_size for p in spool.rglob("fragviz-upload-*"))  # in the server's spool
            conn.send(chunk)
        resp = conn.getresponse()
        status, body = resp.status, resp.read()
        conn.close()
        growth_mib = (peak - baseline) / 1024
        print(f"server RSS while receiving 300 MiB: baseline {baseline / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB "
              f"(+{growth_mib:.1f} MiB); VmHWM after the ingest {srv.proc_status('VmHWM') / 1024:.0f} MiB")
        assert growth_mib < 100, f"the server grew by {growth_mib:.0f} MiB while receiving the upload"
        assert spooled > 150 * MiB, "the upload was not being written to a temporary file as it arrived"
        assert status == 422 and "big.pickle" in one_line_error(body)  # not a snapshot: a bad file, said in a line
        assert not [p.name for p in spool.rglob("fragviz-upload-*")]  # temp file removed
    finally:
        srv.stop()


@pytest.mark.parametrize("how", ["declared", "chunked", "chunked multipart"])
def test_an_upload_over_the_limit_is_413_naming_the_limit(small, how):
    before = len(small.snapshots())
    chunks: Iterator[bytes] = (b"\0" * (256 * 1024) for _ in range(12))  # 3 MiB, over the 1 MiB limit
    if how == "declared":
        answer = raw_post(small.port, {"Content-Type": "application/octet-stream", "Content-Length": str(3 * MiB)},
                          chunks)
    elif how == "chunked":
        answer = raw_post(small.port, {"Content-Type": "application/octet-stream"}, chunks, chunked=True)
    else:
        first = (b'--B\r\nContent-Disposition: form-data; name="file"; filename="x.pickle"\r\n'
                 b"Content-Type: application/octet-stream\r\n\r\n")
        answer = raw_post(small.port, {"Content-Type": "multipart/form-data; boundary=B"},
                          iter([first, *chunks, b"\r\n--B--\r\n"]), chunked=True)
    status, headers, body = answer
    assert status == 413, body
    error = one_line_error(body)
    assert "max_upload_size" in error and "1.00 MiB" in error
    assert "FRAGVIZ_MAX_UPLOAD_SIZE" in error and "fragviz.toml" in error
    assert len(small.snapshots()) == before


def test_more_concurrent_uploads_than_slots_get_503_and_retry_after_at_once(small):
    holders: list[socket.socket] = []  # two uploads in progress: the server has two slots
    try:
        def refused() -> Answer | None:
            # a holder that came while an earlier upload still held a slot was itself refused: replace it
            for s in [s for s in holders if closed_by_server(s)]:
                holders.remove(s)
                s.close()
            while len(holders) < 2:
                holders.append(stalled_upload(small.port))
            answer = small.upload(b"not a snapshot")
            return answer if answer[0] == 503 else None

        status, headers, body = wait_for(refused, "an upload beyond the slots to be refused")
        assert int(headers["Retry-After"]) > 0 and "upload_slots" in one_line_error(body)
        # refused at once, not queued: an upload that would wait for a slot gets its answer without sending a byte
        waiting = stalled_upload(small.port, sent=0)
        try:
            resp = http.client.HTTPResponse(waiting)
            resp.begin()
            assert resp.status == 503 and resp.headers["Retry-After"]
        finally:
            waiting.close()
    finally:
        for s in holders:
            s.close()
    wait_for(lambda: small.upload(b"not a snapshot")[0] == 422, "the slots to be free again")


def test_stalled_clients_are_dropped_after_the_read_timeout_and_the_server_keeps_answering(brisk):
    known = brisk.snapshots()
    threads = brisk.proc_status("Threads")
    stalled = [stalled_upload(brisk.port) for _ in range(20)]  # 2 hold slots; the other 18 are refused
    for i in range(20):
        s = socket.create_connection(("127.0.0.1", brisk.port), timeout=120)
        if i % 2:
            s.sendall(b"GET /api/snapshots HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers that never end
        stalled.append(s)
    try:
        for _ in range(5):
            assert brisk.snapshots() == known  # answered while 40 connections stall
        wait_for(lambda: all(closed_by_server(s) for s in stalled), "the server to drop the 40 stalled clients")
        wait_for(lambda: brisk.proc_status("Threads") <= threads + 2, "the server's threads to be freed")
        assert brisk.snapshots() == known
        assert brisk.upload(b"not a snapshot")[0] == 422  # every upload slot is free again
    finally:
        for s in stalled:
            s.close()


def test_a_busy_store_is_503_try_again_and_the_same_upload_succeeds_after(small, tmp_path):
    data = tiny_snapshot(str(tmp_path), 5)
    lock = sqlite3.connect(small.db, isolation_level=None, timeout=30)
    try:
        lock.execute("BEGIN IMMEDIATE")  # another writer holds the store
        status, headers, body = small.upload(data, "busy.pickle")
        assert status == 503, body
        assert int(headers["Retry-After"]) > 0 and "busy" in one_line_error(body)
    finally:
        lock.rollback()
        lock.close()
    status, _, body = small.upload(data, "busy.pickle")
    assert status == 201, body
    assert [r["name"] for r in small.snapshots()].count("busy.pickle") == 1


def test_upload_names_lose_control_characters_and_folders(small, tmp_path):
    status, _, body = small.upload(tiny_snapshot(str(tmp_path), 7), "a\r\nb\x00.pickle")
    assert status == 201, body
    sid = json.loads(body)["id"]
    name = next(r["name"] for r in small.snapshots() if r["id"] == sid)
    assert not set(name) & {"\r", "\n", "\0"} and name.startswith("a") and name.endswith("b_.pickle")
    status, _, body = small.upload(tiny_snapshot(str(tmp_path), 9), "../../etc/x\r.pickle")
    sid = json.loads(body)["id"]
    assert next(r["name"] for r in small.snapshots() if r["id"] == sid) == "x_.pickle"
    status, _, body = small.upload(b"this is no snapshot", "bad.pickle")
    assert status == 422 and "bad.pickle" in one_line_error(body)  # bad input stays 422


# -- binding ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_a_public_bind_without_a_token_refuses_to_start(tmp_path, host):
    port = free_port()
    try:
        out = subprocess.run([sys.executable, "-m", "fragviz", "serve", "--db", str(tmp_path / "s.sqlite"), "--host",
                              host, "--port", str(port)], cwd=str(tmp_path), env=clean_env(), capture_output=True,
                             text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"serve --host {host} without a token kept serving")
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fragviz: ") and "token" in lines[0], out.stderr
    assert not os.path.exists(tmp_path / "s.sqlite")  # refused before anything was made


@pytest.mark.parametrize("host, connect_to", [("127.0.0.2", "127.0.0.2"), ("localhost.", "127.0.0.1")])
def test_loopback_names_serve_without_a_token(tmp_path, host, connect_to):
    srv = Served(str(tmp_path), host=host, connect_to=connect_to)
    try:
        assert srv.snapshots() == []
        assert srv.request("GET", "/", headers={"Host": f"localhost.:{srv.port}"})[0] == 200
        assert "warning" not in srv.stderr()
    finally:
        srv.stop()


def test_a_public_bind_with_a_token_answers_only_its_own_names(tmp_path):
    srv = Served(str(tmp_path), {"FRAGVIZ_TOKEN": TOKEN}, host="0.0.0.0", args=("--allowed-host", "fragviz.example"))
    try:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert srv.request("GET", "/api/snapshots", headers=auth)[0] == 200
        assert srv.request("GET", "/api/snapshots", headers={**auth, "Host": f"fragviz.example:{srv.port}"})[0] == 200
        status, _, body = srv.request("GET", "/api/snapshots", headers={**auth, "Host": f"evil.example:{srv.port}"})
        assert status == 421 and "--allowed-host" in one_line_error(body)
        assert srv.request("GET", "/api/snapshots")[0] == 401
    finally:
        srv.stop()


# -- Host and same-origin ----------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["evil.example:{port}", "localhost.evil.example:{port}", "127.0.0.1.nip.io:{port}",
                                  "127.0.0.1:1", "10.0.0.1:{port}", "evil.example", "localhost@evil.example:{port}"])
def test_a_foreign_host_header_is_refused(small, host):
    for method, path, body in (("GET", "/", None), ("GET", "/api/snapshots", None),
                               ("POST", "/api/snapshots", b"not a snapshot")):
        status, _, answer = small.request(method, path, body, {"Host": host.format(port=small.port)})
        assert status == 421, (method, path, answer)
        assert b"fragviz:" in answer or "Host" in one_line_error(answer)


@pytest.mark.parametrize("host", ["localhost:{port}", "127.0.0.1:{port}", "[::1]:{port}", "localhost.:{port}",
                                  "LOCALHOST:{port}", "127.0.0.5:{port}"])
def test_the_servers_own_names_are_answered(small, host):
    assert small.request("GET", "/", headers={"Host": host.format(port=small.port)})[0] == 200


@pytest.mark.parametrize("header, value", [("Origin", "http://evil.example"), ("Origin", "null"),
                                           ("Origin", "http://127.0.0.1:{other}"),
                                           ("Origin", "https://127.0.0.1:{port}"),
                                           ("Referer", "http://evil.example/page"),
                                           ("Referer", "http://localhost.evil.example:{port}/")])
def test_a_cross_site_write_is_403(small, tmp_path, header, value):
    before = len(small.snapshots())
    value = value.format(port=small.port, other=small.port + 1)
    status, _, body = small.upload(tiny_snapshot(str(tmp_path), 11), "csrf.pickle", {header: value})
    assert status == 403 and header in one_line_error(body)
    status, _, body = small.request("POST", "/_dash-update-component", b"{}",
                                    {"Content-Type": "application/json", header: value})
    assert status == 403, body
    assert len(small.snapshots()) == before


def test_a_same_origin_write_and_a_script_without_origin_pass(small, tmp_path):
    own = f"http://127.0.0.1:{small.port}"
    assert small.upload(tiny_snapshot(str(tmp_path), 13), "own.pickle", {"Origin": own})[0] == 201
    assert small.upload(tiny_snapshot(str(tmp_path), 15), "ref.pickle", {"Referer": own + "/snapshots/1?x=1"})[0] == 201
    assert small.upload(tiny_snapshot(str(tmp_path), 17), "script.pickle")[0] == 201  # curl: neither header


# -- tokens ------------------------------------------------------------------------------------------------

def test_a_token_in_the_url_becomes_a_derived_cookie_and_a_clean_url(tokened):
    status, headers, _ = tokened.request("GET", f"/snapshots/1?event=3&token={TOKEN}")
    assert status == 303 and headers["Location"] == "/snapshots/1?event=3"
    cookie = headers["Set-Cookie"]
    assert TOKEN not in cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    pair = cookie.split(";")[0]
    assert len(pair.split("=", 1)[1]) == 64  # HMAC-SHA256, hex
    assert pair.split("=", 1)[0] == f"fragviz_session_{tokened.port}"  # this server's own (cookies ignore ports)
    assert tokened.request("GET", "/", headers={"Cookie": pair})[0] == 200
    assert tokened.request("GET", "/api/snapshots", headers={"Cookie": pair})[0] == 200
    assert tokened.request("GET", "/", headers={"Cookie": f"fragviz_session_{tokened.port}={TOKEN}"})[0] == 401
    assert tokened.request("GET", f"/?token={TOKEN}x")[0] == 401
    assert tokened.request("GET", "/")[0] == 401


def test_the_token_never_reaches_the_access_log(tokened):
    for path in (f"/?token={TOKEN}", f"/api/snapshots?a=1&token={TOKEN}", f"/?%74oken={TOKEN}",
                 f"/?token={TOKEN}wrong", f"/?TOKEN={TOKEN}"):
        tokened.request("GET", path)
    tokened.request("POST", f"/api/snapshots?token={TOKEN}", b"x", {"Authorization": f"Bearer {TOKEN}"})
    wait_for(lambda: tokened.stderr().count("POST /api/snapshots") >= 1, "the access log's lines")
    log = tokened.stderr()
    assert log.count("token=[redacted]") >= 3, log[-3000:]
    assert TOKEN not in log


@pytest.mark.parametrize("header, status", [(TOKEN, 401), (f"bearer {TOKEN}", 200), (f"Bearer {TOKEN}", 200),
                                            (f"BEARER  {TOKEN}", 200), (f"Basic {TOKEN}", 401),
                                            (f"Bearer {TOKEN}x", 401), (f"Bearer{TOKEN}", 401), ("Bearer", 401)])
def test_the_bearer_header_is_parsed_as_the_standard_says(tokened, header, status):
    assert tokened.request("GET", "/api/snapshots", headers={"Authorization": header})[0] == status


def test_an_upload_that_would_make_the_unpickler_allocate_gigabytes_leaves_the_server_small(small):
    # 9 bytes naming memo index 150,000,000: CPython's C unpickler zero-fills a memo table for it (2.3 GB).
    # Uploads are ingested by a `fragviz ingest` child that caps its own address space while it unpickles.
    before = small.proc_status("VmHWM")
    answer = small.upload(b"\x80\x02]r" + (150_000_000).to_bytes(4, "little") + b".", "memo.pickle")
    assert answer[0] in (201, 200, 422), answer
    assert small.proc_status("VmHWM") - before < 100 * 1024  # KiB: the server never held the file's cost


# -- upload names ------------------------------------------------------------------------------------------

def test_upload_names_that_look_like_options_are_stored_as_they_are(small, tmp_path):
    for i, name in enumerate(["-x", "--help", "-", "--name=evil"]):
        status, _, body = small.upload(tiny_snapshot(str(tmp_path), 21 + i), name)  # contents of their own
        assert status == 201, (name, body)
        sid = json.loads(body)["id"]
        assert next(r["name"] for r in small.snapshots() if r["id"] == sid) == name


# -- trickling clients -------------------------------------------------------------------------------------

class Trickler:
    """An upload that declares 64 KiB and sends one more byte each time it is nudged; keeps what it is told."""

    def __init__(self, port: int) -> None:
        self.sock = stalled_upload(port, 64 * 1024, sent=1)
        self.answer, self.closed = b"", False

    def nudge(self) -> bool:
        """Read what came, send a byte; whether the server has closed the connection."""
        try:
            while not self.closed and select.select([self.sock], [], [], 0)[0]:
                data = self.sock.recv(65536)
                self.answer += data
                self.closed = not data
            if not self.closed:
                self.sock.sendall(b"\0")
        except OSError:
            self.closed = True
        return self.closed


def oversized(srv: Served) -> int:
    """The status of an upload past max_upload_size: 503 while every slot is held, else 413 at once."""
    return srv.request("POST", "/api/snapshots", headers={"Content-Type": "application/octet-stream",
                                                          "Content-Length": str(8 * 2**30)})[0]


def test_trickling_uploads_are_dropped_below_the_minimum_rate_and_free_their_slots(brisk):
    tricklers: list[Trickler] = []  # a byte every 0.1 s or so each: well under the 2 s read timeout
    try:
        def slots_held() -> bool:
            for t in [t for t in tricklers if t.nudge()]:  # refused while an earlier one held a slot: another
                tricklers.remove(t)
                t.sock.close()
            while len(tricklers) < 2:
                tricklers.append(Trickler(brisk.port))
            return oversized(brisk) == 503

        wait_for(slots_held, "two trickling uploads to hold both upload slots")
        wait_for(lambda: all([t.nudge() for t in tricklers]), "the server to drop the trickling uploads")
        for t in tricklers:
            head, _, body = t.answer.partition(b"\r\n\r\n")
            assert head.split(b"\r\n")[0].split()[1] == b"408", t.answer[:300]
            assert "upload_min_rate" in one_line_error(body)
        assert oversized(brisk) == 413  # the slots are free again
    finally:
        for t in tricklers:
            t.sock.close()


# -- ingest children end with their upload ------------------------------------------------------------------

@pytest.fixture(scope="module")
def steps() -> bytes:
    """A synthetic training run whose ingest takes a moment (60,000 events), to be caught in the middle."""
    return pickle.dumps(synthetic_snapshot(60_000, seed=7), protocol=4)


def ingest_child_of(pid: int) -> int | None:
    """The `fragviz.ui.http.ingest_child` process whose parent is `pid`, if there is one."""
    return next((c for c in children(pid) if b"fragviz.ui.http.ingest_child" in command_line(c)), None)


def told_to_end(pid: int) -> bool:
    """Whether a SIGTERM waits for the (stopped) process."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            masks = [int(line.split()[1], 16) for line in fh if line.startswith(("SigPnd:", "ShdPnd:"))]
    except OSError:
        return True  # gone already
    return any(mask & (1 << (signal.SIGTERM - 1)) for mask in masks)


def ingest_paused(srv: Served, data: bytes, headers: dict[str, str] | None = None) -> tuple[socket.socket, int]:
    """Upload `data` over a raw socket (its answer left unread), and stop its ingest child (SIGSTOP) once the
    progress shows it past reading the file: (the client's socket, the child's pid)."""
    upload_id = uuid.uuid4().hex
    head = {"Host": srv.host_header, "Content-Type": "application/octet-stream", "Content-Length": str(len(data)),
            "X-Filename": "steps.pickle", "X-Upload-Id": upload_id, **(headers or {})}
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=120)
    sock.sendall(("POST /api/snapshots HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items())
                  + "\r\n").encode() + data)

    def in_the_middle() -> int | None:
        status, _, body = srv.request("GET", f"/api/uploads/{upload_id}", headers=headers)
        phase = json.loads(body)["phase"] if status == 200 else None
        return ingest_child_of(srv.proc.pid) if phase in ("decode", "parse", "replay") else None

    child = wait_for(in_the_middle, "the ingest to get going")
    os.kill(child, signal.SIGSTOP)
    wait_for(lambda: proc_state(child) in ("T", "t"), "the ingest child to stop")
    return sock, child


def let_go_once_told_to_end(child: int) -> None:
    wait_for(lambda: told_to_end(child), "the ingest child to be told to end")
    os.kill(child, signal.SIGCONT)
    wait_for(lambda: not running(child), "the ingest child to end")


def files_under(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file())


def stored_names(db: str) -> list[str]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM snapshots")]


def test_a_client_gone_mid_ingest_ends_its_ingest_and_leaves_no_file(brisk, steps):
    before = brisk.snapshots()
    sock, child = ingest_paused(brisk, steps)
    assert files_under(brisk.spool)  # the upload and its progress, in the server's spool
    sock.close()  # the client goes away while its file is ingested
    let_go_once_told_to_end(child)
    wait_for(lambda: not files_under(brisk.spool), "the upload's temporary files to be removed")
    assert brisk.snapshots() == before  # nothing stored for a client that left
    assert oversized(brisk) == 413  # its slot is free


def test_a_server_stopped_mid_ingest_ends_its_ingest_and_removes_its_spool(tmp_path, steps):
    spool = tmp_path / "spool"
    spool.mkdir()
    srv = Served(str(tmp_path), {"TMPDIR": str(spool)})
    try:
        sock, child = ingest_paused(srv, steps)
        srv.proc.send_signal(signal.SIGTERM)
        let_go_once_told_to_end(child)
        assert srv.proc.wait(60) == 0
        assert list(spool.iterdir()) == []  # the spool folder and everything in it
        assert stored_names(srv.db) == []
        sock.close()
    finally:
        srv.stop()


def test_a_server_killed_mid_ingest_ends_its_ingest_and_the_next_start_sweeps_its_spool(tmp_path, steps):
    spool = tmp_path / "spool"
    spool.mkdir()
    srv = Served(str(tmp_path), {"TMPDIR": str(spool)})
    arriving = stalled_upload(srv.port)  # an upload still arriving when the server dies: no child to clean up
    try:
        wait_for(lambda: files_under(spool), "the arriving upload's temporary file")
        sock, child = ingest_paused(srv, steps)
        [folder] = spool.iterdir()
        assert len(files_under(folder)) == 3
        srv.proc.kill()
        srv.proc.wait(60)
        let_go_once_told_to_end(child)  # the kernel told it (PR_SET_PDEATHSIG)
        assert [n.startswith("fragviz-upload-") for n in files_under(folder)] == [True]  # the child's are gone
        assert stored_names(srv.db) == []
        again = Served(str(tmp_path), {"TMPDIR": str(spool)})
        try:
            assert not folder.exists()  # swept as the next server started: its own server is gone
            assert again.snapshots() == []
        finally:
            again.stop()
        sock.close()
    finally:
        arriving.close()
        srv.stop()


# -- the session cookie, framing, deep JSON, huge ids ----------------------------------------------------------

def log_in(srv: Served) -> str:
    """`?token=` traded for the session cookie: its `name=value`."""
    status, headers, _ = srv.request("GET", f"/?token={TOKEN}")
    assert status == 303
    return headers["Set-Cookie"].split(";")[0]


def test_a_session_cookie_is_taken_only_by_its_own_server_and_run(tokened, tmp_path):
    ours = log_in(tokened)
    value = ours.split("=", 1)[1]
    assert ours.startswith(f"fragviz_session_{tokened.port}=")
    other = Served(str(tmp_path), {"FRAGVIZ_TOKEN": TOKEN})  # the same token, another port
    try:
        for cookie in (ours, f"fragviz_session_{other.port}={value}"):
            assert other.request("GET", "/api/snapshots", headers={"Cookie": cookie})[0] == 401, cookie
        theirs = log_in(other)
        assert other.request("GET", "/api/snapshots", headers={"Cookie": theirs})[0] == 200
        assert tokened.request("GET", "/api/snapshots", headers={"Cookie": theirs})[0] == 401
        other.stop()
        again = Served(str(tmp_path), {"FRAGVIZ_TOKEN": TOKEN}, port=other.port)  # the same server, started again
        try:
            status, _, body = again.request("GET", "/api/snapshots", headers={"Cookie": theirs})
            assert status == 401 and "?token=" in one_line_error(body)
            assert again.request("GET", "/api/snapshots", headers={"Cookie": log_in(again)})[0] == 200
        finally:
            again.stop()
    finally:
        other.stop()
    assert tokened.request("GET", "/api/snapshots", headers={"Cookie": ours})[0] == 200


@pytest.mark.parametrize("method, path, expected", [
    ("GET", "/", 200), ("GET", "/api/snapshots", 200), ("GET", "/_dash-layout", 200),
    ("GET", "/api/uploads/no-such-upload", 404), ("POST", "/api/snapshots", 400)])
def test_no_answer_may_be_framed(small, tokened, method, path, expected):
    body = b"x" if method == "POST" else None
    answers = [small.request(method, path, body), tokened.request(method, path, body),  # refused: 401
               small.request(method, path, body, {"Host": "evil.example"})]  # refused: 421
    assert [a[0] for a in answers] == [expected, 401, 421]
    for _, headers, _ in answers:
        assert headers["X-Frame-Options"] == "DENY"
        assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]


def test_a_dash_callback_nested_too_deep_is_400_in_one_line(small):
    for body in (b"[" * 5000 + b"]" * 5000, b'{"inputs": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5001):
        status, _, answer = small.request("POST", "/_dash-update-component", body,
                                          {"Content-Type": "application/json"})
        assert status == 400, answer[:300]
        assert "nested too deeply" in one_line_error(answer)
    assert isinstance(small.snapshots(), list)  # the server answers on


@pytest.mark.parametrize("path, words", [("/api/snapshots/{id}/report", "no snapshot"),
                                         ("/api/snapshots/{id}/state", "no snapshot"),
                                         ("/api/snapshots/{id}/export", "no snapshot"),
                                         ("/api/jobs/{id}/ranks.csv", "no job"), ("/api/jobs/{id}/export", "no job")])
def test_an_id_past_64_bits_is_no_such_snapshot(small, path, words):
    for big in (2**63, 2**64 + 5, 10**30):
        status, _, body = small.request("GET", path.format(id=big))
        assert status == 404, body[:300]
        assert words in one_line_error(body)
