"""The pytest plugin's files and exit statuses, as a CI meets them: pytest in a subprocess on a small project of
tiny torch tests (`memory_device = simulated`), each test's baseline or snapshot path made ready as a kind of
target. Written: a regular file (replaced whole), a symlink (its target replaced), a FIFO (to its reader), a link to
/dev/null (in place), a directory (the test cannot be judged). Read: a link to /dev/zero, a FIFO without a writer
(refused at once, never waited on), a directory, a file past the limit, a missing baseline: each test fails in one
line, "cannot judge", and the run exits 2. A fragviz bug in the plugin is exit 3, a folder that is a file exit 4."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET

import pytest

INI = "[pytest]\nmemory_device = simulated\nmemory_baseline = baselines\n"
TESTS = '''
import pytest
import torch

MiB = 2**20


def work():
    return torch.empty(3 * MiB, dtype=torch.uint8)

'''
NAMES = ("regular", "link", "fifo", "null", "dir", "zero", "big", "missing")
TESTS += "".join(f'\n@pytest.mark.memory_budget(growth="5%")\ndef test_{n}():\n    work()\n\n' for n in NAMES)


def baseline(project, name: str):
    return project / "baselines" / f"tests.test_kinds.py--test_{name}.json"


def snapshot(project, name: str):
    return project / "snaps" / f"tests.test_kinds.py--test_{name}.pickle"


class Reader:
    """A reader at the other end of a FIFO, made at `path`."""

    def __init__(self, path) -> None:
        os.mkfifo(path)
        self.path, self.got = path, []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with open(self.path, "rb") as fh:
            self.got.append(fh.read())

    def read(self) -> bytes:
        self.thread.join(30)
        assert len(self.got) == 1 and stat.S_ISFIFO(os.stat(self.path).st_mode)
        return self.got[0]


def run_pytest(project, *args: str) -> tuple[subprocess.CompletedProcess, dict[str, tuple[str, str, dict]]]:
    """The run, and each test's outcome, failure text and user properties from the JUnit XML."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_"))}
    junit = project.parent / "junit.xml"
    if junit.exists():
        junit.unlink()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:dash",
                           f"--junitxml={junit}", *args], cwd=project, env=env, capture_output=True, text=True,
                          timeout=300)
    tests = {}
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            bad = case.find("failure")
            props = {p.get("name"): p.get("value") for p in case.iter("property")}
            tests[case.get("name")] = ("passed" if bad is None else "failed", "" if bad is None else bad.text or "",
                                       props)
    return proc, tests


def write_project(root, tests: str = TESTS, ini: str = INI, conftest: str | None = None) -> None:
    (root / "tests").mkdir(parents=True)
    (root / "pytest.ini").write_text(ini)
    (root / "tests" / "test_kinds.py").write_text(tests)
    if conftest is not None:
        (root / "tests" / "conftest.py").write_text(conftest)


def cannot_judge(tests, name: str, words: str) -> None:
    outcome, text, props = tests[f"test_{name}"]
    assert outcome == "failed", (name, text)
    first = f"tests/test_kinds.py::test_{name}: memory budget cannot be judged: "
    assert text.strip().startswith(first) and words in text and len(text.strip().splitlines()) == 1, (name, text)
    assert props == {"fragviz_memory": "cannot judge"}, props


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("kinds") / "project"
    write_project(root)
    return root


@pytest.fixture(scope="module")
def update(project):
    """--memory-update-baseline with each test's baseline and snapshot path made ready as a kind of target."""
    (project / "baselines").mkdir()
    (project / "snaps").mkdir()
    baseline(project, "regular").write_text("an old baseline")
    os.chmod(baseline(project, "regular"), 0o640)
    elsewhere = project.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "link.json").write_text("old")
    baseline(project, "link").symlink_to(elsewhere / "link.json")
    snapshot(project, "link").symlink_to(elsewhere / "link.pickle")
    readers = {"baseline": Reader(baseline(project, "fifo")), "snapshot": Reader(snapshot(project, "fifo"))}
    baseline(project, "null").symlink_to("/dev/null")
    baseline(project, "dir").mkdir()
    proc, tests = run_pytest(project, "--memory-update-baseline", "--memory-snapshots=snaps")
    return proc, tests, readers, elsewhere


def test_the_update_writes_each_kind_of_baseline_and_snapshot_target(project, update):
    proc, tests, readers, elsewhere = update
    assert proc.returncode == 2, proc.stdout + proc.stderr  # the directory's test cannot be judged
    for name in ("regular", "link", "fifo", "null", "zero", "big", "missing"):
        assert tests[f"test_{name}"][0] == "passed", (name, proc.stdout)
    regular = json.loads(baseline(project, "regular").read_text())
    assert regular["kind"] == "fragviz-memory-summary" and regular["source"] == "tests/test_kinds.py::test_regular"
    assert stat.S_IMODE(os.stat(baseline(project, "regular")).st_mode) == 0o640  # replaced, its mode kept
    assert baseline(project, "link").is_symlink() and json.loads((elsewhere / "link.json").read_text())["devices"]
    assert snapshot(project, "link").is_symlink() and (elsewhere / "link.pickle").stat().st_size > 0
    assert json.loads(readers["baseline"].read())["source"] == "tests/test_kinds.py::test_fifo"
    assert readers["snapshot"].read()[:1] == b"\x80"  # a pickle, to the FIFO's reader
    assert baseline(project, "null").is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    cannot_judge(tests, "dir", f"{baseline(project, 'dir')}: is a directory: give a file name")
    assert not [n for n in os.listdir(project / "baselines") if n.endswith(".tmp")]


def test_a_baseline_that_is_not_a_small_regular_file_fails_its_test_in_one_line(project, update):
    # the update's FIFO stays a FIFO: with no writer it must be refused at once, not waited on
    baseline(project, "zero").unlink()
    baseline(project, "zero").symlink_to("/dev/zero")
    baseline(project, "big").write_text(" " * (4 * 1024 * 1024 + 1))
    baseline(project, "missing").unlink()
    proc, tests = run_pytest(project)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    for name in ("regular", "link"):
        assert tests[f"test_{name}"][0] == "passed", (name, tests[f"test_{name}"][1])
    cannot_judge(tests, "zero", "is a character device, not a memory summary")
    cannot_judge(tests, "fifo", "is a FIFO, not a memory summary")
    cannot_judge(tests, "dir", "is a directory, not a memory summary")
    cannot_judge(tests, "big", "4,194,305 bytes is too large for a memory summary")
    cannot_judge(tests, "missing", "for its growth budget: write it with pytest --memory-update-baseline")
    assert tests["test_null"][0] == "failed"  # a link to /dev/null reads as a device: refused too
    assert "MemoryBudgetWarning" not in proc.stdout


def test_a_bug_in_the_plugin_is_exit_3_in_one_line_never_a_budget_failure(tmp_path):
    conftest = ("import fragviz.gate.record\n\n\ndef broken(*args, **kwargs):\n    raise ZeroDivisionError('a bug in "
                "the plugin')\n\n\nfragviz.gate.record.summary_of = broken\n")
    tests = TESTS.split("\n@pytest.mark")[0] + ('\n@pytest.mark.memory_budget(peak="1GiB")\ndef test_budgeted():\n'
                                                 '    work()\n\n\ndef test_plain_failure():\n    assert 1 == 2\n')
    write_project(tmp_path / "project", tests, "[pytest]\nmemory_device = simulated\n", conftest)
    proc, outcomes = run_pytest(tmp_path / "project")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    outcome, text, props = outcomes["test_budgeted"]
    assert outcome == "failed" and props == {"fragviz_memory": "internal error"}, text
    assert text.strip() == ("tests/test_kinds.py::test_budgeted: fragviz: internal error (ZeroDivisionError: a bug in "
                            "the plugin); this is a fragviz bug, please report it (-vv shows the traceback)"), text
    assert outcomes["test_plain_failure"][0] == "failed"  # an ordinary failure beside it: still 3, not 1


@pytest.mark.parametrize("where", ["option", "ini"])
def test_a_folder_that_is_a_file_is_a_usage_error_before_any_test(tmp_path, where):
    ini = "[pytest]\nmemory_device = simulated\n" + ("memory_baseline = taken\n" if where == "ini" else "")
    write_project(tmp_path / "project", ini=ini)
    (tmp_path / "project" / "taken").write_text("a file")
    proc, tests = run_pytest(tmp_path / "project", *(["--memory-snapshots=taken"] if where == "option" else []))
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR and not tests, proc.stdout + proc.stderr
    label = "--memory-snapshots" if where == "option" else f"memory_baseline in {tmp_path / 'project' / 'pytest.ini'}"
    assert f"ERROR: {label}: {tmp_path / 'project' / 'taken'} is not a directory" in proc.stderr, proc.stderr
