"""What snapshots cost a running job: a training loop's step times while its agent is asked for a snapshot
with its trace every 10 s and scraped at /metrics every second, against the same loop left alone.

Two `fragviz run` jobs of the same real torch loop (tests/live/train_loop.py, one thread each, a simulated
device: every CPU tensor storage mirrored, the trace kept up to its 100,000 entries) run side by side and take
turns: in each round one is polled and the other is not, then the other way round, so the machine's changing
load and the two processes' own speeds fall on both alike. Step times are the gaps between the ends of the
loop's steps, as the loop stamps them (time.monotonic is one clock for every process). Printed, in one run: p50 and p99 of each side, the ratio
polled / quiet (target: p99 <= 1.05), the snapshots' size and fetch time, and how long each held the job's
allocator lock (the agent's own figure).

    python bench/bench_live_stall.py [--warmup 60] [--round 40] [--rounds 4]
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRAGVIZ = [sys.executable, "-m", "fragviz"]
LOOP = os.path.join(ROOT, "tests", "live", "train_loop.py")
WINDOWS: list[tuple[float, float]] = []  # when each snapshot was being fetched


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """One `fragviz run` of the loop; its step lines stamped as they arrive."""

    def __init__(self, name: str) -> None:
        self.name, self.port = name, free_port()
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([*FRAGVIZ, "run", "--port", str(self.port), "--device-memory", "4GiB", "--",
                                      "python", LOOP, "--step-ms", "0", "--stamp"], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
        self.stamps: list[float] = []
        self.polled: list[bool] = []
        self.polling = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("step "):
                self.stamps.append(float(line.split()[2]))  # the job's own clock: when the step ended
                self.polled.append(self.polling)

    def get(self, path: str) -> bytes:
        return urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=120).read()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def poll(job: Job, seconds: float, fetches: list[tuple[float, int, float]]) -> None:
    """/metrics every second and a snapshot with its trace every 10 s, for `seconds`."""
    end, next_snapshot = time.monotonic() + seconds, time.monotonic() + 5
    while time.monotonic() < end:
        job.get("/metrics")
        if time.monotonic() >= next_snapshot:
            started = time.monotonic()
            size = len(job.get("/v1/snapshot?trace=1"))
            took = time.monotonic() - started
            lock = json.loads(job.get("/v1/stats"))["agent"]["snapshot_lock_seconds"]
            fetches.append((took, size, lock))
            WINDOWS.append((started, started + took))
            next_snapshot += 10
        time.sleep(max(0.0, 1 - (time.monotonic() % 1)))


def steps(job: Job, polled: bool, after: int) -> list[float]:
    return [b - a for a, b, p in zip(job.stamps[after:], job.stamps[after + 1:], job.polled[after + 1:]) if p == polled]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--warmup", type=float, default=60.0, help="seconds before measuring (the trace fills up)")
    ap.add_argument("--round", type=float, default=40.0, help="seconds each side is polled per round")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    jobs = [Job("a"), Job("b")]
    fetches: list[tuple[float, int, float]] = []
    try:
        time.sleep(args.warmup)
        start = [len(j.stamps) for j in jobs]
        for r in range(args.rounds):
            job = jobs[r % 2]
            job.polling = True
            poll(job, args.round, fetches)
            job.polling = False
        polled = [s for j, a in zip(jobs, start) for s in steps(j, True, a)]
        quiet = [s for j, a in zip(jobs, start) for s in steps(j, False, a)]
    finally:
        for j in jobs:
            j.stop()
    ms = lambda v: f"{v * 1000:.1f} ms"  # noqa: E731
    if os.environ.get("FRAGVIZ_BENCH_DEBUG"):
        for j, a in zip(jobs, start):
            worst = sorted(((b - a_, a_) for a_, b in zip(j.stamps[a:], j.stamps[a + 1:])), reverse=True)[:3]
            for gap, at in worst:
                near = min(WINDOWS, key=lambda w: abs(w[0] - at))
                print(f"{j.name}: step of {ms(gap)} at {ms(at - near[0])} after a snapshot fetch began "
                      f"(fetch took {ms(near[1] - near[0])})")
    print(f"steps: {len(quiet)} quiet, {len(polled)} polled; "
          f"{len(fetches)} snapshots of {statistics.median(f[1] for f in fetches) / 2**20:.1f} MiB (median)")
    print(f"quiet   p50 {ms(pct(quiet, .5))}  p99 {ms(pct(quiet, .99))}  max {ms(max(quiet))}")
    print(f"polled  p50 {ms(pct(polled, .5))}  p99 {ms(pct(polled, .99))}  max {ms(max(polled))}")
    print(f"p99 polled / quiet: {pct(polled, .99) / pct(quiet, .99):.3f} (target <= 1.05); "
          f"p50: {pct(polled, .5) / pct(quiet, .5):.3f}")
    print(f"snapshot fetch: median {ms(statistics.median(f[0] for f in fetches))}, max {ms(max(f[0] for f in fetches))}; "
          f"allocator lock held per snapshot: median {ms(statistics.median(f[2] for f in fetches))}, "
          f"max {ms(max(f[2] for f in fetches))}")


if __name__ == "__main__":
    main()
