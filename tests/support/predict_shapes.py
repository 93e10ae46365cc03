"""The shapes `fragviz predict` is validated against beyond pure powers of the knob (issue 35): small programs in
tests/predict_shapes, each recorded by `fragviz capture --simulate` at four values of its knob. `affine`,
`flattened` and `padding` have sizes that are no power of the knob (a + b·S, a + b·h + c·h², padded to the
longest draw), `kv_cat` and `epoch` a number of allocations that follows the knob, and `partial` a trace that
starts part-way through the run. The fourth recording is the truth a prediction from the first two or three is
held against (tests/integration/test_predict_shapes.py, bench/bench_predict.py).

    python -m tests.support.predict_shapes [DIR]   # records them all (what tests/data/predict_shapes holds)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

from fragviz.model import OOM
from fragviz.snapshot import load_snapshot
from fragviz.snapshot.loader import read_raw
from tests.support.helpers import ROOT

DATA = os.path.join(ROOT, "tests", "data", "predict_shapes")
PROGRAMS = "tests/predict_shapes"  # relative: the recorded stacks name the files so
DEVICE = "64GiB"  # large enough that no run here runs out of memory


@dataclass(frozen=True)
class Shape:
    """One program at four values of its knob; `flag` sets the knob, `fixed` the rest of its command line;
    `keep`, where set, is the trace entries the recording keeps (its last ones, as PyTorch's ring buffer does
    with `_record_memory_history(max_entries=keep)`)."""

    name: str
    knob: str
    flag: str
    values: tuple[int, int, int, int]
    fixed: tuple[str, ...] = ()
    keep: int | None = None

    @property
    def program(self) -> str:
        return f"{PROGRAMS}/{self.name}.py"

    def command(self, value: int) -> list[str]:
        """The program's command line at `value` (after `fragviz capture ... --`)."""
        return ["python", self.program, *self.fixed, self.flag, str(value)]

    def path(self, value: int, where: str = DATA) -> str:
        return os.path.join(where, f"{self.name}_{value}.pickle.gz")

    def paths(self, where: str = DATA) -> list[str]:
        return [self.path(v, where) for v in self.values]


SHAPES = (
    Shape("affine", "seq", "--seq", (32, 64, 128, 256), ("--steps", "2", "--batch", "4")),
    Shape("flattened", "hidden", "--hidden", (64, 128, 256, 512), ("--steps", "3", "--batch", "64")),
    Shape("padding", "batch", "--batch", (4, 8, 16, 32), ("--steps", "3")),
    Shape("kv_cat", "tokens", "--new-tokens", (16, 32, 64, 128), ("--prompt", "64", "--batch", "8")),
    Shape("epoch", "batch", "--batch", (32, 64, 128, 256), ("--samples", "1024",)),
    Shape("partial", "batch", "--batch", (4, 8, 16, 32), ("--steps", "6"), keep=400),
)
BY_NAME = {s.name: s for s in SHAPES}


def capture(shape: Shape, value: int, out: str, device_memory: str = DEVICE) -> subprocess.CompletedProcess:
    """`fragviz capture --simulate` of the program at `value` on a device of `device_memory` (the run's exit
    status is the process's: 1 where the program failed, an OOM above all; the snapshot is written either way)."""
    return subprocess.run([sys.executable, "-m", "fragviz", "capture", "--simulate", "--out", out,
                           "--device-memory", device_memory, "--", *shape.command(value)],
                          cwd=ROOT, capture_output=True, text=True)


def record(shape: Shape, value: int, where: str = DATA) -> str:
    """Record the program at `value` into `where` (its history cut to `keep` entries where the shape says so)."""
    out = shape.path(value, where)
    done = capture(shape, value, out)
    if done.returncode != 0:
        raise RuntimeError(f"{shape.program} at {shape.flag} {value} failed: {done.stderr.strip()}")
    if shape.keep is not None:
        keep_last_entries(out, shape.keep)
    return out


def keep_last_entries(path: str, keep: int) -> None:
    """Cut a recording's trace to its last `keep` entries: what a history of `max_entries=keep` would hold (the
    segments, the state at the end, are the same). `fragviz capture` has no option for it (`fragviz run
    --max-entries` has, but serves its snapshots over HTTP)."""
    from fragviz.allocator.recorder import write_snapshot

    data = read_raw(path).data  # fragviz's safe loader, as any snapshot is read
    trace = data["device_traces"][0]
    if len(trace) <= keep:
        raise ValueError(f"{path}: its trace has {len(trace)} entries, not more than {keep}: nothing is cut")
    data["device_traces"][0] = trace[-keep:]
    write_snapshot(path, data)


@dataclass(frozen=True)
class Predicted:
    """One `fragviz predict --json` run: its JSON where it predicted (exit 0), its one line where it refused (2)."""

    json: dict | None
    refusal: str | None


def predict(shape: Shape, count: int, *extra: str, where: str = DATA) -> Predicted:
    """`fragviz predict --json` of the shape's fourth value from its first `count` recordings (`extra`: more
    options, `--fit` above all). Any exit but 0 and 2 (a usage error, an internal error) raises."""
    sizes = [str(v) for v in shape.values[:count]]
    done = subprocess.run([sys.executable, "-m", "fragviz", "predict", *shape.paths(where)[:count], "--sizes", *sizes,
                           "--to", str(shape.values[3]), "--knob", shape.knob, "--json", *extra],
                          cwd=ROOT, capture_output=True, text=True)
    if done.returncode == 0:
        return Predicted(json.loads(done.stdout), None)
    if done.returncode == 2:
        return Predicted(None, done.stderr.strip())
    raise RuntimeError(f"fragviz predict on {shape.name} exited {done.returncode}: {done.stderr.strip()}")


def out_of_memory(path: str) -> bool:
    """Whether a recording ran out of memory (its trace holds an OOM event, as the allocator model writes it),
    read through fragviz's safe loader."""
    snapshot = load_snapshot(path)
    return any(bool((snapshot.trace_of(d).action == OOM).any()) for d in snapshot.devices())


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else DATA
    os.makedirs(target, exist_ok=True)
    for s in SHAPES:
        for v in s.values:
            print(record(s, v, target), flush=True)
