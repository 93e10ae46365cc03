"""How long `fragviz run` adds before a script's first line: a script that never imports torch, started under
`fragviz run -- python` and under plain `python`, one after the other, RUNS times each, in one run.

The time is from just before the command starts to the script's first statement (the script reads the start
time from its environment). Printed: the median of each, their difference, and what the agent loaded into a
script that never imports torch.

    python bench/bench_live_start.py [--runs 15]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
SCRIPT = '''import os, sys, time
print(time.time() - float(os.environ["BENCH_T0"]), "torch" in sys.modules,
      len([m for m in sys.modules if m.startswith("fragviz")]))
'''


def once(argv: list[str], folder: str) -> tuple[float, bool, int]:
    env = {**os.environ, "BENCH_T0": repr(time.time())}
    out = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), out[1] == "True", int(out[2])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "first_line.py"), "w") as fh:
            fh.write(SCRIPT)
        run, plain = [], []
        for _ in range(args.runs):
            run.append(once([FRAGVIZ, "run", "--port", "0", "--", "python", "first_line.py"], folder))
            plain.append(once([sys.executable, "first_line.py"], folder))
    ms = lambda v: f"{v * 1000:.0f} ms"  # noqa: E731
    a, b = statistics.median(r[0] for r in run), statistics.median(p[0] for p in plain)
    print(f"to the script's first line: fragviz run {ms(a)}, python {ms(b)} (medians of {args.runs}); "
          f"fragviz run adds {ms(a - b)}")
    print(f"under fragviz run, a script that never imports torch has torch: {any(r[1] for r in run)}; "
          f"fragviz modules loaded: {max(r[2] for r in run)}")


if __name__ == "__main__":
    main()
