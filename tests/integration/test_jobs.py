"""`fragviz ingest --job NAME DIR_OR_GLOB` as a user runs it: real snapshot files under rank-style names,
worker processes, the per-rank lines and JSON, the job in the store, and the per-rank figures checked against
`fragviz report --json` of each file and against the replay's own series."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.support.helpers import REAL, ev, segment, block, snapshot, write_pickle

from fragviz.replay.analysis import analyze
from fragviz.jobs.table import job_figures_of
from fragviz.model.metrics import state_figures
from fragviz.snapshot import load_snapshot
from fragviz.store.reader import StoreReader

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
SAMPLES = os.path.join(ROOT, "sample_snapshots")
# rank file name -> the real snapshot it is
JOB = {"rank0.pickle": os.path.join(SAMPLES, "gpt_train.pickle.gz"),
       "trainer_rank_1.pickle.gz": os.path.join(SAMPLES, "gpt_train_fragmentation_oom.pickle.gz"),
       "dump_2.pickle": os.path.join(REAL, "diffusion_tiny.pickle"),
       "rank-3.pkl": os.path.join(REAL, "flexgen_opt13b_oom.pickle")}
RANK_OF = {"rank0.pickle": 0, "trainer_rank_1.pickle.gz": 1, "dump_2.pickle": 2, "rank-3.pkl": 3}


def fragviz(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([FRAGVIZ, *args], capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def job_dir(where, files: dict[str, str]) -> str:
    os.makedirs(where, exist_ok=True)
    for name, real in files.items():
        os.symlink(real, os.path.join(where, name))
    return str(where)


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    where = tmp_path_factory.mktemp("job")
    directory = job_dir(where / "ranks", JOB)
    db = str(where / "store.sqlite")
    out = fragviz("ingest", "--db", db, "--job", "train-8", directory, "--workers", "2")
    return db, directory, out


def test_every_rank_is_ingested_and_recorded_in_the_job(ingested):
    db, directory, out = ingested
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("rank ")]
    assert len(lines) == len(JOB)
    ids = {}
    for name, rank in RANK_OF.items():
        line = next(line for line in lines if line.startswith(f"rank {rank}: "))
        assert line.startswith(f"rank {rank}: {os.path.join(directory, name)}: ingested as snapshot ")
        ids[rank] = int(line.rsplit(" ", 1)[1])
    job = StoreReader(db).job_named("train-8")
    assert {r.rank: r.snapshot_id for r in job.ranks} == ids
    assert "train-8" in out.stdout.splitlines()[-1]


def test_again_is_unchanged_and_the_json_names_ranks(ingested):
    db, directory, _ = ingested
    before = {r.rank: r.snapshot_id for r in StoreReader(db).job_named("train-8").ranks}
    out = fragviz("ingest", "--db", db, "--job", "train-8", directory, "--json", "--no-progress")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert sorted(r["rank"] for r in rows) == sorted(RANK_OF.values())
    assert all(r["status"] == "unchanged" and r["id"] == before[r["rank"]] and r["error"] is None for r in rows)
    assert {r.rank: r.snapshot_id for r in StoreReader(db).job_named("train-8").ranks} == before


def report(path: str) -> dict:
    out = fragviz("report", path, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_per_rank_figures_match_the_report_of_each_file(ingested):
    db, directory, _ = ingested
    reader = StoreReader(db)
    figures = job_figures_of(reader, reader.job_named("train-8").id)
    for name, rank in RANK_OF.items():
        devices = report(os.path.join(directory, name))["devices"]
        rows = [r for r in figures.rows if r.rank == rank]
        assert [r.device for r in rows] == [d["device"] for d in devices]
        for row, d in zip(rows, devices):
            assert row.peak_reserved_bytes == d["peak_reserved_bytes"]
            assert row.peak_requested_bytes == d["peak_requested_bytes"]
            assert row.ooms == d["trace_actions"].get("oom", 0)
    assert sum(r.ooms for r in figures.rows) > 0  # the sample with an OOM is one of them


def test_fragmentation_at_the_peak_is_the_replays(ingested):
    """Worked out from the replayed state at the first argmax of reserved: the non-releasable bytes of its own
    segments (counted from scratch, not from the running total) over its reserved bytes."""
    db, directory, _ = ingested
    reader = StoreReader(db)
    figures = job_figures_of(reader, reader.job_named("train-8").id)
    for name, rank in RANK_OF.items():
        analysis = analyze(load_snapshot(os.path.join(directory, name)))
        for row in (r for r in figures.rows if r.rank == rank):
            series = analysis.replays[row.device].series
            if not len(series["reserved"]):
                assert row.fragmentation_at_peak is None
                continue
            at = int(np.argmax(series["reserved"]))
            state = state_figures(analysis.replays[row.device].segments_at(at))
            assert state.reserved_bytes == int(series["reserved"][at])
            expected = state.non_releasable_bytes / state.reserved_bytes if state.reserved_bytes else 0.0
            assert row.fragmentation_at_peak == pytest.approx(expected)


def test_two_files_of_one_rank_store_nothing(tmp_path):
    directory = job_dir(tmp_path / "ranks", {"rank0.pickle": JOB["rank0.pickle"],
                                             "dump_0.pickle": JOB["dump_2.pickle"]})
    db = str(tmp_path / "store.sqlite")
    out = fragviz("ingest", "--db", db, "--job", "J", directory, "--workers", "2")
    assert out.returncode == 2
    error = out.stderr.strip().splitlines()
    assert len(error) == 1 and "rank 0" in error[0]
    assert os.path.join(directory, "rank0.pickle") in error[0] and os.path.join(directory, "dump_0.pickle") in error[0]
    assert not os.path.exists(db) or (StoreReader(db).list_snapshots() == [] and StoreReader(db).jobs() == [])


def test_a_bad_file_says_its_error_on_its_rank_and_the_others_are_stored(tmp_path):
    directory = job_dir(tmp_path / "ranks", {"rank0.pickle": JOB["rank0.pickle"],
                                             "rank2.pickle": JOB["dump_2.pickle"]})
    with open(os.path.join(directory, "rank1.pickle"), "wb") as fh:
        fh.write(b"not a snapshot at all")
    db = str(tmp_path / "store.sqlite")
    out = fragviz("ingest", "--db", db, "--job", "J", directory, "--workers", "2")
    assert out.returncode == 2
    bad = [line for line in out.stderr.splitlines() if "rank 1:" in line]
    assert len(bad) == 1 and os.path.join(directory, "rank1.pickle") in bad[0] and "not a snapshot" in bad[0]
    assert [line.split(":")[0] for line in out.stdout.splitlines() if line.startswith("rank ")] == ["rank 0", "rank 2"]
    assert [r.rank for r in StoreReader(db).job_named("J").ranks] == [0, 2]


def test_a_glob_takes_only_what_it_matches(tmp_path):
    directory = job_dir(tmp_path / "ranks", JOB)
    db = str(tmp_path / "store.sqlite")
    out = fragviz("ingest", "--db", db, "--job", "J", os.path.join(directory, "*.pickle"), "--json", "--no-progress")
    assert out.returncode == 0, out.stderr
    assert sorted(r["rank"] for r in json.loads(out.stdout)) == [0, 2]
    assert [r.rank for r in StoreReader(db).job_named("J").ranks] == [0, 2]


def test_a_job_grows_and_a_rank_given_again_is_replaced(tmp_path):
    db = str(tmp_path / "store.sqlite")
    first = job_dir(tmp_path / "a", {"rank0.pickle": JOB["rank0.pickle"], "rank1.pickle": JOB["dump_2.pickle"]})
    second = job_dir(tmp_path / "b", {"rank1.pickle": JOB["rank-3.pkl"], "rank5.pickle": JOB["trainer_rank_1.pickle.gz"]})
    assert fragviz("ingest", "--db", db, "--job", "J", first, "--no-progress").returncode == 0
    out = fragviz("ingest", "--db", db, "--job", "J", second, "--json", "--no-progress")
    assert out.returncode == 0, out.stderr
    ids = {r["rank"]: r["id"] for r in json.loads(out.stdout)}
    ranks = {r.rank: r.snapshot_id for r in StoreReader(db).job_named("J").ranks}
    assert sorted(ranks) == [0, 1, 5] and ranks[1] == ids[1] and ranks[5] == ids[5]


def test_a_rank_from_the_snapshot_or_from_the_option(tmp_path):
    from tests.support.helpers import MiB

    db = str(tmp_path / "store.sqlite")
    traced = snapshot([segment(0x1000, [block(0x1000, 2 * MiB)])],
                      [ev("alloc", 0x1000, 2 * MiB, user_metadata="step=3 rank=6")])
    write_pickle(str(tmp_path / "from_metadata.pickle"), traced)
    device_two = snapshot([segment(0x2000, [block(0x2000, 4 * MiB)], device=2)], [], [], [])
    write_pickle(str(tmp_path / "on_device.pickle"), device_two)
    out = fragviz("ingest", "--db", db, "--job", "J", str(tmp_path / "from_metadata.pickle"),
                  str(tmp_path / "on_device.pickle"), "--json", "--no-progress")
    assert out.returncode == 0, out.stderr
    assert {os.path.basename(r["file"]): r["rank"] for r in json.loads(out.stdout)} == {
        "from_metadata.pickle": 6, "on_device.pickle": 2}
    out = fragviz("ingest", "--db", db, "--job", "K", JOB["rank0.pickle"], "--rank", "9", "--json", "--no-progress")
    assert out.returncode == 0 and json.loads(out.stdout)[0]["rank"] == 9
    assert fragviz("ingest", "--db", db, "--job", "K", SAMPLES, "--rank", "9").returncode == 2  # many files
