"""Shared helpers of the benchmarks: the benchmark snapshot, child processes measured with wait4."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")
ROOT = os.path.dirname(HERE)


def benchmark_snapshot(events: int, seed: int = 7) -> str:
    """Path of the benchmark snapshot (written once per size and seed, then reused)."""
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, f"bench_{events}_{seed}.pickle")
    if not os.path.exists(path):
        # In a child process: a benchmark parent that grew large would inflate the peak memory its later
        # children report (Linux counts a forked child's inherited pages in its maximum RSS).
        print(f"writing the benchmark snapshot ({events} events) to {path} ...", flush=True)
        subprocess.run([sys.executable, "-c", WRITE, path, str(events), str(seed)], check=True, cwd=ROOT)
    return path


WRITE = ("import pickle, sys\n"
         "from fragviz.allocator.synth import synthetic_snapshot\n"
         "path, events, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
         "data = synthetic_snapshot(events, seed=seed, depth=10)\n"
         "with open(path + '.tmp', 'wb') as fh:\n"
         "    pickle.dump(data, fh, protocol=4)\n"
         "import os; os.replace(path + '.tmp', path)\n")


def run_measured(argv: list[str], env: dict | None = None) -> tuple[float, int, str]:
    """Run a child process: (wall seconds, its own peak RSS in bytes, its stdout)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, env={**os.environ, **(env or {})}, cwd=ROOT)
    out = proc.stdout.read().decode() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed with status {proc.returncode}")
    return wall, usage.ru_maxrss * 1024, out


BARE_LOAD = ("import gc, pickle, sys, time, json\n"
             "if sys.argv[2:] == ['nogc']: gc.disable()\n"
             "t = time.perf_counter()\n"
             "with open(sys.argv[1], 'rb') as fh:\n"
             "    data = pickle.load(fh)\n"
             "print(json.dumps({'seconds': time.perf_counter() - t}))\n")


def bare_load(path: str, gc_disabled: bool = False) -> tuple[float, int]:
    """A bare pickle.load of `path` in a fresh interpreter: (load seconds, peak RSS)."""
    _, rss, out = run_measured([sys.executable, "-c", BARE_LOAD, path] + (["nogc"] if gc_disabled else []))
    return json.loads(out)["seconds"], rss


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def serve(db: str) -> tuple[subprocess.Popen, str]:
    """A dashboard server over the store `db` on a free port, once it answers: (process, its URL)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "fragviz.cli", "serve", "--db", db, "--port", str(port)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(url + "/api/snapshots", timeout=2)
            return proc, url
        except OSError:
            time.sleep(0.2)
    raise SystemExit("the server did not start")
