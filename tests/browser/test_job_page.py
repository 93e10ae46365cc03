"""The job page in a real browser over a store filled by `fragviz ingest --job`: the library's jobs card, the
per-rank table against the store, the outlier marked, the chart drawn, a rank's link and bar opening its
snapshot."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.helpers import REAL, ROOT
from tests.support.server import Server

from fragviz.jobs.table import job_figures_of
from fragviz.store.reader import StoreReader
from fragviz.base.units import format_bytes

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
RANKS = {"rank0.pickle": os.path.join(ROOT, "sample_snapshots", "gpt_train.pickle.gz"),
         "trainer_rank_1.pickle.gz": os.path.join(ROOT, "sample_snapshots", "gpt_train_fragmentation_oom.pickle.gz"),
         "dump_2.pickle": os.path.join(ROOT, "sample_snapshots", "gpt_train_expandable.pickle.gz"),
         "rank3.pickle": os.path.join(REAL, "sketchkv.pickle"),  # 16 GiB against about 1 GiB: the outlier
         "rank_4.pickle": os.path.join(REAL, "cs336silmont_small.pickle")}


@pytest.fixture(scope="module")
def job_server(tmp_path_factory):
    where = tmp_path_factory.mktemp("jobpage")
    os.makedirs(where / "ranks")
    for name, real in RANKS.items():
        os.symlink(real, where / "ranks" / name)
    db = str(where / "store.sqlite")
    out = subprocess.run([FRAGVIZ, "ingest", "--db", db, "--job", "train-5", str(where / "ranks"), "--workers", "2"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    srv = Server(db, samples=False, log=str(where / "server.log"))
    reader = StoreReader(db)
    yield srv, job_figures_of(reader, reader.job_named("train-5").id)
    srv.stop()


def open_job(page, srv) -> None:
    page.goto(srv.url + "/")
    page.wait_for_selector("#library-jobs a:text('train-5')")
    assert "OOM" in page.inner_text("#library-jobs")  # the worst OOM: the rank with the sample's OOM
    page.click("#library-jobs a:text('train-5')")
    page.wait_for_selector("#job-ranks-table tbody tr")


def test_the_table_is_the_stores_ranks(page, job_server):
    srv, figures = job_server
    open_job(page, srv)
    assert page.evaluate("location.pathname") == f"/jobs/{figures.job.id}"
    rows = page.locator("#job-ranks-table tbody tr")
    assert rows.count() == len(figures.rows) == len(RANKS)
    for i, want in enumerate(figures.rows):  # sorted by rank as loaded
        cells = rows.nth(i).locator("td").all_inner_texts()
        assert cells[0] == f"rank {want.rank}"
        assert cells[2] == format_bytes(want.peak_reserved_bytes)
        assert cells[3] == format_bytes(want.peak_requested_bytes)
        assert cells[4] == f"{want.fragmentation_at_peak:.1%}"
        assert cells[5] == str(want.ooms)
        assert ("fv-outlier-row" in (rows.nth(i).get_attribute("class") or "")) == want.outlier
    assert 3 in [r.rank for r in figures.rows if r.outlier]  # 16 GiB among ranks of about 1 GiB
    assert "rank 3" in page.inner_text("#job-imbalance") and "MAD" in page.inner_text("#job-imbalance")
    largest, middle = figures.largest(), figures.median_row()
    href = page.get_attribute("#job-compare-link", "href")
    assert href.startswith(f"/compare?a={largest.snapshot_id}&b={middle.snapshot_id}&align=")
    # on an axis both sides have: the comparison it opens draws both (these ranks record no step markers)
    assert href.rsplit("=", 1)[1] in ("time", "event")
    page.click("#job-compare-link")
    page.wait_for_function("(() => { const p = document.querySelector('#compare-aligned .js-plotly-plot');"
                           " return p && p._fullData && ['A', 'B'].every(s => p._fullData.some(t =>"
                           " t.name.startsWith(s) && t.x && t.x.length > 0)); })()", timeout=60000)
    assert page.errors == []


def test_the_chart_and_sorting(page, job_server):
    srv, figures = job_server
    open_job(page, srv)
    page.wait_for_function("document.querySelectorAll('#job-ranks-chart .bars .point').length >= 10")
    assert page.locator("#job-ranks-chart .scatterlayer .point").count() == sum(1 for r in figures.rows if r.ooms)
    page.click("#job-ranks-table button:text('peak reserved')")
    page.wait_for_selector("#job-ranks-table button:text('peak reserved ▼')")
    first = page.locator("#job-ranks-table tbody tr").first.locator("td").first.inner_text()
    assert first == f"rank {figures.largest().rank}"
    assert page.errors == []


def test_a_rank_opens_its_snapshot(page, job_server):
    srv, figures = job_server
    open_job(page, srv)
    row = figures.rows[1]
    page.click(f"#job-ranks-table a:text-is('rank {row.rank}')")
    page.wait_for_function(f"location.pathname === '/snapshots/{row.snapshot_id}'")
    assert page.evaluate("location.search") == f"?device={row.device}"
    page.wait_for_selector("#timeline")
    page.go_back()
    page.wait_for_selector("#job-ranks-chart .bars .point")
    box = page.locator("#job-ranks-chart .bars .point").nth(3).bounding_box()  # reserved bars first: rank 3's
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # a person's click on the bar
    page.wait_for_function(f"location.pathname === '/snapshots/{figures.rows[3].snapshot_id}'")
    assert page.errors == []
