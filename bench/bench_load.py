"""Load benchmark: 20 concurrent uploads of different real snapshots while 20 clients browse, against a real
`fragviz serve` over a fresh store.

The files are the real snapshots in ../shared/real_snapshots (those the independent inspection lists, all of
which load); where there are fewer than --uploads of them, gzip-compressed copies of the largest (gzip's
mtime fixed at 0) make up the number: the same snapshot in different bytes, so a different content hash and
a snapshot of its own. Each uploader sends its file once as the body of POST /api/snapshots
(`application/octet-stream`, its name in X-Filename, an Origin naming the server as the dashboard's own page
would), waits out a 503's Retry-After (the server's upload slots) and tries again until the file is stored,
then sends it once more (it must come back 200 "unchanged" with the same id). Each browser loops over the
pages `/` and `/snapshots/<id>` and the API `/api/snapshots`, `/api/snapshots/<id>/report` and
`/api/snapshots/<id>/state` (an id drawn from what the list holds) until every upload is done, and at least
--rounds times.

Checks: the store holds one snapshots row per distinct content hash, exactly the uploads' hashes, each
under the id its upload was answered with; every page view answered 2xx; every upload ended 201 (then 200)
and no answer other than 503 with Retry-After came before. Figures, all measured in this run: upload
latency (first byte sent to stored, waits for a slot included) and page latency, p50/p95/max, each also as
a ratio to the same request on an idle server (the same files uploaded one at a time to a second fresh
server; the same pages viewed by one client afterwards); the 503s; the server's peak RSS (VmHWM) against
its RSS once it served its first page. On this project's 2-core machine the 40 clients, the server and its
ingests share the two cores, so the latencies are the machine's as much as fragviz's.

    python bench/bench_load.py [--uploads N] [--browsers N] [--rounds N]
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from urllib.parse import quote

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import ROOT, mib  # noqa: E402

REAL = os.path.normpath(os.path.join(ROOT, "..", "shared", "real_snapshots"))
ENV = {k: v for k, v in os.environ.items() if not k.startswith("FRAGVIZ_")}
TIMEOUT = 600.0  # seconds any one request may take; only a bound
PAGE_KINDS = ("/", "/snapshots/<id>", "/api/snapshots", "/api/snapshots/<id>/report", "/api/snapshots/<id>/state")


# -- the files -------------------------------------------------------------------------------------------

def upload_files(n: int, work: str) -> list[tuple[str, bytes]]:
    """(name, bytes) of n different snapshot files: the real ones, then gzip copies of the largest."""
    listed = json.load(open(os.path.join(REAL, "inspect_summary.json")))
    paths = sorted(os.path.join(REAL, entry["file"]) for entry in listed.values())
    files = [(os.path.basename(p), open(p, "rb").read()) for p in paths]
    by_size = sorted(files, key=lambda f: -len(f[1]))
    made = []
    for name, data in by_size[: max(0, n - len(files))]:
        made.append((name + ".gz", gzip.compress(data, mtime=0)))
    if made:
        print(f"{len(files)} real snapshot files; {len(made)} more made by gzip-compressing the largest "
              f"({', '.join(m[0] for m in made)}): the same snapshots in other bytes")
    chosen = (files + made)[:n]
    assert len({hashlib.sha256(d).hexdigest() for _, d in chosen}) == n, "the files are not all different"
    return chosen


# -- the server ------------------------------------------------------------------------------------------

class Server:
    """`fragviz serve --port 0` over a fresh store in `work`."""

    def __init__(self, work: str, label: str) -> None:
        self.db = os.path.join(work, f"{label}.sqlite")
        self.err_path = os.path.join(work, f"{label}.err")
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "fragviz", "serve", "--db", self.db, "--port", "0"],
                                         cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=err,
                                         stdin=subprocess.DEVNULL)
        self.port = self._wait_port()
        self.origin = f"http://127.0.0.1:{self.port}"
        status, _ = request(self.port, "GET", "/api/snapshots")
        if status != 200:
            raise SystemExit(f"the server answered {status} to /api/snapshots")
        self.rss_started = self.rss("VmRSS")

    def _wait_port(self) -> int:
        end = time.monotonic() + 120
        while time.monotonic() < end:
            with open(self.err_path, errors="replace") as fh:
                found = re.search(r"serving http://127\.0\.0\.1:(\d+)/", fh.read())
            if found:
                return int(found.group(1))
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        with open(self.err_path, errors="replace") as fh:
            raise SystemExit(f"the server did not start:\n{fh.read()[-2000:]}")

    def rss(self, key: str) -> int:
        with open(f"/proc/{self.proc.pid}/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        raise SystemExit(f"no {key} for the server")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def request(port: int, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    status, data, _ = request_full(port, method, path, body, headers)
    return status, data


def request_full(port: int, method: str, path: str, body: bytes | None = None,
                 headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read(), {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


# -- the clients -----------------------------------------------------------------------------------------

@dataclass
class Upload:
    name: str
    data: bytes
    digest: str
    latency: float | None = None  # first attempt to stored, slot waits included
    attempts: list[tuple[int, float]] = field(default_factory=list)  # (status, seconds) of each try
    id: int | None = None
    again: tuple[int, int | None] | None = None  # (status, id) of the second send
    failure: str | None = None


def upload_one(server: Server, up: Upload) -> None:
    headers = {"Content-Type": "application/octet-stream", "X-Filename": quote(up.name), "Origin": server.origin}
    started = time.perf_counter()
    while True:
        t = time.perf_counter()
        status, body, head = request_full(server.port, "POST", "/api/snapshots", up.data, headers)
        up.attempts.append((status, time.perf_counter() - t))
        if status == 503 and "retry-after" in head:
            time.sleep(float(head["retry-after"]))
            continue
        break
    up.latency = time.perf_counter() - started
    if status != 201:
        up.failure = f"{status}: {body[:300]!r}"
        return
    up.id = json.loads(body)["id"]
    while True:  # the same bytes again: stored already
        status, body, head = request_full(server.port, "POST", "/api/snapshots", up.data, headers)
        if status == 503 and "retry-after" in head:
            time.sleep(float(head["retry-after"]))
            continue
        up.again = (status, json.loads(body).get("id") if status in (200, 201) else None)
        return


class Browser:
    """One client viewing pages in a loop; (kind, status, seconds, content hash or None) of every view."""

    def __init__(self, port: int, seed: int) -> None:
        self.port = port
        self.rng = random.Random(seed)
        self.views: list[tuple[str, int, float, str | None]] = []
        self.errors: dict[tuple[str, int], str] = {}  # (kind, status) -> the first such answer: path and body
        self.listed: list[tuple[int, str]] = []  # (id, content hash) the list last gave
        self.rounds = 0

    def view(self, kind: str, sid: int | None = None, digest: str | None = None) -> bytes:
        path = kind.replace("<id>", str(sid))
        t = time.perf_counter()
        status, body = request(self.port, "GET", path)
        self.views.append((kind, status, time.perf_counter() - t, digest))
        if not 200 <= status < 300:
            self.errors.setdefault((kind, status), f"{path}: {body[:200]!r}")
        return body

    def one_round(self) -> None:
        self.view("/")
        body = self.view("/api/snapshots")
        try:
            self.listed = [(entry["id"], entry["content_hash"]) for entry in json.loads(body)]
        except (ValueError, TypeError, KeyError):
            pass  # a failed list is counted by its status; the last good one serves
        if self.listed:
            self.snapshot_pages(*self.rng.choice(self.listed))
        self.rounds += 1

    def snapshot_pages(self, sid: int, digest: str) -> None:
        for kind in PAGE_KINDS[3:] + (PAGE_KINDS[1],):
            self.view(kind, sid, digest)

    def run(self, go: threading.Barrier, done: threading.Event, rounds: int) -> None:
        go.wait()
        while not done.is_set() or self.rounds < rounds:
            self.one_round()


# -- figures ---------------------------------------------------------------------------------------------

def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def figures(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), pct(values, 0.95), max(values)


def line(label: str, loaded: list[float], idle: list[float] | None = None) -> str:
    p50, p95, top = figures(loaded)
    text = (f"  {label:<34} n={len(loaded):<5} p50 {p50 * 1000:8.1f} ms  p95 {p95 * 1000:8.1f} ms  "
            f"max {top * 1000:8.1f} ms")
    if idle:
        i50, i95, _ = figures(idle)
        text += f"   x idle: p50 {p50 / i50:5.1f}  p95 {p95 / i95:5.1f}"
    return text


# -- the runs --------------------------------------------------------------------------------------------

def loaded_run(server: Server, files: list[tuple[str, bytes]], browsers: int, rounds: int):
    uploads = [Upload(n, d, hashlib.sha256(d).hexdigest()) for n, d in files]
    go, done = threading.Barrier(len(uploads) + browsers + 1), threading.Event()
    clients = [Browser(server.port, seed) for seed in range(browsers)]
    peak = [server.rss("VmRSS")]

    def uploader(up: Upload) -> None:
        go.wait()
        try:
            upload_one(server, up)
        except OSError as exc:
            up.failure = f"{type(exc).__name__}: {exc}"

    threads = [threading.Thread(target=uploader, args=(up,)) for up in uploads]
    threads += [threading.Thread(target=b.run, args=(go, done, rounds)) for b in clients]
    for t in threads:
        t.start()
    started = time.perf_counter()
    go.wait()
    while any(t.is_alive() for t in threads[: len(uploads)]):
        peak.append(server.rss("VmRSS"))
        time.sleep(0.05)
    uploads_wall = time.perf_counter() - started
    done.set()
    for t in threads:
        t.join()
    return uploads, clients, uploads_wall


def idle_run(work: str, files: list[tuple[str, bytes]], rounds: int) -> tuple[list[float], Browser]:
    """The same uploads one at a time to a fresh server, then every snapshot's pages once and `rounds` rounds
    of the loaded browsers' loop, by one client."""
    server = Server(work, "idle")
    try:
        latencies = []
        for name, data in files:
            up = Upload(name, data, hashlib.sha256(data).hexdigest())
            upload_one(server, up)
            if up.failure:
                raise SystemExit(f"idle upload of {name} failed: {up.failure}")
            latencies.append(up.latency)
        browser = Browser(server.port, 0)
        browser.one_round()
        for sid, digest in browser.listed:
            browser.snapshot_pages(sid, digest)
        while browser.rounds < rounds:
            browser.one_round()
        return latencies, browser
    finally:
        server.stop()


def check_store(db: str, uploads: list[Upload]) -> list[str]:
    problems = []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        rows = conn.execute("SELECT id, content_hash FROM snapshots").fetchall()
    finally:
        conn.close()
    hashes = Counter(h for _, h in rows)
    if any(n > 1 for n in hashes.values()):
        problems.append(f"duplicate content hashes: {[h for h, n in hashes.items() if n > 1]}")
    if set(hashes) != {u.digest for u in uploads} or len(rows) != len(uploads):
        problems.append(f"the store holds {len(rows)} snapshots for {len(uploads)} distinct uploads")
    by_id = dict(rows)
    for u in uploads:
        if u.failure:
            problems.append(f"upload of {u.name} failed: {u.failure}")
        elif by_id.get(u.id) != u.digest:
            problems.append(f"upload of {u.name} was answered with id {u.id}, which holds another file")
        elif u.again != (200, u.id):
            problems.append(f"sending {u.name} again gave {u.again}, not (200, {u.id})")
        bad = [s for s, _ in u.attempts[:-1] if s != 503]
        if bad:
            problems.append(f"upload of {u.name} saw {bad} before it was stored")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--uploads", type=int, default=20)
    ap.add_argument("--browsers", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3, help="page rounds each browser makes at least")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="fragviz-bench-load-")
    try:
        files = upload_files(args.uploads, work)
        print(f"{len(files)} uploads ({mib(sum(len(d) for _, d in files))} in all, largest "
              f"{mib(max(len(d) for _, d in files))}), {args.browsers} browsers, a fresh store")
        server = Server(work, "loaded")
        try:
            uploads, clients, wall = loaded_run(server, files, args.browsers, args.rounds)
            hwm, rss0 = server.rss("VmHWM"), server.rss_started
        finally:
            server.stop()
        problems = check_store(server.db, uploads)
        views = [v for c in clients for v in c.views]
        idle_uploads, idle = idle_run(work, files, rounds_for_idle(views))
        # an answer other than 2xx is a failure under load unless the idle server gives it for the same page
        idle_status = {(kind, digest): status for kind, status, _, digest in idle.views}
        bad = Counter((kind, status) for kind, status, _, digest in views if not 200 <= status < 300
                      and idle_status.get((kind, digest)) != status)
        also_idle = Counter((kind, status) for kind, status, _, digest in views if not 200 <= status < 300
                            and idle_status.get((kind, digest)) == status)
        first = {key: answer for c in clients for key, answer in c.errors.items()}
        if bad:
            problems.append(f"page views not answered 2xx: {dict(bad)}; the first of each: "
                            f"{ {k: first[k] for k in bad} }")

        tries = Counter(status for u in uploads for status, _ in u.attempts)
        print(f"uploads done in {wall:.1f} s; answers to the {sum(tries.values())} sends: "
              f"{dict(sorted(tries.items()))}; "
              f"{sum(c.rounds for c in clients)} page rounds, {len(views)} page views, "
              f"{sum(bad.values()) + sum(also_idle.values())} not 2xx")
        for key, n in also_idle.items():
            print(f"  {n} x {key[1]} for {key[0]}, as the idle server answers it too: {first[key]}")
        idle_by_kind: dict[str, list[float]] = defaultdict(list)
        for kind, status, seconds, _ in idle.views:
            if status == 200:
                idle_by_kind[kind].append(seconds)
        print("latency under load (x idle: the same request on an idle server)")
        print(line("upload, to stored (slot waits in)", [u.latency for u in uploads if u.latency], idle_uploads))
        sends = [s for u in uploads for st, s in u.attempts if st in (200, 201)]
        print(line("upload, the send that stored it", sends, idle_uploads))
        print(line("page views, all", [s for _, st, s, _ in views if st == 200],
                   [s for v in idle_by_kind.values() for s in v]))
        for kind in PAGE_KINDS:
            print(line(kind, [s for k, st, s, _ in views if k == kind and st == 200], idle_by_kind.get(kind)))
        print(f"server RSS: {mib(rss0)} once serving, peak {mib(hwm)} (x{hwm / rss0:.1f})")
        if problems:
            print("FAILED:\n  " + "\n  ".join(problems))
            return 1
        print("every upload stored exactly once; every page answered")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def rounds_for_idle(views: list) -> int:
    return max(5, min(40, len(views) // (20 * len(PAGE_KINDS))))


if __name__ == "__main__":
    sys.exit(main())
