"""Prediction benchmark: `fragviz predict` validated on real recordings, and what it costs.

Targets (issue "predict before you run"): the third recording of each series predicted from the first two, peak
requested within 5 % and peak reserved within 10 % of what was recorded, on every pair. The series
(tests/support/predict_runs.py) are the bundled GPT-style workload captured by `fragviz capture` at three batch
sizes and three sequence lengths, in training and in inference (tests/data/predict). Also timed: the whole
`fragviz predict` command (Python's start included) and, as a ratio, against `fragviz report` on the largest
recording of the series (what reading one file costs); and on bigger traces, a 200k-event synthetic snapshot and
real CUDA files, each paired with itself.

    python bench/bench_predict.py [--data DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import ROOT, benchmark_snapshot  # noqa: E402
from fragviz.base.units import format_bytes as fb  # noqa: E402
from fragviz.replay.analysis import trace_totals  # noqa: E402
from fragviz.replay.files import analyze_file  # noqa: E402
from tests.support.predict_runs import DATA, SERIES  # noqa: E402


REAL = os.path.join(os.path.dirname(ROOT), "shared", "real_snapshots")
REAL_FILES = ("hanmin_train_19k.pickle", "cs336kk_ctx128_fullstep.pickle")


def timed(argv: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "fragviz", *argv], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout
    return time.perf_counter() - start, out


def recorded(path: str) -> tuple[int, int, int]:
    """Peak requested and peak reserved bytes of a recording, and its trace's events."""
    analysis = analyze_file(path, workers=1)
    totals = trace_totals(analysis.snapshot, 0)
    return totals.peak_requested, totals.peak_reserved, len(analysis.replays[0].trace)


def error(predicted: int, actual: int) -> float:
    return (predicted - actual) / actual


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=DATA, help="where the recordings are (python -m tests.support.predict_runs DIR)")
    args = ap.parse_args()
    rows, worst = [], [0.0, 0.0]
    print("| series | sizes → predicted | events | peak requested: predicted / recorded | error | peak reserved: "
          "predicted / recorded | error | laws | predict | report | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for s in SERIES:
        small, mid, big = s.paths(args.data)
        a, b, c = s.values
        seconds, out = timed(["predict", small, mid, "--sizes", str(a), str(b), "--to", str(c), "--knob", s.knob,
                              "--json"])
        report_seconds, _ = timed(["report", big])
        got = json.loads(out)
        req, res, events = recorded(big)
        e_req, e_res = error(got["peak_requested_bytes"], req), error(got["peak_reserved_bytes"], res)
        worst = [max(worst[0], abs(e_req)), max(worst[1], abs(e_res))]
        laws = ", ".join(f"{n} {law}" for law, n in got["law_counts"].items() if n)
        rows.append((s.name, e_req, e_res))
        print(f"| {s.name} | {s.knob} {a}, {b} → {c} | {events} | {fb(got['peak_requested_bytes'])} / {fb(req)} | "
              f"{e_req:+.2%} | {fb(got['peak_reserved_bytes'])} / {fb(res)} | {e_res:+.2%} | {laws} | "
              f"{seconds:.2f} s | {report_seconds:.2f} s | {seconds / report_seconds:.2f}x |", flush=True)
    print(f"\nworst error: peak requested {worst[0]:.2%} (target 5 %), peak reserved {worst[1]:.2%} (target 10 %): "
          f"{'met' if worst[0] <= 0.05 and worst[1] <= 0.10 else 'MISSED'}")
    print("\nspeed on bigger traces (a file paired with itself: every allocation matched, every law constant):")
    for path in [benchmark_snapshot(200_000), *(os.path.join(REAL, n) for n in REAL_FILES)]:
        if not os.path.exists(path):
            print(f"  {path}: missing")
            continue
        seconds, _ = timed(["predict", path, path, "--sizes", "1", "2", "--to", "4", "--json"])
        report_seconds, _ = timed(["report", path])
        print(f"  {os.path.basename(path)}: predict {seconds:.2f} s, report {report_seconds:.2f} s, "
              f"ratio {seconds / report_seconds:.2f}x", flush=True)


if __name__ == "__main__":
    main()
