"""Ingest's fast paths as a user meets them: a real `fragviz ingest` under a real memory cap, devices replayed in
forked workers, the progress an upload's page follows (the CLI's file and the server's API), and the second
benchmark shape's generator."""
from __future__ import annotations

import json
import os
import pickle
import resource
import subprocess
import sys

import numpy as np
import pytest

from fragviz.replay.analysis import analyze
from fragviz.library import Library
from fragviz.snapshot import load_snapshot
from fragviz.allocator.synth import synthetic_snapshot

from bench.realshape import write_realshape  # the repository's root is on sys.path: tests is a package there

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")


@pytest.fixture(scope="module")
def two_devices(tmp_path_factory) -> str:
    """The second benchmark shape, small: a real trace's requests and stacks on two devices."""
    path = str(tmp_path_factory.mktemp("shape") / "realshape_30000.pickle")
    write_realshape(path, 30000, devices=2)
    return path


def test_the_real_shape_generator_writes_a_consistent_pytorch_snapshot(two_devices):
    snap = load_snapshot(two_devices)
    assert snap.devices() == [0, 1] and all(15000 <= len(snap.trace_of(d)) < 15010 for d in (0, 1))
    counts = snap.trace_of(0).action_counts()
    assert counts["alloc"] > 0 and counts["free_completed"] > 0
    assert counts["free_requested"] - counts["free_completed"] in (0, 1)  # the file may end between the two
    depth = [len(snap.stacks[s]) for s in snap.trace_of(0).stack if s >= 0]
    assert np.mean(depth) > 30, "frames from the real training trace: 37 on average"
    analysis = analyze(snap)
    assert not [w for w in analysis.warnings if "first at event" in w or "does not reproduce" in w]
    with open(two_devices, "rb") as fh:
        data = pickle.load(fh)  # noqa: S301  the test's own file
    trace = data["device_traces"][0]
    shared = [i for i, e in enumerate(trace[:-1]) if e["action"] == "free_requested"
              and trace[i + 1]["action"] == "free_completed"]
    assert shared and all(trace[i]["frames"] is trace[i + 1]["frames"] for i in shared), \
        "a free request and its completion share one frames list, as PyTorch writes them"


def test_devices_replayed_in_workers_give_the_sequential_replay(two_devices):
    snap = load_snapshot(two_devices)
    one, two = analyze(snap), analyze(snap, workers=2)
    assert one.warnings == two.warnings
    for device in (0, 1):
        a, b = one.replays[device], two.replays[device]
        assert b.trace is snap.trace_of(device)
        assert all(np.array_equal(a.series[k], b.series[k]) for k in a.series)
        assert np.array_equal(a.block_size, b.block_size)
        assert a.checkpoints.keys() == b.checkpoints.keys()
        for k in a.checkpoints:
            assert all(np.array_equal(a.checkpoints[k][c], b.checkpoints[k][c]) for c in a.checkpoints[k])
        assert a.figures_at(7777) == b.figures_at(7777)


def _capped(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def test_a_file_too_large_for_the_process_memory_is_refused_up_front_with_the_figure(tmp_path):
    path = tmp_path / "steps.pickle"
    with open(path, "wb") as fh:
        pickle.dump(synthetic_snapshot(300000, seed=4), fh, protocol=4)  # about 30 MiB, 150 MiB decoded
    db = str(tmp_path / "store.sqlite")
    base = subprocess.run([sys.executable, "-c", "import fragviz.cli, fragviz.library.ingest, resource, os; "
                           "print(int(open('/proc/self/statm').read().split()[0]) * os.sysconf('SC_PAGE_SIZE'))"],
                          capture_output=True, text=True, check=True)
    start = int(base.stdout)
    out = subprocess.run([FRAGVIZ, "ingest", str(path), "--db", db], capture_output=True, text=True,
                         preexec_fn=_capped(start + (60 << 20)), timeout=300)
    assert out.returncode == 2, out.stderr
    line = out.stderr.strip()
    assert "\n" not in line and f"{path}: needs about " in line and "of memory to decode" in line
    assert line.endswith("is available")
    assert not os.path.exists(db) or Library.open(db).list_snapshots() == []
    roomy = subprocess.run([FRAGVIZ, "ingest", str(path), "--db", db], capture_output=True, text=True,
                           preexec_fn=_capped(start + (1500 << 20)), timeout=300)
    assert roomy.returncode == 0, roomy.stderr


def test_ingest_tells_its_progress_file_the_phases_and_the_first_picture(tmp_path, two_devices):
    progress = tmp_path / "progress.jsonl"
    db = str(tmp_path / "store.sqlite")
    out = subprocess.run([FRAGVIZ, "ingest", two_devices, "--db", db, "--progress-file", str(progress), "--timings"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in progress.read_text().splitlines()]
    phases = [r["phase"] for r in records if "phase" in r]
    assert phases == ["read", "decode", "parse", "replay", "store"]
    order = [next(iter(r)) for r in records]
    assert order.index("preview") < records.index({"phase": "replay"}), "the picture comes before the replay"
    [preview] = [r["preview"] for r in records if "preview" in r]
    analysis = analyze(load_snapshot(two_devices))
    assert [p["device"] for p in preview] == [0, 1]
    for p in preview:
        assert max(p["reserved"]) == int(np.max(analysis.replays[p["device"]].series["reserved"]))
    counts = [r for r in records if "done" in r]
    assert counts[-1]["done"] == counts[-1]["total"] == sum(map(len, analysis.snapshot.traces.values()))
    timings = out.stderr.strip()
    for phase in phases:
        assert f" {phase} " in timings
    assert "first picture at " in timings and "; total " in timings
