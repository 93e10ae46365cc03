"""`fragviz gate` as CI runs it: the real command in a subprocess, its exit status the verdict (0 every budget holds,
1 one breaks, 2 it cannot judge), its one-line refusals, the files it writes (the memory summary, JUnit XML,
Markdown, $GITHUB_STEP_SUMMARY), a store id as a candidate, and its figures on the bundled samples and real
snapshots checked against `fragviz report --json` and against the reserved bytes walked through each trace here."""
from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from tests.support.gate_runs import devices, label, run, untraced
from tests.support.helpers import MiB, REAL, ROOT, write_pickle

FRAGVIZ = [sys.executable, "-m", "fragviz"]
SAMPLES = os.path.join(ROOT, "sample_snapshots")
TRAIN = os.path.join(SAMPLES, "gpt_train.pickle.gz")
RESULT_KEYS = {"passed", "status", "reason", "checks", "sites", "candidate", "baseline", "budgets", "notes"}
CHECK_KEYS = {"name", "limit", "value", "baseline", "passed", "device", "unit", "detail"}
SITE_KEYS = {"site", "frame", "line", "before_line", "before_bytes", "after_bytes", "device"}


def fragviz(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("GITHUB_STEP_SUMMARY", "FRAGVIZ_DB")}
    return subprocess.run([*FRAGVIZ, *args], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**base, **(env or {})})


def gate_json(*args: str, status: int, env: dict | None = None) -> dict:
    out = fragviz("gate", *args, "--json", env=env)
    assert out.returncode == status, out.stdout + out.stderr
    return json.loads(out.stdout)


def one_line(out: subprocess.CompletedProcess) -> str:
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, out.stdout
    return lines[0]


def real_file(name: str) -> str:
    path = os.path.join(REAL, name)
    if not os.path.isfile(path):
        pytest.skip(f"{path} is absent (the real snapshots are read from ../shared/real_snapshots)")
    return path


@pytest.fixture
def runs(tmp_path):
    """The baseline run and the same with a 6 MiB leak (tests/support/gate_runs.py works out their figures)."""
    return (write_pickle(str(tmp_path / "base.pickle"), run().snapshot()),
            write_pickle(str(tmp_path / "leak.pickle"), run(leak=6 * MiB).snapshot()))


# -- the verdict and its shape --------------------------------------------------------------------------------------

def test_the_exit_status_is_the_verdict(runs):
    base, leak = runs
    passed = gate_json(leak, "--baseline", base, "--max-peak-reserved", "38MiB", status=0)  # exactly at the limit
    assert (passed["passed"], passed["status"], passed["reason"]) == (True, "passed", None)
    failed = gate_json(leak, "--baseline", base, "--max-peak-reserved", "38MiB", "--max-growth", "10%", status=1)
    assert failed["passed"] is False and failed["status"] == "failed"
    assert [(c["name"], c["limit"], c["value"], c["baseline"], c["passed"]) for c in failed["checks"]] == [
        ("peak_reserved", 38 * MiB, 38 * MiB, 32 * MiB, True),
        ("peak_reserved_growth", 32 * MiB * 110 // 100, 38 * MiB, 32 * MiB, False),
        ("peak_allocated_growth", 24 * MiB * 110 // 100, 30 * MiB, 24 * MiB, False)]
    assert failed["reason"].startswith("2 of 3 budget(s) broken: ")
    text = fragviz("gate", leak, "--baseline", base, "--max-peak-reserved", "37MiB")
    assert text.returncode == 1 and text.stdout.splitlines()[0] == "memory gate FAILED: 1 of 1 budget(s) broken"


def test_the_json_is_exactly_the_interface(runs):
    base, leak = runs
    d = gate_json(leak, "--baseline", base, "--max-peak-allocated", "30MiB", "--max-fragmentation", "0.25", status=0)
    assert set(d) == RESULT_KEYS
    assert all(set(c) == CHECK_KEYS for c in d["checks"]) and len(d["checks"]) == 2
    assert [(c["name"], c["unit"], c["value"], c["limit"]) for c in d["checks"]] == [
        ("peak_allocated", "bytes", 30 * MiB, 30 * MiB), ("fragmentation", "ratio", pytest.approx(8 / 38), 0.25)]
    (site,) = d["sites"]  # the leak is the one site that grew
    assert set(site) == SITE_KEYS
    assert (site["site"], site["before_bytes"], site["after_bytes"]) == (label("train.py", 40, "stash"), 0, 6 * MiB)
    assert (d["candidate"], d["baseline"]) == (leak, base)


# -- when it cannot judge ------------------------------------------------------------------------------------------

def test_growth_without_a_baseline_cannot_be_judged(runs):
    out = fragviz("gate", runs[1], "--max-growth", "5%")
    assert out.returncode == 2
    assert out.stdout.splitlines()[0] == ("memory gate cannot judge: --max-growth needs a baseline (--baseline FILE, "
                                          "store id or summary) to grow from")
    d = gate_json(runs[1], "--max-growth", "5%", status=2)
    assert (d["passed"], d["status"], d["checks"]) == (False, "cannot judge", [])


def test_a_snapshot_without_a_trace_cannot_be_judged(tmp_path):
    hand = write_pickle(str(tmp_path / "notrace.pickle"), untraced(run()))
    for path in (hand, real_file("cs336kk_notrace_75gb.pickle")):
        out = fragviz("gate", path, "--max-peak-reserved", "80GiB")
        assert out.returncode == 2, out.stdout + out.stderr
        assert out.stdout.startswith(f"memory gate cannot judge: {path}: nothing to judge: no device has a trace (")


def test_runs_on_other_devices_do_not_compare(tmp_path, runs):
    two = write_pickle(str(tmp_path / "two.pickle"), devices(run(), run(device=1)))
    d = gate_json(two, "--baseline", runs[0], "--max-peak-reserved", "1GiB", status=2)
    assert d["reason"] == (f"{two} and {runs[0]} do not compare: the candidate has traced devices [0, 1], the "
                           "baseline [0]")


@pytest.mark.parametrize("option", ["--max-peak-reserved", "--max-peak-allocated", "--max-growth",
                                    "--max-fragmentation", "--device-memory"])
def test_a_bad_budget_is_one_line_naming_its_option(runs, option):
    out = fragviz("gate", runs[0], option, "5 apples")
    assert (out.returncode, out.stdout) == (2, "")
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"fragviz: {option}: '5 apples' is not a ")


def test_a_missing_file_cannot_be_judged(tmp_path, runs):
    missing = str(tmp_path / "nowhere.pickle")
    for args in ((missing,), (runs[0], "--baseline", missing)):
        out = fragviz("gate", *args, "--max-peak-reserved", "1GiB")
        assert out.returncode == 2
        assert one_line(out) == f"memory gate cannot judge: {missing}: no such file, and not a snapshot id"


def test_a_store_id_not_in_the_store_cannot_be_judged(tmp_path, runs):
    db = str(tmp_path / "store.sqlite")
    assert fragviz("ingest", runs[0], "--db", db, "--no-progress").returncode == 0
    out = fragviz("gate", "99", "--db", db, "--max-peak-reserved", "1GiB")
    assert out.returncode == 2 and "99" in one_line(out), out.stdout + out.stderr


@pytest.mark.parametrize("content, words", [
    ('{"kind": "fragviz-memory-summary", "version": 1, "devices": [{"device": 0', "not a memory summary: invalid JSON"),
    ('{"kind": "fragviz-memory-summary", "version": 1, "pad": "' + "x" * (5 * MiB) + '"}',
     "is too large for a memory summary"),
    ('{"kind": "fragviz-memory-summary", "version": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
     "not a memory summary: invalid JSON"),
    ('{"kind": "fragviz-memory-summary", "version": 1, "devices": "none"}', '"devices" is missing or not a list'),
    ('{"results": [1, 2, 3]}', "is not a PyTorch memory snapshot"),  # no kind: it is read as a snapshot
], ids=["truncated", "oversized", "nested-too-deep", "devices-not-a-list", "no-kind"])
@pytest.mark.parametrize("as_baseline", [False, True], ids=["candidate", "baseline"])
def test_a_bad_json_is_one_line_naming_the_file(tmp_path, runs, content, words, as_baseline):
    path = tmp_path / "bad.json"
    path.write_text(content)
    args = (runs[0], "--baseline", str(path)) if as_baseline else (str(path),)
    out = fragviz("gate", *args, "--max-peak-reserved", "1GiB")
    assert out.returncode == 2, out.stdout + out.stderr
    line = one_line(out)
    assert line.startswith(f"memory gate cannot judge: {path}: ") and words in line


def test_a_corrupt_baseline_snapshot_cannot_be_judged(tmp_path, runs):
    # the baseline is replayed in a second process: its SnapshotFormatError did not survive the way back and the
    # gate ended in an internal error, exit 1 (which says a budget broke)
    junk = tmp_path / "junk.pickle"
    junk.write_bytes(b"garbage, not a snapshot")
    cut = tmp_path / "cut.pickle.gz"
    with open(TRAIN, "rb") as fh:
        cut.write_bytes(fh.read(2000))
    for bad in (junk, cut):
        out = fragviz("gate", runs[1], "--baseline", str(bad), "--max-growth", "5%")
        assert out.returncode == 2, out.stdout + out.stderr
        assert one_line(out).startswith(f"memory gate cannot judge: {bad}: ") and out.stderr == ""


# -- the device-size check -----------------------------------------------------------------------------------------

def test_the_device_size_check(tmp_path, runs):
    # the allocator's rules worked by hand in tests/unit/test_gate.py: run() needs 32 MiB, 40 MiB with expandable
    # segments, and on a smaller device its first OOM is the activations' (event 3)
    small = gate_json(runs[0], "--device-memory", "16MiB", status=1)
    (fit,) = small["checks"]
    assert (fit["name"], fit["limit"], fit["passed"]) == ("fits_device", 16 * MiB, False)
    assert "out of memory at event 3" in fit["detail"]
    (fit,) = gate_json(runs[0], "--device-memory", "1GiB", status=0)["checks"]
    assert (fit["name"], fit["limit"], fit["value"], fit["passed"]) == ("fits_device", 1024 * MiB, 32 * MiB, True)
    (fit,) = gate_json(runs[0], "--device-memory", "1GiB", "--alloc-conf", "expandable_segments:True",
                       status=0)["checks"]
    assert (fit["value"], fit["passed"]) == (40 * MiB, True)
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in fit["detail"]


def test_the_device_size_of_a_summary_cannot_be_judged(tmp_path, runs):
    summary = str(tmp_path / "base.json")
    assert fragviz("gate", runs[0], "--write-summary", summary).returncode == 0
    d = gate_json(summary, "--device-memory", "1GiB", status=2)
    assert d["reason"].startswith(f"{summary} is a memory summary: it holds no trace to simulate")


# -- the summary it writes -----------------------------------------------------------------------------------------

def test_gating_the_written_summary_gives_the_checks_of_its_snapshot(tmp_path):
    summary = str(tmp_path / "train.json")
    budgets = ("--max-peak-reserved", "700MiB", "--max-peak-allocated", "1GiB", "--max-fragmentation", "0.1")
    from_snapshot = gate_json(TRAIN, *budgets, "--write-summary", summary, status=1)
    assert os.path.getsize(summary) < 64 * 1024
    from_summary = gate_json(summary, *budgets, status=1)
    assert from_summary["checks"] == from_snapshot["checks"]
    assert from_summary["sites"] == from_snapshot["sites"]
    assert [c["passed"] for c in from_summary["checks"]] == [False, True, False]


def test_a_written_summary_serves_as_the_baseline(tmp_path, runs):
    base, leak = runs
    summary = str(tmp_path / "base.json")
    assert fragviz("gate", base, "--write-summary", summary).returncode == 0
    budgets = ("--max-growth", "10%", "--max-fragmentation", "0.3")
    against_snapshot = gate_json(leak, "--baseline", base, *budgets, status=1)
    against_summary = gate_json(leak, "--baseline", summary, *budgets, status=1)
    assert against_summary["checks"] == against_snapshot["checks"]
    assert against_summary["sites"] == against_snapshot["sites"] == [
        {"site": label("train.py", 40, "stash"), "frame": label("train.py", 40, "stash"), "line": 40,
         "before_line": None, "before_bytes": 0, "after_bytes": 6 * MiB, "device": 0}]


def test_sites_match_across_a_line_shift_and_another_directory(tmp_path, runs):
    # the same files checked out elsewhere, with a line added at the top of each, `forward` leaking at a line of its
    # own and its activations grown by 2 MiB: the leak is a new site at its line, the activations the baseline's
    # line 20, now 21
    moved = "/ci/runner/work/proj"
    path = write_pickle(str(tmp_path / "moved.pickle"),
                        run(root=moved, shift=1, act=10 * MiB, leak=6 * MiB, leak_name="forward").snapshot())
    d = gate_json(path, "--baseline", runs[0], "--max-peak-reserved", "1GiB", status=0)
    assert [(s["site"], s["before_line"], s["before_bytes"], s["after_bytes"]) for s in d["sites"]] == [
        (label("train.py", 41, "forward", moved), None, 0, 6 * MiB),
        (label("train.py", 21, "forward", moved), 20, 8 * MiB, 10 * MiB)]


# -- the files for CI --------------------------------------------------------------------------------------------

def test_junit_markdown_and_the_step_summary(tmp_path, runs):
    base, leak = runs
    junit, markdown, step = tmp_path / "gate.xml", tmp_path / "gate.md", tmp_path / "step.md"
    step.write_text("## earlier step\n")
    args = ("gate", leak, "--baseline", base, "--max-peak-reserved", "40MiB", "--max-peak-allocated", "29MiB",
            "--max-growth", "25%", "--junit", str(junit), "--markdown", str(markdown))
    for _ in range(2):
        out = fragviz(*args, env={"GITHUB_STEP_SUMMARY": str(step)})
        assert out.returncode == 1, out.stdout + out.stderr
    suite = ET.parse(junit).getroot()
    cases = suite.findall("testcase")
    assert [(c.get("name"), c.find("failure") is not None) for c in cases] == [
        ("Peak reserved", False), ("Peak allocated", True), ("Peak reserved growth", False),
        ("Peak allocated growth", False)]  # 38 <= 40; 30 > 29; 38 <= 40 (32 + 25 %); 30 <= 30 (24 + 25 %)
    assert (suite.get("tests"), suite.get("failures")) == ("4", "1")
    md = markdown.read_text()
    assert md.splitlines()[0] == "### ❌ memory gate FAILED: 1 of 4 budget(s) broken"
    assert "| ❌ | Peak allocated | 30.00 MiB | 29.00 MiB | 24.00 MiB | +6.00 MiB (+25.0%) |" in md.splitlines()
    assert step.read_text() == "## earlier step\n" + (md + "\n") * 2  # appended by each run, never replaced


def test_junit_of_a_gate_that_cannot_judge_is_one_error(tmp_path, runs):
    junit = tmp_path / "gate.xml"
    assert fragviz("gate", runs[0], "--max-growth", "5%", "--junit", str(junit)).returncode == 2
    (case,) = ET.parse(junit).getroot().findall("testcase")
    assert case.find("error").get("message").startswith("--max-growth needs a baseline")


# -- a store id ---------------------------------------------------------------------------------------------------

def test_a_store_id_gates_as_its_file(tmp_path):
    db = str(tmp_path / "store.sqlite")
    out = fragviz("ingest", TRAIN, "--db", db, "--json", "--no-progress")
    assert out.returncode == 0, out.stderr
    (ingested,) = json.loads(out.stdout)
    budgets = ("--max-peak-reserved", "1GiB", "--max-peak-allocated", "600MiB", "--max-fragmentation", "0.2")
    from_store = gate_json(str(ingested["id"]), "--db", db, *budgets, status=1)
    from_file = gate_json(TRAIN, *budgets, status=1)
    assert from_store["checks"] == from_file["checks"] and from_store["sites"] == from_file["sites"]
    assert from_store["candidate"] == str(ingested["id"])


# -- the figures against `fragviz report` and the trace itself ------------------------------------------------------

def walked_peak_reserved(path: str) -> dict[int, int]:
    """Each traced device's most reserved bytes, walked through its trace here: the final segments' bytes less what
    the trace added are the start; the peak is the most of start plus the running sum."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as fh:
        data = pickle.load(fh)
    sign = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
    out = {}
    for device, trace in enumerate(data.get("device_traces") or []):
        if not trace:
            continue
        final = sum(s["total_size"] for s in data["segments"] if s.get("device", 0) == device)
        steps = [sign.get(e["action"], 0) * e["size"] for e in trace]
        now = start = final - sum(steps)
        peak = start
        for step in steps:
            now += step
            peak = max(peak, now)
        out[device] = peak
    return out


CROSS = [os.path.join(SAMPLES, n) for n in ("gpt_train.pickle.gz", "gpt_train_expandable.pickle.gz",
                                            "gpt_train_fragmentation_oom.pickle.gz")]
REAL_CROSS = ["diffusion_tiny.pickle", "sketchkv.pickle", "nuggets_nightly_mini.pickle", "cs336silmont_small.pickle",
              "layoutedit_dump_2dev.pickle"]


@pytest.mark.parametrize("name", CROSS + REAL_CROSS, ids=os.path.basename)
def test_the_figures_are_the_reports_and_the_traces(tmp_path, name):
    path = name if os.path.isabs(name) else real_file(name)
    summary = str(tmp_path / "summary.json")
    result = gate_json(path, "--max-fragmentation", "1", "--write-summary", summary, status=0)
    with open(summary, encoding="utf-8") as fh:
        figures = {d["device"]: d for d in json.load(fh)["devices"]}
    out = fragviz("report", path, "--json")
    assert out.returncode == 0, out.stderr
    report = {d["device"]: d for d in json.loads(out.stdout)["devices"]}
    walked = walked_peak_reserved(path)
    assert sorted(figures) == sorted(walked) and figures
    for device, fig in figures.items():
        r = report[device]
        assert fig["peak_reserved_bytes"] == r["peak_reserved_bytes"] == walked[device], device
        # the report's at_peak is the first state of most reserved bytes; the gate's the fullest state of that
        # plateau: the same reserved bytes, no fewer allocated, at it or after it
        assert fig["peak_state"] >= r["at_peak"]["state"]
        assert fig["peak_allocated_bytes"] >= r["at_peak"]["allocated_bytes"]  # the most allocated, at any state
        at = fragviz("report", path, "--json", "--device", str(device), "--at", str(fig["peak_state"]))
        state = json.loads(at.stdout)["devices"][0]  # the state's own figures, from its segments
        assert fig["fragmentation"] == pytest.approx(state["fragmentation"])
        assert state["reserved_bytes"] == fig["peak_reserved_bytes"]
        (check,) = [c for c in result["checks"] if c["device"] == device]
        assert check["value"] == fig["fragmentation"]
