"""Ingest benchmark: a 2,000,000-event snapshot with frames on every event.

Measures in one run: a bare pickle.load of the file, `fragviz ingest` of it (wall time and peak memory
of the whole command), and state-at-event queries from the store. Prints the ratios and the targets:
ingest wall <= 2.5x the bare load, ingest peak memory <= 2.5x the bare load's, the state at a random
event in <= 50 ms at the 95th percentile.

    python bench/bench_ingest.py [--events N] [--queries Q]
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import OUT, bare_load, benchmark_snapshot, mib, run_measured  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    path = benchmark_snapshot(args.events)
    db = os.path.join(OUT, f"bench_ingest_{os.getpid()}.sqlite")
    print(f"snapshot: {path} ({mib(os.path.getsize(path))}, {args.events} events)")

    load_s, load_rss = bare_load(path)
    nogc_s, _ = bare_load(path, gc_disabled=True)
    fragviz = [sys.executable, "-m", "fragviz.cli", "ingest", path, "--db", db, "--no-progress"]
    ingest_s, ingest_rss, out = run_measured(fragviz)
    print(out.strip())
    p50, p95, worst, cold = _state_queries(db, args.events, args.queries)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)

    rows = [
        ("bare pickle.load", f"{load_s:.2f} s", mib(load_rss)),
        ("bare pickle.load, gc disabled", f"{nogc_s:.2f} s", ""),
        ("fragviz ingest (whole command)", f"{ingest_s:.2f} s", mib(ingest_rss)),
    ]
    for name, t, m in rows:
        print(f"  {name:<34} {t:>9} {m:>12}")
    print(f"  state at a random event: p50 {p50 * 1e3:.1f} ms, p95 {p95 * 1e3:.1f} ms, max {worst * 1e3:.1f} ms "
          f"(first query {cold * 1e3:.1f} ms), {args.queries} queries")
    print(f"  (for reference: ingest / bare load with gc disabled, as ingest loads: {ingest_s / nogc_s:.2f})")
    checks = [
        ("ingest wall / bare load", ingest_s / load_s, 2.5),
        ("ingest peak memory / bare load's", ingest_rss / load_rss, 2.5),
        ("state query p95 (ms) / 50 ms", p95 * 1e3 / 50, 1.0),
    ]
    ok = True
    for name, ratio, target in checks:
        verdict = "meets" if ratio <= target else "MISSES"
        ok &= ratio <= target
        print(f"  {name:<34} {ratio:6.2f}  (target <= {target}: {verdict})")
    return 0 if ok else 1


def _state_queries(db: str, events: int, queries: int) -> tuple[float, float, float, float]:
    from fragviz.library import Library

    reader = Library.open(db)
    sid = reader.list_snapshots()[0].id
    rng = random.Random(1)
    times = []
    for _ in range(queries + 1):
        k = rng.randrange(events + 1)
        t = time.perf_counter()
        segments, _, _ = reader.device_state(sid, 0, k)
        times.append(time.perf_counter() - t)
        assert segments, "a state with no segments: the benchmark snapshot always has some"
    cold, warm = times[0], sorted(times[1:])
    return warm[len(warm) // 2], warm[int(len(warm) * 0.95) - 1], warm[-1], cold


if __name__ == "__main__":
    sys.exit(main())
