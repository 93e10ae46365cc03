"""A snapshot's devices replayed in forked workers (fragviz.replay.parallel), as `fragviz ingest` runs them: a
worker killed in the middle of its replay leaves the ingest to replay that device itself (before, the ingest
waited for it forever), and an ingest killed in the middle leaves no worker behind: each asks the kernel to end
it with its parent (before, an idle worker could outlive it holding its output pipes open, so a server waiting
on an upload's ingest waited until the client gave up)."""
from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys

import numpy as np
import pytest

from fragviz.allocator.synth import synthetic_snapshot
from fragviz.library import Library
from fragviz.replay.analysis import analyze
from fragviz.snapshot import load_snapshot
from tests.support.helpers import wait_for
from tests.support.processes import children, running

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
EVENTS = 300_000  # per device: a replay of a few seconds, long enough to be caught in the middle


@pytest.fixture(scope="module")
def two_devices(tmp_path_factory) -> str:
    """Two long synthetic workloads, one on each device, in one file."""
    first, second = synthetic_snapshot(EVENTS, seed=1), synthetic_snapshot(EVENTS, seed=2)
    segments = first["segments"] + [{**s, "device": 1} for s in second["segments"]]
    data = {**first, "segments": segments, "device_traces": [first["device_traces"][0], second["device_traces"][0]]}
    path = str(tmp_path_factory.mktemp("parallel") / "two_devices.pickle")
    with open(path, "wb") as fh:
        pickle.dump(data, fh, protocol=4)
    return path


def start_ingest(db: str, path: str) -> tuple[subprocess.Popen, list[int]]:
    """`fragviz ingest` of the file, and its two replay workers once both run."""
    proc = subprocess.Popen([FRAGVIZ, "ingest", "--db", db, "--json", "--no-progress", path],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    workers = wait_for(lambda: len(children(proc.pid)) == 2 and children(proc.pid), "two replay workers",
                       deadline=300, interval=0.05)
    return proc, workers


def test_a_replay_worker_killed_midway_leaves_its_device_to_the_ingest(two_devices, tmp_path):
    db = str(tmp_path / "store.sqlite")
    proc, workers = start_ingest(db, two_devices)
    os.kill(workers[0], signal.SIGKILL)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    (result,) = json.loads(out)
    assert result["status"] == "ingested"
    expected = analyze(load_snapshot(two_devices))  # replayed here, one device after the other
    reader = Library.open(db)
    try:
        for device in (0, 1):
            stored = reader.series(result["id"], device)
            for name, values in expected.replays[device].series.items():
                np.testing.assert_array_equal(stored[name], values, err_msg=f"device {device} {name}")
    finally:
        reader.close()


def test_an_ingest_killed_midway_leaves_no_replay_worker(two_devices, tmp_path):
    proc, workers = start_ingest(str(tmp_path / "store.sqlite"), two_devices)
    assert all(running(w) for w in workers)
    proc.kill()
    proc.communicate(timeout=60)  # the pipes close only once every process holding them has ended
    wait_for(lambda: not any(running(w) for w in workers), "the replay workers to end with their ingest", deadline=30)
