"""The compare page's memory gate without a server: the verdict read through a real store (two bundled samples
ingested) equals the verdict of the same files read as `fragviz gate` reads them; its rows as the page's tables
word them; a snapshot that cannot be read is a gate that cannot judge, saying why without the store's path; the
budget boxes as the page reads them and writes them into the URL."""
from __future__ import annotations

import functools
import os

import pytest

from fragviz.base.errors import UsageError
from fragviz.base.units import format_bytes
from fragviz.gate.budgets import Budgets, budgets_from_text
from fragviz.gate.inputs import read_sides
from fragviz.gate.judge import CANNOT_JUDGE, FAILED, PASSED, judge
from fragviz.library import Library
from fragviz.library.ingest import ingest_file
from fragviz.store.engine import open_store
from fragviz.ui.data.gate import check_rows, figure_rows, gate_of, site_rows
from fragviz.ui.data.views import Views
from fragviz.ui.pages.compare.gate import budgets_of, url_keys
from tests.support.helpers import ROOT

TRAIN = os.path.join(ROOT, "sample_snapshots", "gpt_train.pickle.gz")
FRAG = os.path.join(ROOT, "sample_snapshots", "gpt_train_fragmentation_oom.pickle.gz")


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """Views over a store holding A (the baseline) and B (the candidate), and their ids."""
    db = str(tmp_path_factory.mktemp("gate_data") / "store.sqlite")
    store = open_store(db)
    a, b = (ingest_file(store, path).id for path in (TRAIN, FRAG))
    reader = Library.open(store)
    yield Views(reader), a, b
    reader.close()


@functools.lru_cache(maxsize=None)
def sides(device_memory: str | None):
    """Both files read as `fragviz gate` reads them (replayed, not read from the store), B simulated on a device
    of `device_memory` where given."""
    return read_sides(FRAG, TRAIN, None, budgets_from_text(device_memory=device_memory))


def from_files(budgets: Budgets, device_memory: str | None = None):
    """`fragviz gate FRAG --baseline TRAIN`'s verdict."""
    candidate, baseline = sides(device_memory)
    return judge(candidate.summary, baseline.summary, budgets, candidate.fits)


@pytest.mark.parametrize("texts", [{"growth": "5%"}, {"growth": "50%"}, {}, {"growth": "50%", "device_memory": "1GiB"},
                                   {"peak_reserved": "1GiB", "fragmentation": "0.2"}])
def test_through_the_store_the_verdict_of_the_files(stored, texts):
    views, a, b = stored
    budgets = budgets_from_text(**texts)
    got, expected = gate_of(views, a, b, budgets), from_files(budgets, texts.get("device_memory"))
    assert got.status == expected.status and got.reason == expected.reason
    assert [c.as_dict() for c in got.checks] == [c.as_dict() for c in expected.checks]
    assert got.sites == expected.sites and got.sites
    assert got.candidate.devices == expected.candidate.devices and got.candidate.source == str(b)
    assert got.baseline.devices == expected.baseline.devices and got.baseline.source == str(a)


def test_the_rows_the_page_shows(stored):
    views, a, b = stored
    result = gate_of(views, a, b, budgets_from_text(growth="5%", device_memory="1GiB"))
    assert result.status == FAILED
    rows = check_rows(result)
    assert [(r["result"], r["budget"]) for r in rows] == [
        ("FAIL", "Peak reserved growth"), ("FAIL", "Peak allocated growth"), ("FAIL", "Fits the device")]
    reserved = result.checks[0]
    assert rows[0]["value"] == format_bytes(reserved.value) and rows[0]["limit"] == format_bytes(reserved.limit)
    assert rows[0]["baseline"] == format_bytes(reserved.baseline)
    assert rows[0]["change"].startswith("+" + format_bytes(reserved.value - reserved.baseline) + " (+")
    assert rows[2]["baseline"] == "-" and rows[2]["change"] == "-"  # the device check has no baseline
    top, site = site_rows(result)[0], result.sites[0]
    assert top == {"site": site.site, "before": format_bytes(site.before_bytes),
                   "after": format_bytes(site.after_bytes),
                   "growth": "+" + format_bytes(site.after_bytes - site.before_bytes), "frame": site.frame}
    before, after = result.baseline.devices[0], result.candidate.devices[0]
    assert figure_rows(result) == [
        ("Peak reserved", format_bytes(before.peak_reserved_bytes), format_bytes(after.peak_reserved_bytes)),
        ("Peak allocated", format_bytes(before.peak_allocated_bytes), format_bytes(after.peak_allocated_bytes)),
        ("Fragmentation at peak", f"{before.fragmentation:.1%}", f"{after.fragmentation:.1%}")]


def test_a_gate_of_a_run_with_itself_passes_and_no_site_grew(stored):
    views, a, _b = stored
    result = gate_of(views, a, a, budgets_from_text(growth="0%"))
    assert result.status == PASSED and len(result.checks) == 2 and result.sites == ()


def test_what_cannot_be_read_cannot_be_judged_and_the_store_stays_unnamed(stored):
    views, a, b = stored
    path = views.reader.records.path
    missing = gate_of(views, a, 999, Budgets())
    assert missing.status == CANNOT_JUDGE and "999" in missing.reason and path not in missing.reason
    assert check_rows(missing) == [] and site_rows(missing) == [] and figure_rows(missing) == []
    bad_conf = gate_of(views, a, b, budgets_from_text(device_memory="1GiB", alloc_conf="expandable_segments:maybe"))
    assert bad_conf.status == CANNOT_JUDGE and "expandable_segments" in bad_conf.reason


def test_the_budget_boxes():
    assert budgets_of(["", " 2GiB ", None, "0.3", "", None]) == Budgets(peak_allocated=2 * 1024**3, fragmentation=0.3)
    assert budgets_of(["1GiB", None, "5", None, "80GiB", "expandable_segments:True"]) == Budgets(
        1024**3, None, 0.05, None, 80 * 1024**3, "expandable_segments:True")
    with pytest.raises(UsageError, match="--max-growth: '5 apples' is not a percentage"):
        budgets_of([None, None, "5 apples", None, None, None])
    with pytest.raises(UsageError, match="--alloc-conf goes with --device-memory"):
        budgets_of([None, None, None, None, " ", "expandable_segments:True"])
    assert url_keys(["", None, " 5% ", "0.3", None, ""]) == {"gr": None, "ga": None, "gg": "5%", "gf": "0.3",
                                                              "gd": None, "gc": None}
