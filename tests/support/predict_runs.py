"""The recordings `fragviz predict` is validated on: the bundled GPT-style workload (sample_snapshots/workloads/
gpt.py) captured by `fragviz capture` at three values of one knob, in training and in inference, batch size and
sequence length each. `python -m tests.support.predict_runs DIR` records them all (what tests/data/predict holds);
the tests and bench/bench_predict.py predict the third of each series from the first two.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from tests.support.helpers import ROOT

DATA = os.path.join(ROOT, "tests", "data", "predict")
WORKLOAD = "sample_snapshots/workloads/gpt.py"  # relative: the recorded stacks name the file so
DEVICE = "64GiB"  # large enough that no run here runs out of memory


@dataclass(frozen=True)
class Series:
    """One knob of one mode at three values; `args(value)` is the workload's command line at that value."""

    name: str
    mode: str
    knob: str
    values: tuple[int, int, int]
    fixed: tuple[str, ...]

    def args(self, value: int) -> list[str]:
        flag = {"batch": "--batch", "seq": "--seq" if self.mode == "train" else "--prompt"}[self.knob]
        return [self.mode, *self.fixed, flag, str(value)]

    def path(self, value: int, where: str = DATA) -> str:
        return os.path.join(where, f"{self.name}_{value}.pickle.gz")

    def paths(self, where: str = DATA) -> list[str]:
        return [self.path(v, where) for v in self.values]


SERIES = (
    Series("train_batch", "train", "batch", (4, 8, 16), ("--steps", "2", "--seq", "128")),
    Series("train_seq", "train", "seq", (64, 128, 256), ("--steps", "2", "--batch", "8")),
    Series("infer_batch", "infer", "batch", (2, 4, 8), ("--requests", "2", "--prompt", "64", "--new-tokens", "16")),
    Series("infer_seq", "infer", "seq", (32, 64, 128), ("--requests", "2", "--batch", "4", "--new-tokens", "16")),
)


def record(series: Series, value: int, where: str = DATA) -> str:
    """Capture the workload at `value` (on the CPU, served by the allocator model as on a CUDA device)."""
    out = series.path(value, where)
    subprocess.run([sys.executable, "-m", "fragviz", "capture", "--simulate", "--out", out, "--device-memory", DEVICE,
                    "--", "python", WORKLOAD, *series.args(value)], cwd=ROOT, check=True,
                   capture_output=True)
    return out


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else DATA
    os.makedirs(target, exist_ok=True)
    for s in SERIES:
        for v in s.values:
            print(record(s, v, target), flush=True)
