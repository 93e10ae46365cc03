"""The `fragviz` command as a user runs it: real processes, real files, a real store."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fragviz.snapshot import read_raw
from tests.support.helpers import REAL, write_pickle

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
SMALL = os.path.join(REAL, "cs336silmont_small.pickle")
TINY = os.path.join(REAL, "diffusion_tiny.pickle")


def run(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([FRAGVIZ, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_the_console_script_is_installed():
    assert os.path.exists(FRAGVIZ), "pip install -e . installs the fragviz command beside python"
    assert run("--version").stdout.startswith("fragviz ")


def test_ingest_prints_a_line_per_file_with_its_id(store_db):
    db = store_db
    out = run("ingest", SMALL, TINY, "--db", db)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines == [f"{SMALL}: ingested as snapshot 1", f"{TINY}: ingested as snapshot 2"]
    again = run("ingest", SMALL, "--db", db)
    assert again.stdout.strip() == f"{SMALL}: already in the store as snapshot 1 (unchanged)"


def test_ingest_json_results_and_exit_status(tmp_path, store_db):
    db = store_db
    evil = tmp_path / "evil.pickle"
    evil.write_bytes(b"cos\nsystem\n(S'true'\ntR.")
    run("ingest", TINY, "--db", db)
    out = run("ingest", SMALL, TINY, str(evil), "--db", db, "--json")
    assert out.returncode == 2
    results = json.loads(out.stdout)
    assert [r["status"] for r in results] == ["ingested", "unchanged", "error"]
    assert [r["id"] for r in results] == [2, 1, None]
    assert all(set(r) == {"file", "id", "status", "error"} for r in results)
    assert results[0]["error"] is None and str(evil) in results[2]["error"]


@pytest.mark.parametrize("content", [b"", b"\x89PNG\r\n\x1a\nxxxx", b"\x80\x04\x95\x10"])
def test_a_bad_file_gets_one_line_exit_2_and_nothing_stored(tmp_path, content, store_db):
    db = str(tmp_path / "new" / "s.sqlite")
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(content)
    out = run("ingest", str(bad), "--db", db)
    assert out.returncode == 2
    assert out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and str(bad) in out.stderr
    assert not os.path.exists(tmp_path / "new")  # a failed ingest into a new path leaves nothing behind
    db = store_db
    assert run("ingest", os.path.join(REAL, "diffusion_tiny.pickle"), "--db", db).returncode == 0
    assert run("ingest", str(bad), "--db", db).returncode == 2
    listing = subprocess.run([sys.executable, "-c", "import sys; from fragviz.store.engine import open_store; "
                              "print(open_store(sys.argv[1]).rows('SELECT count(*) FROM snapshots')[0][0])", db],
                             capture_output=True, text=True)
    assert listing.stdout.strip() == "1", listing.stderr
    rep = run("report", str(bad))
    assert rep.returncode == 2 and len(rep.stderr.strip().splitlines()) == 1


def test_report_json_is_one_object_and_the_store_agrees(store_db):
    db = store_db
    run("ingest", SMALL, "--db", db)
    from_file = run("report", SMALL, "--json")
    from_id = run("report", "1", "--db", db, "--json")
    assert from_file.returncode == 0 and len(from_file.stdout.strip().splitlines()) == 1
    assert json.loads(from_file.stdout) == json.loads(from_id.stdout)
    at = json.loads(run("report", "1", "--db", db, "--json", "--at", "40", "--device", "0").stdout)
    assert at == json.loads(run("report", SMALL, "--json", "--at", "40").stdout)
    assert at["devices"][0]["segments"] == 6


def test_report_errors_are_one_line(store_db):
    db = store_db
    run("ingest", SMALL, "--db", db)
    for args, expected in ((("report", SMALL, "--at", "98"), "out of range"),
                           (("report", "7", "--db", db), "no snapshot with id 7"),
                           (("report", "no-such-file.pickle"), "no such file"),
                           (("report", SMALL, "--device", "3"), "no device 3")):
        out = run(*args)
        assert out.returncode == 2, args
        assert len(out.stderr.strip().splitlines()) == 1 and expected in out.stderr


def test_text_report(tmp_path):
    out = run("report", SMALL)
    assert out.returncode == 0
    assert "device 0 (final state)" in out.stdout and "GiB" in out.stdout
    assert "top allocation sites by live bytes" in out.stdout


def test_progress_bar_when_asked(tmp_path):
    path = write_pickle(str(tmp_path / "s.pickle"), read_raw(SMALL).data)
    out = run("ingest", path, "--db", str(tmp_path / "s.sqlite"), "--progress")
    assert out.returncode == 0 and "%" in out.stderr and "[" in out.stderr


def test_default_store_comes_from_the_environment(tmp_path):
    env = {**os.environ, "FRAGVIZ_DB": str(tmp_path / "env.sqlite")}
    out = subprocess.run([FRAGVIZ, "ingest", TINY], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and os.path.exists(tmp_path / "env.sqlite")
