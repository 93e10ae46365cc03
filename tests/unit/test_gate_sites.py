"""The gate's sites in this process: a site's scope with comprehension, lambda and generator-expression frames
counted as their function's (Python 3.11's frames and 3.12's inlined comprehensions alike), the code of a line as
read and compared (never opening what is not a regular Python file), a candidate's sites matched to the baseline's
(by code, then nearest line, one to one), which frame is the user's, and a summary of version 1 (sites by function)
still read and judged function by function, saying that it should be written again."""
from __future__ import annotations

import json
import os
import threading

import pytest

from fragviz.gate import sites as gate_sites
from fragviz.gate.budgets import budgets_from_text
from fragviz.gate.figures import SummaryError, summary_from_dict
from fragviz.gate.inputs import read_side
from fragviz.gate.judge import judge
from fragviz.gate.report import gate_markdown, gate_text
from fragviz.gate.sites import SiteBytes, by_function, line_code, match_sites, normalise_code, site_key
from fragviz.model import Frame
from fragviz.snapshot.frames import is_user_frame
from tests.support.gate_runs import label, run
from tests.support.helpers import MiB, write_pickle

F = "/home/a/proj/loops.py"
TORCH = "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py"


# -- a site's scope -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("frames", [
    [Frame(F, 31, "build"), Frame("/home/a/proj/main.py", 5, "<module>")],  # 3.12: the comprehension inlined
    [Frame(F, 31, "<listcomp>"), Frame(F, 31, "build"), Frame("/home/a/proj/main.py", 5, "<module>")],  # 3.11
    [Frame(F, 32, "<lambda>"), Frame(F, 33, "build")],
    [Frame(F, 32, "<genexpr>"), Frame(F, 32, "build")],
    [Frame(F, 32, "<lambda>"), Frame(F, 32, "<dictcomp>"), Frame(F, 32, "build")],
    [Frame(TORCH, 116, "forward"), Frame(F, 32, "<setcomp>"), Frame(TORCH, 1, "_call_impl"), Frame(F, 40, "build")],
], ids=["inlined", "listcomp", "lambda", "genexpr", "lambda-in-dictcomp", "setcomp-through-torch"])
def test_a_comprehension_or_lambda_is_a_site_of_the_function_that_runs_it(frames):
    assert site_key(frames) == "proj/loops.py build"


def test_a_lambda_with_no_function_of_its_file_around_it_keeps_its_name():
    assert site_key([Frame(F, 3, "<lambda>"), Frame(TORCH, 9, "apply")]) == "proj/loops.py <lambda>"


# -- the code of a line ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, code", [
    ("        h = torch.relu(self.fc1(x))\n", "h = torch.relu(self.fc1(x))"),
    ("    h = torch.relu( self.fc1(x) )   # kept for debugging\n", "h = torch.relu( self.fc1(x) )"),
    ("\tx  =\ttorch.empty(3)\n", "x = torch.empty(3)"),
    ("    s = '# not a comment'  # a comment\n", "s = '# not a comment'"),
    ("    out = torch.cat([a,  # the first\n", "out = torch.cat([a,"),  # a line of a longer statement
    ('    """text\n', '"""text'),
    ("   \n", ""),
])
def test_a_lines_code_is_compared_without_its_comment_and_extra_blanks(text, code):
    assert normalise_code(text) == code


def test_a_lines_code_is_read_from_a_regular_python_file_only(tmp_path, monkeypatch):
    src = tmp_path / "model.py"
    src.write_text("import torch\n\n    x = torch.empty(3)  # x\n")
    assert line_code(str(src), 3) == "x = torch.empty(3)"
    assert [line_code(str(src), n) for n in (2, 4, 0, -1)] == [None] * 4  # blank, past the end, no line
    src.write_text("import torch\n\ny = torch.zeros(4)\n")  # edited since: read again
    assert line_code(str(src), 3) == "y = torch.zeros(4)"
    other = tmp_path / "notes.txt"
    other.write_text("x = 1\n")
    assert line_code(str(other), 1) is None
    assert line_code(str(tmp_path / "missing.py"), 1) is None and line_code("a\0b.py", 1) is None
    (tmp_path / "folder.py").mkdir()
    assert line_code(str(tmp_path / "folder.py"), 1) is None
    monkeypatch.setattr(gate_sites, "MAX_SOURCE_BYTES", 8)
    assert line_code(str(src), 3) is None  # too large to be read


def test_a_fifo_or_a_device_named_by_a_frame_is_never_opened(tmp_path):
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(line_code(str(fifo), 1)), daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive() and got == [None]  # opening the FIFO would have waited for a writer
    link = tmp_path / "zero.py"
    link.symlink_to("/dev/zero")
    assert line_code(str(link), 1) is None


# -- matching ---------------------------------------------------------------------------------------------------------

def site(line: int, code: str | None, size: int = MiB, key: str = "proj/loops.py build") -> SiteBytes:
    return SiteBytes(key, f"{F}:{line} build", f"{F}:{line} build", size, line, code)


def pairs(now, before) -> list[tuple[int, int | None]]:
    return [(a.line, None if b is None else b.line) for a, b in match_sites(now, before)]


def test_the_same_code_is_matched_before_a_nearer_line():
    before = [site(10, "a = torch.empty(1)"), site(11, "b = torch.empty(2)")]
    now = [site(20, "b = torch.empty(2)"), site(21, "a = torch.empty(1)")]  # swapped and moved down
    assert pairs(now, before) == [(20, 11), (21, 10)]


def test_of_several_lines_with_the_same_code_the_nearest_is_matched():
    before = [site(10, "x = f()"), site(30, "x = f()")]
    assert pairs([site(31, "x = f()"), site(12, "x = f()")], before) == [(31, 30), (12, 10)]


def test_a_changed_line_is_matched_to_the_nearest_unmatched_line_of_its_function():
    before = [site(10, "w = torch.randn(8)"), site(11, "xs = torch.randn(3, 8)"), site(40, "y = g()")]
    now = [site(10, "w = torch.randn(8)"), site(12, "xs = [torch.randn(8) for _ in range(3)]"), site(44, "z = h()")]
    assert pairs(now, before) == [(10, 10), (12, 11), (44, 40)]


def test_each_baseline_site_matches_once_and_another_scope_never():
    before = [site(10, "x = f()")]
    now = [site(10, "x = f()"), site(11, "x = f()"), site(10, "x = f()", key="proj/loops.py other")]
    assert pairs(now, before) == [(10, 10), (11, None), (10, None)]


def test_sites_whose_code_is_unknown_are_matched_by_the_nearest_line():
    before = [site(10, None), site(20, None)]
    assert pairs([site(21, None), site(11, None), site(50, None)], before) == [(21, 20), (11, 10), (50, None)]


# -- which frame is the user's ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("frame, user", [
    (Frame("/home/a/proj/module.py", 9, "on_train_batch_start"), True),  # was taken for the C runtime's _start
    (Frame("/home/a/proj/module.py", 9, "restart_PyEval_"), True),
    (Frame("/usr/lib/python3.11/copy.py", 172, "deepcopy"), False),
    (Frame("/opt/conda/lib/python3.10/copy.py", 146, "deepcopy"), False),
    (Frame("/opt/conda/lib/python3.10/site-packages/transformers/models/llama/modeling_llama.py", 9, "forward"), True),
    (Frame("/usr/lib/python3/dist-packages/accelerate/utils.py", 9, "send_to_device"), True),
    (Frame(TORCH, 116, "forward"), False),
    (Frame("<frozen runpy>", 88, "_run_code"), False),
    (Frame("??", 0, "_start"), False),
])
def test_which_frame_is_the_users(frame, user):
    assert is_user_frame(frame) is user


# -- summaries of version 1: sites by function -------------------------------------------------------------------------

def version_1(summary_json: str) -> dict:
    """A summary as fragviz wrote it before sites were lines: version 1, sites by function without line or code."""
    data = json.loads(summary_json)
    data["version"] = 1
    for dev in data["devices"]:
        dev["sites"] = [{k: v for k, v in s.items() if k not in ("line", "code")} for s in by_dicts(dev["sites"])]
    return data


def by_dicts(sites: list[dict]) -> list[dict]:
    merged = by_function([SiteBytes(s["key"], s["site"], s["frame"], s["bytes"], s["line"], s["code"]) for s in sites])
    return [s.as_dict() for s in merged]


def test_a_version_1_summary_is_judged_function_by_function_saying_to_write_it_again(tmp_path):
    base = read_side(write_pickle(str(tmp_path / "b.pickle"), run().snapshot()), None).summary
    old = summary_from_dict(version_1(base.to_json()), "old.json")
    assert old.sites_by_function and all(s.line is None and s.code is None for s in old.devices[0].sites)
    assert json.loads(old.to_json())["version"] == 1  # written back as what it is
    leak = read_side(write_pickle(str(tmp_path / "c.pickle"), run(leak=6 * MiB, leak_name="forward").snapshot()),
                     None).summary
    result = judge(leak, old, budgets_from_text(growth="1%"))
    # the leak (another line of forward) grows forward's bytes, named by its line of most bytes, as version 1 did
    assert [(s.site, s.before_bytes, s.after_bytes) for s in result.sites] == [
        (label("train.py", 20, "forward"), 8 * MiB, 14 * MiB)]
    (note,) = [n for n in result.notes if "version 1" in n]
    assert note.startswith("old.json is a memory summary of version 1, whose sites are functions, not lines")
    assert "pytest --memory-update-baseline" in note and note in gate_text(result)
    # written again, the leak is its own line
    again = judge(leak, base, budgets_from_text(growth="1%"))
    assert [(s.site, s.before_bytes) for s in again.sites] == [(label("train.py", 40, "forward"), 0)]
    assert not [n for n in again.notes if "version 1" in n]


def test_a_site_field_of_the_wrong_type_is_refused_naming_it():
    d = {"kind": "fragviz-memory-summary", "version": 2, "devices": [
        {"device": 0, "trace_events": 4, "peak_reserved_bytes": 40, "peak_allocated_bytes": 30, "fragmentation": 0.25,
         "peak_state": 2, "sites": [{"key": "p/a.py f", "site": "p/a.py:1 f", "frame": None, "bytes": 30,
                                     "line": "one", "code": None}]}]}
    with pytest.raises(SummaryError, match=r'^given.json: devices\[0\].sites\[0\]: "line" is missing or not a whole'):
        summary_from_dict(d, "given.json")
    d["devices"][0]["sites"][0].update(line=1, code=7)
    with pytest.raises(SummaryError, match=r'"code" is missing or not a string'):
        summary_from_dict(d, "given.json")
    d["devices"][0]["sites"][0].update(code="x = f()")
    (s,) = summary_from_dict(d, "given.json").devices[0].sites
    assert (s.line, s.code) == (1, "x = f()")


# -- the report --------------------------------------------------------------------------------------------------------

def test_a_grown_site_that_moved_says_its_line_in_the_baseline(tmp_path):
    base = read_side(write_pickle(str(tmp_path / "b.pickle"), run().snapshot()), None).summary
    grown = read_side(write_pickle(str(tmp_path / "c.pickle"), run(shift=2, act=10 * MiB).snapshot()), None).summary
    result = judge(grown, base, budgets_from_text(growth="50%"))
    (change,) = result.sites
    assert (change.site, change.line, change.before_line, change.moved) == (label("train.py", 22, "forward"), 22, 20,
                                                                           True)
    assert f"(+2.00 MiB)  {label('train.py', 22, 'forward')} (line 20 in the baseline)" in gate_text(result)
    assert f"| `{label('train.py', 22, 'forward')}` (line 20 in the baseline) | 8.00 MiB | 10.00 MiB |" in \
        gate_markdown(result)
    assert result.as_dict()["sites"][0]["before_line"] == 20
