"""Ingest benchmark: two file shapes from two generators, at 2M and 10M events, every ratio measured in one run.

Shapes:
  synth      fragviz.allocator.synth: a random training-like workload, one device, 10-frame stacks drawn at random
             (per-event lists of shared frame dicts)
  realshape  bench/realshape.py: a real training trace's requests and its 37-frame stacks (C++ and Python),
             repeated on two devices, written as PyTorch writes them

For each file: a bare pickle.load in a fresh interpreter (collector on, as a user's script would; and off, the
floor for a Python reader), then `fragviz ingest --timings` (wall time, where it went, when the first picture
was ready, peak memory of the whole process tree: its replay workers too), then `fragviz report FILE`, then
state-at-event queries on the store. Targets: ingest <= 2x the bare load, peak memory <= 1.1x the bare load's,
report <= ingest, the state at a random event <= 50 ms at p95. A file whose decoded form would not fit in this
machine's memory is not bare-loaded (it would take the machine down); fragviz must refuse it up front.

    python bench/bench_ingest.py [--shapes synth,realshape] [--sizes 2000000,10000000] [--queries Q] [--quick]
"""
from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import OUT, ROOT, bare_load, benchmark_snapshot, mib  # noqa: E402

TARGETS = {"ingest": 2.0, "memory": 1.1, "report": 1.0, "state_ms": 50.0}


def realshape_snapshot(events: int, devices: int = 2) -> str:
    """Path of the second shape's file (written once per size, in a child process, then reused)."""
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, f"realshape_{events}_{devices}dev.pickle")
    if not os.path.exists(path):
        print(f"writing the real-shape snapshot ({events} events, {devices} devices) to {path} ...", flush=True)
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "realshape.py"), path, "--events", str(events),
                        "--devices", str(devices)], check=True, cwd=ROOT)
    return path


SHAPES = {"synth": benchmark_snapshot, "realshape": realshape_snapshot}


def run_tree(argv: list[str]) -> tuple[float, int, int, str, str]:
    """Run a command: (wall seconds, exit status, peak memory of it and its children, stdout, stderr).

    The peak is the larger of its own maximum RSS and, sampled 4 times a second, its RSS plus its children's
    private pages (a forked replay worker shares the parent's pages: they count once). The parent's RSS is read
    from /proc/PID/statm, which costs nothing; only the children's smaps are walked (walking a large process's
    smaps many times a second slows its page faults, and so the very thing measured)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=ROOT, text=True)
        tree_peak = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            tree_peak = max(tree_peak, _tree_memory(proc.pid))
            time.sleep(0.25)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        return wall, proc.returncode, max(tree_peak, usage.ru_maxrss * 1024), out.read(), err.read()


def _tree_memory(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            total = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
    for child in _descendants(pid):
        try:
            with open(f"/proc/{child}/smaps_rollup") as fh:
                total += sum(int(line.split()[1]) * 1024 for line in fh if line.startswith("Private_"))
        except (OSError, ValueError):
            continue
    return total


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as fh:
                kids = [int(c) for c in fh.read().split()]
        except (OSError, ValueError):
            continue
        out.extend(kids)
        todo.extend(kids)
    return out


def measured_ingest(path: str, db: str) -> dict:
    argv = [sys.executable, "-m", "fragviz.cli", "ingest", path, "--db", db, "--no-progress", "--timings"]
    wall, status, peak, out, err = run_tree(argv)
    result = {"wall": wall, "status": status, "peak": peak, "out": out.strip(), "err": err.strip()}
    timings = re.search(r": (read .*); total ([\d.]+) s", err)
    if timings:
        result["phases"] = dict((name, float(sec)) for name, sec in re.findall(r"(\w+) ([\d.]+) s", timings.group(1))
                                if name != "at")
        picture = re.search(r"first picture at ([\d.]+) s", err)
        startup = wall - float(timings.group(2))  # interpreter start and imports, before the clock began
        result["picture"] = startup + float(picture.group(1)) if picture else None
    return result


def fits_in_memory(path: str) -> tuple[bool, int, int]:
    from fragviz.snapshot.loader import estimated_memory, memory_available

    with open(path, "rb") as fh:
        need, _ = estimated_memory(fh, os.path.getsize(path))
    available = memory_available()
    return need < 0.8 * available, need, available


def measure(shape: str, events: int, queries: int) -> list[tuple[str, float, float]]:
    path = SHAPES[shape](events)
    size = os.path.getsize(path)
    print(f"\n== {shape}, {events:,} events: {path} ({mib(size)})", flush=True)
    fits, need, available = fits_in_memory(path)
    db = os.path.join(OUT, f"bench_ingest_{os.getpid()}.sqlite")
    if not fits:
        print(f"  decoded it would take about {mib(need)} and {mib(available)} is available: no bare load (it would "
              "exhaust the machine); fragviz must refuse it up front")
        ing = measured_ingest(path, db)
        print(f"  fragviz ingest: exit status {ing['status']} after {ing['wall']:.2f} s, peak {mib(ing['peak'])}: "
              f"{ing['err'].splitlines()[-1] if ing['err'] else ing['out']}")
        _remove(db)
        return [("refused up front (exit status 2)", float(ing["status"] == 2), 1.0)]
    load_s, load_rss = bare_load(path)
    nogc_s, _ = bare_load(path, gc_disabled=True)
    ing = measured_ingest(path, db)
    if ing["status"] != 0:
        raise SystemExit(f"fragviz ingest {path} failed: {ing['err']}")
    report_s, report_status, report_peak, _, report_err = run_tree([sys.executable, "-m", "fragviz.cli", "report",
                                                                    path])
    if report_status != 0:
        raise SystemExit(f"fragviz report {path} failed: {report_err}")
    p50, p95, worst, cold = _state_queries(db, queries)
    _remove(db)

    rows = [("bare pickle.load (collector on)", f"{load_s:.2f} s", mib(load_rss)),
            ("bare pickle.load (collector off)", f"{nogc_s:.2f} s", ""),
            ("fragviz ingest (whole command)", f"{ing['wall']:.2f} s", mib(ing["peak"])),
            ("fragviz report FILE", f"{report_s:.2f} s", mib(report_peak))]
    for name, t, m in rows:
        print(f"  {name:<36} {t:>9} {m:>12}")
    phases = ", ".join(f"{k} {v:.2f} s" for k, v in ing.get("phases", {}).items())
    print(f"  where ingest went: {phases}")
    if ing.get("picture") is not None:
        print(f"  first picture ready {ing['picture']:.2f} s after the command began "
              f"({ing['picture'] / ing['wall']:.2f} of its wall time)")
    print(f"  state at a random event: p50 {p50 * 1e3:.1f} ms, p95 {p95 * 1e3:.1f} ms, max {worst * 1e3:.1f} ms "
          f"(first query {cold * 1e3:.1f} ms), {queries} queries")
    print(f"  (for reference: ingest / bare load with the collector off: {ing['wall'] / nogc_s:.2f})")
    return [("ingest wall / bare load", ing["wall"] / load_s, TARGETS["ingest"]),
            ("ingest peak memory / bare load's", ing["peak"] / load_rss, TARGETS["memory"]),
            ("report wall / ingest wall", report_s / ing["wall"], TARGETS["report"]),
            ("state query p95 (ms) / 50 ms", p95 * 1e3 / TARGETS["state_ms"], 1.0)]


def _remove(db: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)


def _state_queries(db: str, queries: int) -> tuple[float, float, float, float]:
    from fragviz.library import Library

    reader = Library.open(db)
    sid = reader.list_snapshots()[0].id
    devices = reader.snapshot_row(sid).devices
    rng = random.Random(1)
    times = []
    for _ in range(queries + 1):
        device = rng.choice(devices)
        k = rng.randrange(reader.trace_length(sid, device) + 1)
        t = time.perf_counter()
        segments, _, _ = reader.device_state(sid, device, k)
        times.append(time.perf_counter() - t)
    reader.close()
    cold, warm = times[0], sorted(times[1:])
    return warm[len(warm) // 2], warm[max(0, int(len(warm) * 0.95) - 1)], warm[-1], cold


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="synth,realshape")
    ap.add_argument("--sizes", default="2000000,10000000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="both shapes at 20,000 events, 20 queries (checks the "
                    "benchmark runs; its figures mean little)")
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.queries = "20000", 20
    results = []
    for events in (int(s) for s in args.sizes.split(",")):
        for shape in args.shapes.split(","):
            if shape not in SHAPES:
                raise SystemExit(f"unknown shape {shape!r}: {', '.join(SHAPES)}")
            results += [(f"{shape} {events:,}", *r) for r in measure(shape, events, args.queries)]
    print("\n== ratios, each measured in this run")
    ok = True
    for where, name, ratio, target in results:
        verdict = "meets" if ratio <= target else "MISSES"
        if name.startswith("refused"):
            verdict, ratio = ("meets" if ratio else "MISSES"), ratio
            print(f"  {where:<18} {name:<36} {'yes' if ratio else 'no':>6}  ({verdict})")
            ok &= bool(ratio)
            continue
        ok &= ratio <= target
        print(f"  {where:<18} {name:<36} {ratio:6.2f}  (target <= {target}: {verdict})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
