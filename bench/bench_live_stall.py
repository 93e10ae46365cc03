"""What the live agent costs a running job: a real torch training loop's step times under each load on its
agent, against the same job's own quiet windows, with a control copy of the job beside it that nobody contacts.

Two `fragviz run` jobs of the same real torch loop (tests/live/train_loop.py, one thread each, a simulated
device: every CPU tensor storage mirrored, the trace kept up to its 100,000 entries, a token set) run side by
side. For each load, five cycles of load (on) and rest (off): the job's step times in its on windows against
its off windows give the ratio; the control's ratio over the same windows shows what the machine itself did
meanwhile (the bench's own load generation runs on the same cores). Step times are the gaps between the ends
of the loop's steps as the loop stamps them (time.monotonic is one clock for every process).

Loads: a snapshot with its trace every 10 s and every 2 s; 8 snapshot requests never read; /metrics every
second; 300 slow sockets that never finish their request; 40 connections flooding headers; none with the token.
Also printed: job / control (what the job felt beyond what the machine did to both), how many snapshots each
snapshot load got (one at a time: a request while one is taken is 503), the job's RSS before the snapshot
loads and after them (target: within 5 MB), the snapshots' size and fetch time, and how long each held the
job's allocator lock (the agent's own figure).

    python bench/bench_live_stall.py [--warmup 40] [--cycles 5] [--window 8] [--only NAME ...]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRAGVIZ = [sys.executable, "-m", "fragviz"]
LOOP = os.path.join(ROOT, "tests", "live", "train_loop.py")
TOKEN = "bench-token-7c1"
TARGETS = {"snapshot every 10 s": 1.05, "snapshot every 2 s": 1.15, "8 snapshot requests never read": 1.15,
           "/metrics every second": 1.05, "300 slow sockets, no token": 1.10, "40 header floods, no token": 1.10}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """One `fragviz run` of the loop; its step lines stamped as they arrive."""

    def __init__(self, name: str) -> None:
        self.name, self.port = name, free_port()
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([*FRAGVIZ, "run", "--port", str(self.port), "--token", TOKEN,
                                      "--device-memory", "4GiB", "--", "python", LOOP, "--step-ms", "0", "--stamp"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
        self.stamps: list[float] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("step "):
                self.stamps.append(float(line.split()[2]))  # the job's own clock: when the step ended

    def get(self, path: str) -> bytes:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}",
                                         headers={"Authorization": f"Bearer {TOKEN}"})
        return urllib.request.urlopen(request, timeout=120).read()

    def rss(self) -> int:
        """The job's resident memory now, in bytes (its pid is the job's: fragviz run becomes python)."""
        with open(f"/proc/{self.proc.pid}/status") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))

    def steps(self, windows: list[tuple[float, float]]) -> list[float]:
        """Step times of the steps that ended inside these windows."""
        s = self.stamps
        return [b - a for a, b in zip(s, s[1:]) if any(lo <= b < hi for lo, hi in windows)]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


class Fetches:
    """Snapshots fetched: (seconds, bytes, the lock the job held)."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, int, float]] = []

    def one(self, job: Job) -> None:
        started = time.monotonic()
        try:
            size = len(job.get("/v1/snapshot?trace=1"))
        except OSError:
            return  # 503: one is still being taken
        took = time.monotonic() - started
        self.rows.append((took, size, json.loads(job.get("/v1/stats"))["agent"]["snapshot_lock_seconds"]))


def snapshots(seconds: float) -> Callable[[Job, float, Fetches], None]:
    def load(job: Job, until: float, fetches: Fetches) -> None:
        while time.monotonic() < until:
            started = time.monotonic()
            fetches.one(job)
            time.sleep(max(0.0, min(until, started + seconds) - time.monotonic()))
    return load


def metrics(job: Job, until: float, fetches: Fetches) -> None:
    while time.monotonic() < until:
        started = time.monotonic()
        job.get("/metrics")
        time.sleep(max(0.0, min(until, started + 1.0) - time.monotonic()))


def unread(job: Job, until: float, fetches: Fetches) -> None:
    """8 snapshot requests sent with the token and never read, held open for the window."""
    socks = []
    for _ in range(8):
        s = socket.create_connection(("127.0.0.1", job.port))
        s.sendall(f"GET /v1/snapshot?trace=1 HTTP/1.0\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode())
        socks.append(s)
    time.sleep(max(0.0, until - time.monotonic()))
    for s in socks:
        s.close()


def slow_sockets(job: Job, until: float, fetches: Fetches) -> None:
    """300 connections that send their request a byte every half second and never finish it (no token)."""
    socks = []
    for _ in range(300):
        try:
            socks.append(socket.create_connection(("127.0.0.1", job.port), timeout=5))
        except OSError:
            pass
    line = b"GET /v1/stats HTTP/1.0\r\nX-Slow: "
    i = 0
    while time.monotonic() < until:
        for s in socks:
            try:
                s.send(line[i % len(line):i % len(line) + 1])
            except OSError:
                pass
        i += 1
        time.sleep(0.5)
    for s in socks:
        s.close()


def header_floods(job: Job, until: float, fetches: Fetches) -> None:
    """40 connections, each sending a header line of 1,000 bytes every 5 ms without a token (8 MB/s in all), the
    agent answering 431 past 16 KiB and closing, and each connecting again."""
    def flood() -> None:
        chunk = b"X-Flood: " + b"a" * 989 + b"\r\n"
        while time.monotonic() < until:
            try:
                with socket.create_connection(("127.0.0.1", job.port), timeout=5) as s:
                    s.sendall(b"GET /v1/stats HTTP/1.0\r\n")
                    while time.monotonic() < until:
                        s.sendall(chunk)
                        time.sleep(0.005)
            except OSError:
                time.sleep(0.005)
    threads = [threading.Thread(target=flood, daemon=True) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


LOADS: dict[str, tuple[Callable[[Job, float, Fetches], None], float]] = {  # name: (load, its window in seconds)
    "snapshot every 10 s": (snapshots(10.0), 10.0),
    "snapshot every 2 s": (snapshots(2.0), 0.0),
    "8 snapshot requests never read": (unread, 0.0),
    "/metrics every second": (metrics, 0.0),
    "300 slow sockets, no token": (slow_sockets, 0.0),
    "40 header floods, no token": (header_floods, 0.0),
}


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def measure(job: Job, control: Job, name: str, cycles: int, window: float, fetches: Fetches) -> dict[str, float]:
    load, own = LOADS[name]
    window = own or window
    on: list[tuple[float, float]] = []
    off: list[tuple[float, float]] = []
    for _ in range(cycles):
        start = time.monotonic()
        load(job, start + window, fetches)
        on.append((start, time.monotonic()))
        rest = time.monotonic()
        time.sleep(window)
        off.append((rest + 0.5, time.monotonic()))  # half a second for the last answer to drain
    j_on, j_off, c_on, c_off = job.steps(on), job.steps(off), control.steps(on), control.steps(off)
    return {"p50": pct(j_on, .5) / pct(j_off, .5), "p99": pct(j_on, .99) / pct(j_off, .99),
            "control p99": pct(c_on, .99) / pct(c_off, .99), "steps": len(j_on) + len(j_off),
            "quiet p99 ms": pct(j_off, .99) * 1000}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--warmup", type=float, default=40.0, help="seconds before measuring (the trace fills up)")
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--window", type=float, default=8.0, help="seconds of load, then as many of rest, per cycle")
    ap.add_argument("--only", nargs="*", choices=list(LOADS), help="these loads only")
    args = ap.parse_args()
    job, control = Job("job"), Job("control")
    fetches = Fetches()
    results: dict[str, dict[str, float]] = {}
    try:
        time.sleep(args.warmup)
        rss_before = job.rss()
        for name in args.only or list(LOADS):
            print(f"measuring: {name} ({args.cycles} cycles)", file=sys.stderr, flush=True)
            taken = len(fetches.rows)
            results[name] = measure(job, control, name, args.cycles, args.window, fetches)
            if name.startswith("snapshot"):
                results[name]["snapshots"] = len(fetches.rows) - taken
            if name.startswith("snapshot"):
                rss_after = job.rss()
        loadavg = os.getloadavg()
    finally:
        job.stop()
        control.stop()
    print(f"machine: {os.cpu_count()} cores, load average {loadavg[0]:.2f} {loadavg[1]:.2f} {loadavg[2]:.2f}")
    print("| load on the agent | job step p50 | job step p99 | control p99 | job / control p99 | target (p99) "
          "| quiet p99 | snapshots |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        met = "met" if r["p99"] <= TARGETS[name] else "**missed**"
        print(f"| {name} | {r['p50']:.2f} | {r['p99']:.2f} | {r['control p99']:.2f} | "
              f"{r['p99'] / r['control p99']:.2f} | <= {TARGETS[name]:.2f}: {met} | {r['quiet p99 ms']:.1f} ms | "
              f"{int(r['snapshots']) if 'snapshots' in r else ''} |")
    if fetches.rows:
        ms = lambda v: f"{v * 1000:.1f} ms"  # noqa: E731
        print(f"snapshots: {len(fetches.rows)} of {statistics.median(r[1] for r in fetches.rows) / 2**20:.1f} MiB "
              f"(median), fetched in {ms(statistics.median(r[0] for r in fetches.rows))} (median); the job's "
              f"allocator lock held per snapshot: median {ms(statistics.median(r[2] for r in fetches.rows))}, "
              f"max {ms(max(r[2] for r in fetches.rows))}")
        if "rss_after" in locals():
            delta = (rss_after - rss_before) / 2**20
            print(f"job RSS: {rss_before / 2**20:.1f} MiB before the snapshot loads, {rss_after / 2**20:.1f} MiB "
                  f"after them ({delta:+.1f} MiB; target: within 5 MB)")


if __name__ == "__main__":
    main()
