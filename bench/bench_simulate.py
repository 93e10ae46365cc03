"""Simulator benchmark: follow mode and free-run on the 2,000,000-event benchmark snapshot, against its ingest.

Target: follow mode (predict every malloc of the trace, then apply it) in <= 2x the wall time of
`fragviz ingest` of the same file. Free-run (the workload placed by the model) under the recorded settings
and under expandable_segments:True is printed beside it, as a ratio to the same ingest. All measured in this run.

    python bench/bench_simulate.py [--events N]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import OUT, benchmark_snapshot, mib, run_measured  # noqa: E402

FOLLOW = ("import json, sys, time\n"
          "from fragviz.library import Library\n"
          "from fragviz.simulate import follow\n"
          "reader = Library.open(sys.argv[1])\n"
          "analysis = reader.load_analysis(reader.list_snapshots()[0].id)\n"
          "analysis.replays[0].series['reserved']\n"
          "t = time.perf_counter()\n"
          "result = follow(analysis)\n"
          "print(json.dumps({'seconds': time.perf_counter() - t, 'result': result.devices[0].as_dict()}))\n")
FREE_RUN = ("import json, sys, time\n"
            "from fragviz.allocator.config import parse_alloc_conf\n"
            "from fragviz.library import Library\n"
            "from fragviz.simulate import run_free\n"
            "reader = Library.open(sys.argv[1])\n"
            "analysis = reader.load_analysis(reader.list_snapshots()[0].id)\n"
            "analysis.replays[0].series['reserved']\n"
            "out = {}\n"
            "for label, settings in (('recorded', analysis.settings), ('expandable', "
            "parse_alloc_conf('expandable_segments:True'))):\n"
            "    t = time.perf_counter()\n"
            "    r = run_free(analysis, 0, settings, None)\n"
            "    out[label] = {'seconds': time.perf_counter() - t, 'peak': r.allocator.peaks.reserved}\n"
            "print(json.dumps(out))\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=2_000_000)
    args = ap.parse_args()
    path = benchmark_snapshot(args.events)
    db = os.path.join(OUT, f"bench_simulate_{os.getpid()}.sqlite")
    print(f"snapshot: {path} ({mib(os.path.getsize(path))}, {args.events} events)")
    ingest_s, _, _ = run_measured([sys.executable, "-m", "fragviz.cli", "ingest", path, "--db", db, "--no-progress"])
    _, _, out = run_measured([sys.executable, "-c", FOLLOW, db])
    _, _, free_out = run_measured([sys.executable, "-c", FREE_RUN, db])
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    measured = json.loads(out)
    follow_s, r = measured["seconds"], measured["result"]
    print(f"  fragviz ingest (whole command)   {ingest_s:8.2f} s")
    print(f"  follow-mode replay               {follow_s:8.2f} s  ({r['alloc_events']} allocs, "
          f"{r['alloc_address_matches']} addresses and {r['segment_allocs_matched']}/{r['segment_allocs_recorded']} "
          f"device allocations predicted, final state {'matches' if r['final_state_matches'] else 'differs'})")
    ratio = follow_s / ingest_s
    verdict = "meets" if ratio <= 2.0 else "MISSES"
    print(f"  follow / ingest                  {ratio:8.2f}  (target <= 2.0: {verdict})")
    for label, run in json.loads(free_out).items():
        print(f"  free-run, {label + ' settings':<22} {run['seconds']:8.2f} s  (peak reserved {mib(run['peak'])}; "
              f"/ ingest {run['seconds'] / ingest_s:.2f})")
    return 0 if ratio <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
