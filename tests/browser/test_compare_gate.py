"""The compare page's memory gate in a real browser against a real server: snapshot B judged against snapshot A
for budgets typed on the page (or given in its URL), checked against `fragviz gate B --baseline A` run on the
files themselves (an independent computation: the files replayed, not the store read); the command the card
shows, run against the store, gives the same verdict; a link to the page gives the same gate again; a budget
that is not understood is one line that says so."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from fragviz.base.units import format_bytes
from tests.support.helpers import ROOT
from tests.support.server import Server

FRAGVIZ = os.path.join(os.path.dirname(sys.executable), "fragviz")
TRAIN = os.path.join(ROOT, "sample_snapshots", "gpt_train.pickle.gz")  # A, the baseline: snapshot 1
FRAG = os.path.join(ROOT, "sample_snapshots", "gpt_train_fragmentation_oom.pickle.gz")  # B, the candidate: 2
TITLES = {"peak_reserved_growth": "Peak reserved growth", "peak_allocated_growth": "Peak allocated growth",
          "fits_device": "Fits the device"}
ROWS = "(id) => [...document.querySelectorAll(`#${id} tr`)].map(tr => [...tr.querySelectorAll('td')]" \
       ".map(td => td.innerText.trim())).filter(r => r.length)"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("compare_gate") / "store.sqlite")
    for path in (TRAIN, FRAG):  # ids 1 and 2
        subprocess.run([sys.executable, "-m", "fragviz", "ingest", "--db", db, path], cwd=ROOT, check=True,
                       capture_output=True)
    srv = Server(db, samples=False)
    yield srv
    srv.stop()


def gate_json(*args: str) -> dict:
    """`fragviz gate ... --json`: exit 0 (passed) or 1 (failed), its verdict as JSON."""
    done = subprocess.run([FRAGVIZ, "gate", *args, "--json"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def on_files(*budgets: str) -> dict:
    """The gate of the files themselves: B against A."""
    return gate_json(FRAG, "--baseline", TRAIN, *budgets)


def expected_checks(verdict: dict) -> list[list[str]]:
    """The checks table's rows as the page words them: from the CLI's numbers, formatted here."""
    rows = []
    for c in verdict["checks"]:
        assert c["unit"] == "bytes"
        base = c["baseline"]
        change = "-"
        if base is not None:
            diff = c["value"] - base
            change = ("+" if diff >= 0 else "-") + format_bytes(abs(diff)) + f" ({diff / base:+.1%})"
        rows.append(["pass" if c["passed"] else "FAIL", TITLES[c["name"]], format_bytes(c["value"]),
                     format_bytes(c["limit"]), "-" if base is None else format_bytes(base), change])
    return rows


def verdict_says(page, text: str) -> str:
    page.wait_for_function("(document.querySelector('#gate-verdict') || {innerText: ''}).innerText"
                           f".includes({json.dumps(text)})")
    return page.locator("#gate-verdict").inner_text().strip()


def rows(page, table: str, count: int) -> list[list[str]]:
    page.wait_for_function(f"({ROWS})({json.dumps(table)}).length === {count}")
    return page.evaluate(ROWS, table)


def budget(page, box: str, text: str) -> None:
    """Type a budget as a person does: the box's text replaced, then Enter (the boxes are debounced)."""
    page.fill(f"#{box}", text)
    page.press(f"#{box}", "Enter")


def test_the_gate_gives_the_verdict_of_the_command_line(page, store):
    page.goto(f"{store.url}/compare?a=1&b=2&gg=5%25")
    assert page.input_value("#gate-max-growth") == "5%"
    expected = on_files("--max-growth", "5%")
    assert expected["status"] == "failed" and len(expected["checks"]) == 2
    assert verdict_says(page, "memory gate FAILED") == "memory gate FAILED: 2 of 2 budget(s) broken"
    assert rows(page, "gate-checks", 2) == expected_checks(expected)
    top, site = rows(page, "gate-sites", len(expected["sites"]))[0], expected["sites"][0]
    assert top[:3] == [site["site"], format_bytes(site["before_bytes"]), format_bytes(site["after_bytes"])]
    assert top[4] == site["frame"]
    command = page.locator("#gate-command").inner_text()
    assert command == "fragviz gate 2 --baseline 1 --max-growth 5%"
    # the command, run against the same store, gives the same checks
    from_store = gate_json(*shlex.split(command)[2:], "--db", store.db)
    assert from_store["checks"] == expected["checks"] and from_store["sites"] == expected["sites"]
    assert "--db" in page.locator("#gate-reproduce").inner_text()  # the caption says where it needs one

    budget(page, "gate-max-growth", "50%")
    assert verdict_says(page, "passed") == "memory gate passed: 2 budget(s)"
    assert rows(page, "gate-checks", 2) == expected_checks(on_files("--max-growth", "50%"))
    assert page.locator("#gate-command").inner_text() == "fragviz gate 2 --baseline 1 --max-growth 50%"
    page.wait_for_function("location.search.includes('gg=50%25')")

    budget(page, "gate-device-memory", "1GiB")
    assert verdict_says(page, "FAILED") == "memory gate FAILED: 1 of 3 budget(s) broken"
    expected = on_files("--max-growth", "50%", "--device-memory", "1GiB")
    got = rows(page, "gate-checks", 3)
    assert got == expected_checks(expected) and got[2][:2] == ["FAIL", "Fits the device"]
    assert page.locator("#gate-command").inner_text() == \
        "fragviz gate 2 --baseline 1 --max-growth 50% --device-memory 1GiB"
    page.wait_for_function("location.search.includes('gd=1GiB')")
    query = page.evaluate("Object.fromEntries(new URLSearchParams(location.search))")
    assert query["a"] == "1" and query["b"] == "2" and query["gg"] == "50%" and query["gd"] == "1GiB"
    assert "ea" in query and "eb" in query  # the keys the page wrote before the gate are there still

    page.goto(f"{store.url}/compare{page.evaluate('location.search')}")  # a link to the page: the same gate
    assert verdict_says(page, "FAILED") == "memory gate FAILED: 1 of 3 budget(s) broken"
    assert page.input_value("#gate-device-memory") == "1GiB" and page.input_value("#gate-max-growth") == "50%"
    assert rows(page, "gate-checks", 3) == expected_checks(expected)

    budget(page, "gate-max-growth", "5 apples")
    message = verdict_says(page, "not understood")
    assert message == "Budget not understood: --max-growth: '5 apples' is not a percentage: write e.g. 5% (or 5)"
    assert rows(page, "gate-checks", 0) == [] and not page.locator("#gate-checks").is_visible()
    assert not page.locator("#gate-command").is_visible() and not page.locator("#gate-sites").is_visible()
    assert "Traceback" not in page.locator(".fv-gate").inner_text()
    assert page.errors == []


def summary(path: str, where) -> dict:
    """A file's gate figures as `fragviz gate --write-summary` writes them (its one device)."""
    out = str(where / (os.path.basename(path) + ".json"))
    gate_json(path, "--write-summary", out)
    with open(out, encoding="utf-8") as fh:
        (device,) = json.load(fh)["devices"]
    return device


def test_without_a_budget_the_figures_and_the_sites(page, store, tmp_path):
    page.goto(f"{store.url}/compare?a=1&b=2")
    assert verdict_says(page, "passed") == "memory gate passed: no budget given"
    a, b = summary(TRAIN, tmp_path), summary(FRAG, tmp_path)
    assert rows(page, "gate-figures", 3) == [
        ["Peak reserved", format_bytes(a["peak_reserved_bytes"]), format_bytes(b["peak_reserved_bytes"])],
        ["Peak allocated", format_bytes(a["peak_allocated_bytes"]), format_bytes(b["peak_allocated_bytes"])],
        ["Fragmentation at peak", f"{a['fragmentation']:.1%}", f"{b['fragmentation']:.1%}"]]
    assert rows(page, "gate-checks", 0) == [] and not page.locator("#gate-checks").is_visible()
    sites = on_files()["sites"]
    assert page.locator("#gate-sites-title").inner_text() == "Sites whose memory at the peak grew most"
    assert [r[0] for r in rows(page, "gate-sites", len(sites))] == [s["site"] for s in sites]
    assert page.locator("#gate-command").inner_text() == "fragviz gate 2 --baseline 1"
    assert "whole runs" in page.locator(".fv-gate").inner_text()
    assert page.errors == []
