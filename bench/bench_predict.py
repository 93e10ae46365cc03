"""Prediction benchmark: `fragviz predict` validated on real recordings, and what it costs.

Targets (issue "predict before you run"): the third recording of each series predicted from the first two, peak
requested within 5 % and peak reserved within 10 % of what was recorded, on every pair. The series
(tests/support/predict_runs.py) are the bundled GPT-style workload captured by `fragviz capture` at three batch
sizes and three sequence lengths, in training and in inference (tests/data/predict). Also timed: the whole
`fragviz predict` command (Python's start included) and, as a ratio, against `fragviz report` on the largest
recording of the series (what reading one file costs); and on bigger traces, two different 200k-event synthetic
snapshots and the two real CUDA files paired with each other (unrelated recordings, `--max-unmatched 1` so the
whole match runs: its worst case). The same recording given twice is refused, so nothing is paired with itself.

The shapes beyond pure powers of the knob (issue 35; tests/support/predict_shapes.py, tests/data/predict_shapes):
the fourth recording of each predicted from the first two and from the first three: the point's error, the range
and whether it held what was recorded, the warnings, or the refusal; and for `affine` and `flattened` a `--fit`
check: the safe answer and the point answer on a device between the third and fourth recordings' peak reserved,
each recorded on that device by `fragviz capture --simulate` to see whether it really fits.

    python bench/bench_predict.py [--data DIR] [--shapes-data DIR] [--only series|shapes|speed]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import ROOT, benchmark_snapshot  # noqa: E402
from fragviz.base.units import format_bytes as fb  # noqa: E402
from fragviz.replay.analysis import trace_totals  # noqa: E402
from fragviz.replay.files import analyze_file  # noqa: E402
from tests.support import predict_shapes as shapes  # noqa: E402
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


FIT_SHAPES = ("affine", "flattened")


def within(value: int, bounds: list[int]) -> bool:
    return bounds[0] <= value <= bounds[1]


def refusal_cell(line: str) -> str:
    """A refusal's reason for a table cell: after the file names, without the table's separator, shortened."""
    reason = line.split("cannot predict: ", 1)[-1].replace("|", "/")
    return "refused: " + (reason if len(reason) <= 120 else reason[:119] + "…")


def shape_row(shape: shapes.Shape, count: int, truth: tuple[int, int], data: str) -> str:
    """One row of the shapes' table: the fourth value predicted from the first `count` recordings."""
    values = ", ".join(str(v) for v in shape.values[:count])
    head = (f"| {shape.name} | {shape.knob} | {values} → {shape.values[3]} | {fb(truth[0])} / {fb(truth[1])} | ")
    got = shapes.predict(shape, count, where=data)
    if got.json is None:
        return head + f"{refusal_cell(got.refusal or '')} | | | | | |"
    j = got.json
    point = (j["peak_requested_bytes"], j["peak_reserved_bytes"])
    ranges = (j.get("peak_requested_range"), j.get("peak_reserved_range"))
    if None in ranges or "warnings" not in j:
        return head + f"{fb(point[0])} / {fb(point[1])} | {error(point[0], truth[0]):+.1%} / " \
                      f"{error(point[1], truth[1]):+.1%} | no range in the JSON (predict predates it) | | | |"
    held = ["yes" if within(t, r) else "NO" for t, r in zip(truth, ranges)]
    return (head + f"{fb(point[0])} / {fb(point[1])} | {error(point[0], truth[0]):+.1%} / "
            f"{error(point[1], truth[1]):+.1%} | {fb(ranges[0][0])} – {fb(ranges[0][1])} | "
            f"{fb(ranges[1][0])} – {fb(ranges[1][1])} | {held[0]} / {held[1]} | {len(j['warnings'])} |")


def shapes_table(data: str) -> None:
    """Every shape's fourth recording predicted from its first two and its first three (issue 35)."""
    print("\nshapes beyond pure powers of the knob (tests/data/predict_shapes): the fourth recording predicted")
    print("\n| shape | knob | recordings → target | recorded peak requested / reserved | predicted requested / "
          "reserved | error requested / reserved | range requested | range reserved | range held (req / res) | "
          "warnings |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for shape in shapes.SHAPES:
        req, res, _ = recorded(shape.path(shape.values[3], data))
        for count in (2, 3):
            print(shape_row(shape, count, (req, res), data), flush=True)


def fits_when_recorded(shape: shapes.Shape, value: int, memory: int, where: str) -> str:
    """Record the program at `value` on a device of `memory` bytes: 'fits' or 'OOM' (and the capture's status)."""
    out = os.path.join(where, f"{shape.name}_{value}_fit.pickle.gz")
    done = shapes.capture(shape, value, out, str(memory))
    oom = shapes.out_of_memory(out)
    if oom != (done.returncode != 0):
        return f"{'OOM' if oom else 'fits'} (but capture exited {done.returncode}: {done.stderr.strip()[-120:]})"
    return "OOM" if oom else "fits"


def fit_check(shape: shapes.Shape, data: str) -> None:
    """`--fit` on a device between the third and fourth recordings' peak reserved, from the first two; the safe
    answer and the point answer + 1 each recorded on that device."""
    third, fourth = (recorded(shape.path(v, data))[1] for v in shape.values[2:])
    memory = (third + fourth) // 2
    got = shapes.predict(shape, 2, "--fit", str(memory), where=data)
    print(f"\n{shape.name}: --fit {fb(memory)} (between the recorded peak reserved at {shape.knob} "
          f"{shape.values[2]}, {fb(third)}, and at {shape.values[3]}, {fb(fourth)}), from {shape.values[0]} and "
          f"{shape.values[1]}:")
    if got.json is None:
        print(f"  {refusal_cell(got.refusal or '')}")
        return
    answer = got.json["fit"][0]
    safe, point = answer["largest_fitting"], answer.get("largest_fitting_point")
    if point is None:
        print(f"  largest_fitting {safe}; no largest_fitting_point in the JSON (predict predates it)")
        return
    with tempfile.TemporaryDirectory() as where:
        at_safe = fits_when_recorded(shape, safe, memory, where) if safe else "nothing fits"
        past_point = fits_when_recorded(shape, point + 1, memory, where)
        truth = true_largest_fitting(shape, safe, point + 1, memory, where) \
            if at_safe == "fits" and past_point == "OOM" else None
    print(f"  largest_fitting (safe) {safe}: recorded there, {at_safe}; largest_fitting_point {point}: recorded at "
          f"{point + 1}, {past_point}; the true largest fitting (bisected by recording): "
          f"{'not searched (the answers do not bracket it)' if truth is None else truth}", flush=True)


def true_largest_fitting(shape: shapes.Shape, fits: int, fails: int, memory: int, where: str) -> int:
    """The largest value whose recording on `memory` bytes has no OOM, between one that fits and one that does not
    (memory grows with the knob: one boundary), by recording each midpoint."""
    while fails - fits > 1:
        middle = (fits + fails) // 2
        if fits_when_recorded(shape, middle, memory, where) == "fits":
            fits = middle
        else:
            fails = middle
    return fits


def series_table(data: str) -> None:
    """The bundled GPT-style series: the third recording predicted from the first two, against what was recorded."""
    worst = [0.0, 0.0]
    print("| series | sizes → predicted | events | peak requested: predicted / recorded | error | peak reserved: "
          "predicted / recorded | error | laws | predict | report | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for s in SERIES:
        small, mid, big = s.paths(data)
        a, b, c = s.values
        seconds, out = timed(["predict", small, mid, "--sizes", str(a), str(b), "--to", str(c), "--knob", s.knob,
                              "--json"])
        report_seconds, _ = timed(["report", big])
        got = json.loads(out)
        req, res, events = recorded(big)
        e_req, e_res = error(got["peak_requested_bytes"], req), error(got["peak_reserved_bytes"], res)
        worst = [max(worst[0], abs(e_req)), max(worst[1], abs(e_res))]
        laws = ", ".join(f"{n} {law}" for law, n in got["law_counts"].items() if n)
        print(f"| {s.name} | {s.knob} {a}, {b} → {c} | {events} | {fb(got['peak_requested_bytes'])} / {fb(req)} | "
              f"{e_req:+.2%} | {fb(got['peak_reserved_bytes'])} / {fb(res)} | {e_res:+.2%} | {laws} | "
              f"{seconds:.2f} s | {report_seconds:.2f} s | {seconds / report_seconds:.2f}x |", flush=True)
    print(f"\nworst error: peak requested {worst[0]:.2%} (target 5 %), peak reserved {worst[1]:.2%} (target 10 %): "
          f"{'met' if worst[0] <= 0.05 and worst[1] <= 0.10 else 'MISSED'}")


def speed_table() -> None:
    """predict's time on bigger traces, two different recordings each (the same one twice is refused)."""
    print("\nspeed on bigger traces (two different recordings, --max-unmatched 1 so the whole match runs: "
          "unrelated programs, the match's worst case):")
    pairs = [(benchmark_snapshot(200_000, seed=7), benchmark_snapshot(200_000, seed=8)),
             tuple(os.path.join(REAL, n) for n in REAL_FILES)]
    for first, second in pairs:
        missing = [p for p in (first, second) if not os.path.exists(p)]
        if missing:
            print(f"  {', '.join(missing)}: missing")
            continue
        argv = ["predict", first, second, "--sizes", "1", "2", "--to", "4", "--max-unmatched", "1", "--json"]
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "fragviz", *argv], cwd=ROOT, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        report_seconds, _ = timed(["report", second])
        what = "predicted" if done.returncode == 0 else f"refused ({done.stderr.strip()[:160]})"
        print(f"  {os.path.basename(first)} and {os.path.basename(second)}: predict {seconds:.2f} s ({what}), "
              f"report of the second {report_seconds:.2f} s, ratio {seconds / report_seconds:.2f}x", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=DATA, help="where the recordings are (python -m tests.support.predict_runs DIR)")
    ap.add_argument("--shapes-data", default=shapes.DATA,
                    help="where the shapes' recordings are (python -m tests.support.predict_shapes DIR)")
    ap.add_argument("--only", choices=("series", "shapes", "speed"), help="one section only")
    args = ap.parse_args()
    if args.only in (None, "series"):
        series_table(args.data)
    if args.only in (None, "shapes"):
        shapes_table(args.shapes_data)
        for name in FIT_SHAPES:
            fit_check(shapes.BY_NAME[name], args.shapes_data)
    if args.only in (None, "speed"):
        speed_table()


if __name__ == "__main__":
    main()
