"""The fixed-seed fuzz run: every hostile pickle, gzip oddity and JSON bomb, then a few thousand generated inputs.

Each test fails when fragviz breaks the promise for any input (code ran, a crash, a long or multi-line
message, a hang, memory exhausted, a store changed by a failed ingest); the message lists each distinct
failure once with its smallest input. Nothing here is expected to fail: the suite is the gate.
Long runs: scripts/fuzz.py.
"""
from __future__ import annotations

import os

import pytest

from .harness import Outcome, summary

STRUCTURED = int(os.environ.get("FRAGVIZ_FUZZ_STRUCTURED", 1200))
BYTES = int(os.environ.get("FRAGVIZ_FUZZ_BYTES", 800))


def _check(outcomes: list[Outcome], save_dir: str) -> None:
    failed = [o for o in outcomes if o.failures]
    if not failed:
        return
    os.makedirs(save_dir, exist_ok=True)
    saved = set()
    for o in sorted(failed, key=lambda o: len(o.case.data)):
        sig = o.failures[0].signature()
        if sig in saved:
            continue
        saved.add(sig)
        with open(os.path.join(save_dir, f"{len(saved):03d}.bin"), "wb") as fh:
            fh.write(o.case.data)
        with open(os.path.join(save_dir, f"{len(saved):03d}.txt"), "w") as fh:
            fh.write(o.case.name + "\n" + "\n".join(f.describe() for f in o.failures) + "\n")
    pytest.fail(f"{summary(outcomes)}\n(smallest input of each failure saved in {save_dir})", pytrace=False)


def test_the_canary_sees_code_that_runs(pool, hostile_cases):
    """The harness's own check: a plain pickle.load on the same inputs trips the canary."""
    aimed = [c for c in hostile_cases if c.name.startswith("hostile/every-target/global/")][:2]
    outcomes = pool.run(aimed, mode="unsafe-pickle")
    assert all(any(f.kind == "code-ran" for f in o.failures) for o in outcomes), summary(outcomes)


def test_seeds_pass(pool, real_dir, failures_dir):
    """The shrunk real snapshots, unmutated: the control (a failure here is the harness's or a real regression)."""
    from .strategies import seed_cases

    _check(pool.run(seed_cases(real_dir)), os.path.join(failures_dir, "seeds"))


def test_hostile_pickles(pool, hostile_cases, failures_dir):
    _check(pool.run(hostile_cases), os.path.join(failures_dir, "hostile"))


def test_gzip_oddities(pool, failures_dir):
    from .gzip_cases import cases

    _check(pool.run(cases()), os.path.join(failures_dir, "gzip"))


def test_json_bombs(pool, failures_dir):
    from .json_cases import cases

    _check(pool.run(cases()), os.path.join(failures_dir, "json"))


def test_structured_mutations(pool, real_dir, failures_dir):
    from .strategies import structured_cases

    _check(pool.run(structured_cases(real_dir, STRUCTURED)), os.path.join(failures_dir, "structured"))


def test_byte_mutations(pool, real_dir, failures_dir):
    from .strategies import byte_cases

    _check(pool.run(byte_cases(real_dir, BYTES)), os.path.join(failures_dir, "bytes"))
