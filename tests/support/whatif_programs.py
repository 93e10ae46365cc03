"""The recordings code what-ifs are checked against: small programs (tests/whatif_programs/) recorded by
`fragviz capture --simulate` as written and as really changed the way a what-if changes them.
`python -m tests.support.whatif_programs [DIR]` records them all (what tests/data/whatif_programs holds).
"""
from __future__ import annotations

import os
import subprocess
import sys

from tests.support.helpers import ROOT

DATA = os.path.join(ROOT, "tests", "data", "whatif_programs")
TRAIN, KV = "tests/whatif_programs/train.py", "tests/whatif_programs/kv_cat.py"
SEQLEN = "tests/whatif_programs/seqlen.py"  # relative: the stacks name them so
# name: (program, its arguments, the device's memory). The *_oom64 runs run out of memory by design: batch 2048
# in the first step's forward, batch 1024 (the what-if's changed program) only in the second step's forward,
# after the optimizer's first step has made its Adam state.
RUNS = {
    "train_b512": (TRAIN, ("--batch", "512"), "1GiB"),
    "train_b768": (TRAIN, ("--batch", "768"), "1GiB"),
    "train_h2048": (TRAIN, ("--hidden", "2048"), "1GiB"),
    "train_b2048_oom64": (TRAIN, ("--batch", "2048"), "64MiB"),
    "train_b1024_oom64": (TRAIN, ("--batch", "1024"), "64MiB"),
    "kv_cat": (KV, (), "1GiB"),
    "kv_paged16": (KV, ("--page-tokens", "16"), "1GiB"),
    "seqlen": (SEQLEN, (), "1GiB"),  # 16 steps, lengths drawn from 17..256
    "seqlen_bucket4": (SEQLEN, ("--buckets", "4"), "1GiB"),  # each padded up to 64, 128, 192 or 256
}


def path(name: str, where: str = DATA) -> str:
    return os.path.join(where, f"{name}.pickle.gz")


def record(name: str, where: str = DATA) -> str:
    """Capture one run (on the CPU, served by the allocator model as on a CUDA device); an OOM run exits 1."""
    program, args, device = RUNS[name]
    out = path(name, where)
    subprocess.run([sys.executable, "-m", "fragviz", "capture", "--simulate", "--out", out, "--device-memory", device,
                    "--", "python", program, *args], cwd=ROOT, check=False, capture_output=True)
    return out


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else DATA
    os.makedirs(target, exist_ok=True)
    for run in RUNS:
        print(record(run, target), flush=True)
