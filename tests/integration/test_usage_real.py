"""What holds memory, on every real snapshot: allocation lifetimes against the replay, the views read from a
real SQLite store against the report's kinds (worked out from the blocks' own stacks), and the CLI."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from fragviz.replay.analysis import analyze
from fragviz.library.ingest import ingest_file
from fragviz.doctor.report import report_of
from fragviz.snapshot import load_snapshot
from fragviz.library import Library
from fragviz.store.engine import open_store
from fragviz.ui.data.usage import UsageViews
from fragviz.usage.kinds import KINDS
from tests.support.helpers import REAL

FILES = sorted(f for f in os.listdir(REAL) if f.endswith(".pickle"))
# trimmed by its authors: its trace frees memory its segments never held, so the replayed end is not the recorded
# final state (the report reads the recorded one, and warns)
INCONSISTENT = {"nuggets_nightly_mini.pickle"}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("usage") / "store.sqlite")
    conn = open_store(db)
    ids = {name: ingest_file(conn, os.path.join(REAL, name)).id for name in FILES}
    conn.close()
    return db, ids


@pytest.mark.parametrize("name", FILES)
def test_live_allocations_add_up_to_the_replayed_allocated_bytes_in_every_state(name):
    analysis = analyze(load_snapshot(os.path.join(REAL, name)))
    for device, replay in analysis.replays.items():
        lt = replay.lifetimes()
        assert lt.live_bytes(0, lt.states - 1).tolist() == replay.series["allocated"].tolist(), device
        assert (lt.start < lt.end).all() and (lt.start >= 0).all() and (lt.end <= lt.states).all()


@pytest.mark.parametrize("name", FILES)
def test_the_views_by_kind_match_the_report_at_the_end_and_at_the_peak(store, name):
    db, ids = store
    reader = Library.open(db)
    views = UsageViews(reader)
    report = report_of(reader.load_analysis(ids[name]))
    for device in report.devices:
        d, n = device.device, device.trace_events
        checks = [(n, "kinds", device.kinds), (device.peak_requested_state, "kinds_at_peak", device.kinds_at_peak)]
        for state, key, want in checks[1:] if name in INCONSISTENT else checks:
            _, groups = views.view(ids[name], d, "kind", state, state)
            assert groups.grid.states.tolist() == [state]
            by_kind = dict(zip(KINDS, groups.values[:, 0].tolist()))
            # the report reads the blocks of the state and their stacks; the view, the trace's lifetimes
            assert by_kind == want, (d, key)
        bands, _ = views.view(ids[name], d, "site")
        heights = np.zeros(len(bands.bands.grid), np.int64)
        for band, first, last in zip(bands.bands.run_band, bands.bands.run_first, bands.bands.run_last):
            heights[first:last] += bands.sizes[band]
        assert (heights + bands.bands.folded.sum(axis=0)).tolist() == bands.bands.grid.live.tolist()


def test_a_store_from_before_the_allocations_table_reads_them_from_the_trace(store, tmp_path):
    db, ids = store
    sid = ids["hanmin_train_19k.pickle"]
    stored = Library.open(db).lifetimes(sid, 0)
    copy = str(tmp_path / "old.sqlite")
    conn = sqlite3.connect(db)
    conn.execute("VACUUM INTO ?", (copy,))
    conn.close()
    old = sqlite3.connect(copy)
    old.execute("DELETE FROM allocations")
    old.commit()
    old.close()
    worked_out = Library.open(copy).lifetimes(sid, 0)
    for column, values in stored.columns().items():
        assert values.tolist() == getattr(worked_out, column).tolist(), column


def test_report_json_has_kinds_per_device():
    path = os.path.join(REAL, "cs336kk_ctx128_fullstep.pickle")
    out = subprocess.run([sys.executable, "-m", "fragviz", "report", "--json", path], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    for device in json.loads(out)["devices"]:
        assert list(device["kinds"]) == list(KINDS) and list(device["kinds_at_peak"]) == list(KINDS)
        assert sum(device["kinds"].values()) == device["allocated_bytes"]
        # at the peak of requested bytes a full training step holds optimizer state and gradients
        assert device["kinds_at_peak"]["optimizer_state"] > 0
    text = subprocess.run([sys.executable, "-m", "fragviz", "report", path], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    assert "by kind" in text and "at the peak" in text


def test_kind_rules_from_fragviz_toml_change_the_report(tmp_path):
    path = os.path.join(REAL, "sketchkv.pickle")
    config = tmp_path / "fragviz.toml"
    config.write_text('[kinds]\nkv_cache = ["generation/utils\\\\.py:_sample$"]\n')
    env = {**os.environ, "FRAGVIZ_CONFIG": str(config)}
    run = [sys.executable, "-m", "fragviz", "report", "--json", path]
    before = json.loads(subprocess.run(run, cwd=ROOT, check=True, capture_output=True, text=True).stdout)
    after = json.loads(subprocess.run(run, cwd=ROOT, check=True, capture_output=True, text=True, env=env).stdout)
    b, a = before["devices"][0]["kinds"], after["devices"][0]["kinds"]
    assert sum(a.values()) == sum(b.values())
    assert a["kv_cache"] > b["kv_cache"]  # allocations under generate's _sample are now the user's KV cache
    config.write_text('[kinds]\nkv_cache = ["("]\n')
    bad = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and str(config) in bad.stderr and "not a regular expression" in bad.stderr


def test_the_docs_kinds_example_claims_the_samples_kv_cache(tmp_path):
    page = open(os.path.join(ROOT, "docs", "report.md")).read()  # the [kinds] example of the reports page
    block = page.split("```toml\n", 1)[1].split("```", 1)[0]
    assert block.startswith("[kinds]")
    config = tmp_path / "fragviz.toml"
    config.write_text(block)
    sample = os.path.join(ROOT, "sample_snapshots", "gpt_infer_kvcache.pickle.gz")
    run = [sys.executable, "-m", "fragviz", "report", "--json", sample]
    before = json.loads(subprocess.run(run, cwd=ROOT, check=True, capture_output=True, text=True).stdout)
    after = json.loads(subprocess.run(run, cwd=ROOT, check=True, capture_output=True, text=True,
                                      env={**os.environ, "FRAGVIZ_CONFIG": str(config)}).stdout)
    b, a = before["devices"][0], after["devices"][0]
    assert b["kinds"]["kv_cache"] == 0 and b["kinds_at_peak"]["kv_cache"] == 0
    # the decode loop's caches, grown by torch.cat in attention(), are live at the end and at the peak
    assert a["kinds"]["kv_cache"] > 0 and a["kinds_at_peak"]["kv_cache"] > 0
    assert a["kinds"]["activations"] == b["kinds"]["activations"] - a["kinds"]["kv_cache"]
