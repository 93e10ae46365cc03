"""Data out in a real browser and over HTTP: the snapshot page's export card downloads files that pandas reads
with the rows the store holds, and the two export routes answer files, names and JSON refusals."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import pandas as pd
import pytest

from tests.support.helpers import ROOT
from tests.support.server import Server

SAMPLES = os.path.join(ROOT, "sample_snapshots")
TRAIN = os.path.join(SAMPLES, "gpt_train.pickle.gz")
EXPANDABLE = os.path.join(SAMPLES, "gpt_train_expandable.pickle.gz")
OOM = os.path.join(SAMPLES, "gpt_train_fragmentation_oom.pickle.gz")


def ingest(db: str, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "fragviz", "ingest", "--db", db, "--no-progress", *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def export_server(tmp_path_factory):
    """A server over a store with one snapshot (id 1) and a job of two ranks (job 1; `ranks` maps each rank to its
    snapshot id, as `fragviz ingest --job` said)."""
    folder = tmp_path_factory.mktemp("export")
    db = str(folder / "store.sqlite")
    ingest(db, TRAIN)
    ranks = folder / "ranks"
    ranks.mkdir()
    shutil.copy(EXPANDABLE, ranks / "rank0.pickle.gz")
    shutil.copy(OOM, ranks / "rank1.pickle.gz")
    said = ingest(db, "--job", "train", str(ranks))
    srv = Server(db, samples=False)
    srv.ranks = {int(line.split(":")[0].split()[1]): int(line.rsplit(" ", 1)[1])
                 for line in said.splitlines() if line.startswith("rank ")}
    assert sorted(srv.ranks) == [0, 1]
    yield srv
    srv.stop()


def get(srv: Server, path: str) -> tuple[int, dict, bytes]:
    try:
        with urllib.request.urlopen(srv.url + path, timeout=120) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def stored_series_rows(srv: Server, sid: int) -> int:
    """States of every device of a snapshot, by the report: trace events + 1 each."""
    report = srv.get_json(f"/api/snapshots/{sid}/report")
    return sum(d["trace_events"] + 1 for d in report["devices"])


def test_the_export_card_downloads_what_pandas_reads(page, export_server, tmp_path):
    page.goto(export_server.url + "/snapshots/1?device=0&event=40")
    page.wait_for_selector("#export-link[href*='what=series']")
    with page.expect_download() as info:
        page.click("#export-link")
    series = info.value
    assert series.suggested_filename == "gpt_train-1-series.parquet"
    series.save_as(tmp_path / series.suggested_filename)
    frame = pd.read_parquet(tmp_path / series.suggested_filename)
    assert len(frame) == stored_series_rows(export_server, 1)
    # the segments at the page's event, as CSV
    page.locator("#export-what input[value='segments']").check()
    page.locator("#export-format input[value='csv']").check()
    page.wait_for_selector("#export-link[href*='what=segments'][href*='format=csv'][href*='at=40']")
    with page.expect_download() as info:
        page.click("#export-link")
    segments = info.value
    assert segments.suggested_filename == "gpt_train-1-segments.csv"
    segments.save_as(tmp_path / "segments.csv")
    blocks = pd.read_csv(tmp_path / "segments.csv")
    state = export_server.get_json("/api/snapshots/1/state?device=0&event=40")
    assert len(blocks) == sum(len(s["blocks"]) for s in state["segments"])
    assert blocks.drop_duplicates("segment_address").segment_size.sum() == state["reserved_bytes"]
    assert page.errors == []


def test_the_export_link_follows_the_selected_event(page, export_server):
    page.goto(export_server.url + "/snapshots/1?device=0&event=40")
    page.locator("#export-what input[value='segments']").check()
    page.wait_for_selector("#export-link[href*='at=40']")
    page.click("#next-event")
    page.wait_for_selector("#export-link[href*='at=41']")
    assert "event 41" in page.locator("#export-note").inner_text()
    assert page.errors == []


def test_the_snapshot_route_sends_parquet_and_csv_attachments(export_server):
    status, headers, body = get(export_server, "/api/snapshots/1/export?what=series&format=parquet")
    assert status == 200 and headers["Content-Disposition"] == "attachment; filename=gpt_train-1-series.parquet"
    frame = pd.read_parquet(io.BytesIO(body))
    assert len(frame) == stored_series_rows(export_server, 1)
    status, headers, body = get(export_server, "/api/snapshots/1/export?what=allocations&format=csv&device=0")
    assert status == 200 and headers["Content-Type"].startswith("text/csv")
    assert "gpt_train-1-allocations.csv" in headers["Content-Disposition"]
    report = export_server.get_json("/api/snapshots/1/report")
    assert len(pd.read_csv(io.BytesIO(body))) == report["devices"][0]["trace_actions"]["alloc"]


def test_the_job_route_puts_the_ranks_one_after_the_other(export_server):
    status, headers, body = get(export_server, "/api/jobs/1/export?what=series&format=parquet")
    assert status == 200 and "train-job1-series.parquet" in headers["Content-Disposition"]
    frame = pd.read_parquet(io.BytesIO(body))
    assert frame.columns[0] == "rank"
    assert frame.groupby("rank").size().to_dict() == {rank: stored_series_rows(export_server, sid)
                                                      for rank, sid in export_server.ranks.items()}
    status, _, body = get(export_server, "/api/jobs/1/export?what=segments&format=csv")
    blocks = pd.read_csv(io.BytesIO(body))
    assert status == 200 and sorted(set(blocks["rank"])) == [0, 1]


@pytest.mark.parametrize("path, status, words", [
    ("/api/snapshots/99/export?what=series&format=csv", 404, "no snapshot with id 99"),
    ("/api/jobs/7/export?what=series&format=csv", 404, "no job with id 7"),
    ("/api/snapshots/1/export?what=blocks&format=csv", 400, "blocks"),
    ("/api/snapshots/1/export?what=series&format=xlsx", 400, "xlsx"),
    ("/api/snapshots/1/export?what=series&format=csv&device=5", 400, "no device 5"),
    ("/api/snapshots/1/export?what=segments&format=csv&at=99999999", 400, "out of range"),
    ("/api/snapshots/1/export?what=series&format=csv&device=zero", 400, "device"),
])
def test_refusals_are_json(export_server, path, status, words):
    got, headers, body = get(export_server, path)
    assert got == status and headers["Content-Type"] == "application/json"
    assert words in json.loads(body)["error"]
