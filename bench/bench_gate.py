"""Gate benchmark: `fragviz gate` on pairs of snapshots, and the pytest plugin's overhead on a test.

Targets (issue "evidence gates"):
- `fragviz gate CANDIDATE --baseline BASELINE --max-growth 5%` answers in under 2 s (the whole command, Python's
  start included) on two 200,000-event snapshots. Measured on three shapes: two synthetic 200k-event snapshots
  (one device), two 200k-event snapshots of real allocation sizes and stacks over two devices (bench/realshape.py),
  and pairs of the small real files most people have (../shared/real_snapshots, 5k-20k events).
- The plugin's overhead on a test: the example's training test (examples/memory_gate) run plainly and recorded on
  the simulated device with its verdict, in one process, as a ratio; and the one-time cost of the first recorded
  test in a process (torch's dispatch-mode set-up). The example's GPU-style test (code written for cuda) run
  plainly (the CPU) and on the simulated CUDA device. Also the example's pytest run with and without the plugin.

    python bench/bench_gate.py [--repeat N]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import OUT, ROOT, benchmark_snapshot  # noqa: E402

REAL = os.path.join(os.path.dirname(ROOT), "shared", "real_snapshots")
REAL_PAIRS = (("cs336kk_ctx128_fullstep.pickle", "cs336kk_ctx128_forward.pickle"),
              ("hanmin_train_19k.pickle", "ftcourse.pickle"),
              ("sqattn_segment_free.pickle", "sketchkv.pickle"))
EXAMPLE = os.path.join(ROOT, "examples", "memory_gate")

OVERHEAD = """
import json, sys, time
sys.path.insert(0, {example!r})
import torch
from fragviz.gate.budgets import budgets_from_text
from fragviz.gate.judge import device_fits, judge
from fragviz.gate.record import recording, summary_of
from tinynet.gpu import train_mixed_precision
from tinynet.model import TinyNet
from tinynet.train import train

def plain():
    train(TinyNet())

def gated(body=lambda: train(TinyNet())):
    with recording("simulated") as rec:
        body()
    summary, analysis = summary_of(rec, "bench")
    budgets = budgets_from_text("64MiB", None, None, None, "48MiB")
    judge(summary, None, budgets, device_fits(analysis, budgets.device_memory, None))

def gpu_plain():  # the code written for cuda, run plainly: without a GPU it picks the CPU (autocast "cpu")
    train_mixed_precision(TinyNet())

def gpu_gated():  # the same code under the simulated device: "cuda" served on the CPU
    gated(lambda: train_mixed_precision(TinyNet()))

t = time.perf_counter(); plain(); first_plain = time.perf_counter() - t
t = time.perf_counter(); gated(); first_gated = time.perf_counter() - t
gpu_plain(); gpu_gated()
runs = {{"plain": [], "gated": [], "gpu_plain": [], "gpu_gated": []}}
for _ in range({repeat}):
    for name, body in (("plain", plain), ("gated", gated), ("gpu_plain", gpu_plain), ("gpu_gated", gpu_gated)):
        t = time.perf_counter(); body(); runs[name].append(time.perf_counter() - t)
print(json.dumps({{"first_plain": first_plain, "first_gated": first_gated, **runs}}))
"""


def gate_seconds(candidate: str, baseline: str, repeat: int) -> tuple[float, int]:
    """Median wall seconds of the whole `fragviz gate` command, and its exit status."""
    times, status = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "fragviz", "gate", candidate, "--baseline", baseline,
                               "--max-growth", "5%"], capture_output=True, text=True, cwd=ROOT)
        times.append(time.perf_counter() - start)
        status = done.returncode
        if status not in (0, 1):
            raise SystemExit(f"fragviz gate failed: {done.stderr.strip()}")
    return statistics.median(times), status


def realshape(events: int, seed_name: str) -> str:
    path = os.path.join(OUT, f"bench_realshape_{events}_{seed_name}.pickle")
    if not os.path.exists(path):
        from bench.realshape import DEFAULT_SOURCE, write_realshape

        source = DEFAULT_SOURCE if seed_name == "a" else os.path.join(REAL, "hanmin_train_19k.pickle")
        print(f"writing {path} ...", flush=True)
        write_realshape(path, events, 2, source)
    return path


def bench_gate(repeat: int) -> None:
    print("fragviz gate CANDIDATE --baseline BASELINE --max-growth 5% (whole command, median of "
          f"{repeat}; target < 2 s on two 200k-event snapshots)")
    pairs = [("synthetic 200k events, 1 device", benchmark_snapshot(200_000, 8), benchmark_snapshot(200_000, 7))]
    if os.path.isdir(REAL):
        pairs.append(("real sizes and stacks, 200k events, 2 devices", realshape(200_000, "a"),
                      realshape(200_000, "b")))
        for cand, base in REAL_PAIRS:
            c, b = os.path.join(REAL, cand), os.path.join(REAL, base)
            if os.path.exists(c) and os.path.exists(b):
                pairs.append((f"real files {cand} vs {base}", c, b))
    for label, cand, base in pairs:
        seconds, status = gate_seconds(cand, base, repeat)
        verdict = {0: "passed", 1: "failed"}[status]
        target = "" if "200k" not in label else ("  target met" if seconds < 2 else "  TARGET MISSED")
        print(f"  {label:<62} {seconds:6.2f} s  ({verdict}){target}")


def bench_plugin(repeat: int) -> None:
    print(f"\nthe pytest plugin on examples/memory_gate's training test (8 steps), in one process, median of {repeat}")
    done = subprocess.run([sys.executable, "-c", OVERHEAD.format(example=EXAMPLE, repeat=repeat)],
                          capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        raise SystemExit(done.stderr)
    m = json.loads(done.stdout.strip().splitlines()[-1])
    plain, gated = statistics.median(m["plain"]), statistics.median(m["gated"])
    print(f"  test body alone                      {plain * 1000:8.1f} ms")
    print(f"  recorded, summarised and judged      {gated * 1000:8.1f} ms   ({gated / plain:.2f}x the body, "
          f"+{(gated - plain) * 1000:.0f} ms)")
    print(f"  first recorded test in a process     {m['first_gated'] * 1000:8.1f} ms   (torch's dispatch-mode "
          f"set-up, once; the first plain run took {m['first_plain'] * 1000:.0f} ms)")
    gpu_plain, gpu_gated = statistics.median(m["gpu_plain"]), statistics.median(m["gpu_gated"])
    print("\nthe GPU-style test (tinynet/gpu.py: .to('cuda'), autocast, GradScaler; 4 steps)")
    print(f"  run plainly (on this machine: the CPU) {gpu_plain * 1000:6.1f} ms")
    print(f"  on the simulated CUDA device, judged {gpu_gated * 1000:8.1f} ms   ({gpu_gated / gpu_plain:.2f}x, "
          f"+{(gpu_gated - gpu_plain) * 1000:.0f} ms)")
    print("\nexamples/memory_gate's tests/test_memory.py (3 tests, Python's start and torch's import included)")
    runs = {}
    for label, extra in (("without the plugin (-p no:fragviz)", ["-p", "no:fragviz"]), ("with the plugin", [])):
        times = []
        for _ in range(max(1, repeat // 2)):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:dash", *extra,
                            "tests/test_memory.py"],
                           cwd=EXAMPLE, capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")})
            times.append(time.perf_counter() - start)
        runs[label] = statistics.median(times)
        print(f"  {label:<36} {runs[label]:6.2f} s")
    a, b = runs["without the plugin (-p no:fragviz)"], runs["with the plugin"]
    print(f"  ratio                                {b / a:6.2f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    bench_gate(args.repeat)
    bench_plugin(args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
