"""What a CI can trust: `fragviz gate`'s exit status (0 pass, 1 a budget broken, 2 cannot judge, 3 a fragviz bug,
never 1 for a bug) and every output target kind, for `gate`, `export`, `simulate` and `capture`, as real commands
in subprocesses on real files: a regular file (replaced whole), a new one, `-`, a FIFO with a reader, /dev/stdout
(a pipe, and a file the shell opened for appending), a symlink (its target replaced), a character device
(/dev/null), a directory and a missing folder (one line, exit 2)."""
from __future__ import annotations

import argparse
import os
import stat
import subprocess
import sys
import textwrap
import threading
import xml.etree.ElementTree as ET

import pytest

from fragviz import cli
from fragviz.cli import parser as cli_parser
from fragviz.snapshot.loader import decode_bytes
from tests.support.gate_runs import run
from tests.support.helpers import MiB, write_pickle

FRAGVIZ = [sys.executable, "-m", "fragviz"]
KINDS = ["file", "new", "-", "fifo", "/dev/stdout", "/dev/stdout appended", "symlink", "/dev/null", "directory",
         "missing folder"]


def fragviz(*args: str, cwd=None, stdout=subprocess.PIPE, timeout: int = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_STEP_SUMMARY", "FRAGVIZ_DB")}
    return subprocess.run([*FRAGVIZ, *args], stdout=stdout, stderr=subprocess.PIPE, cwd=cwd, env=env,
                          timeout=timeout)


class Target:
    """An output path of one kind, made ready, and what the command wrote there read back."""

    def __init__(self, tmp_path, kind: str, name: str) -> None:
        self.kind, self.tmp = kind, tmp_path
        self.real = tmp_path / name  # where a file kind's bytes land
        self.reader: threading.Thread | None = None
        self.got: list[bytes] = []
        self.appended = None
        self.path = self._make(name)

    def _make(self, name: str) -> str:
        kind = self.kind
        if kind == "file":
            self.real.write_bytes(b"an old file, longer than nothing" * 10)
            os.chmod(self.real, 0o640)
            return str(self.real)
        if kind == "fifo":
            os.mkfifo(self.real)
            self.reader = threading.Thread(target=self._read, daemon=True)
            self.reader.start()
            return str(self.real)
        if kind == "symlink":
            self.real = self.tmp / "elsewhere" / name
            self.real.parent.mkdir()
            self.real.write_bytes(b"old target")
            (self.tmp / name).symlink_to(self.real)
            return str(self.tmp / name)
        if kind == "/dev/stdout appended":
            self.appended = open(self.tmp / "shell.out", "ab")
            self.appended.write(b"written before\n")
            self.appended.flush()
            return "/dev/stdout"
        return {"new": str(self.real), "-": "-", "/dev/stdout": "/dev/stdout", "/dev/null": "/dev/null",
                "directory": str(self.tmp), "missing folder": str(self.tmp / "no" / name)}[kind]

    def _read(self) -> None:
        with open(self.real, "rb") as fh:
            self.got.append(fh.read())

    @property
    def stdout(self):
        return self.appended if self.appended is not None else subprocess.PIPE

    @property
    def refused(self) -> bool:
        return self.kind in ("directory", "missing folder")

    def written(self, proc: subprocess.CompletedProcess) -> bytes | None:
        """The bytes the command wrote to the target (None for /dev/null), checking the target kept its kind."""
        if self.kind in ("-", "/dev/stdout"):
            return proc.stdout
        if self.kind == "/dev/stdout appended":
            self.appended.close()
            text = (self.tmp / "shell.out").read_bytes()
            assert text.startswith(b"written before\n"), text[:100]  # the shell's file kept, appended to
            return text[len(b"written before\n"):]
        if self.kind == "/dev/null":
            assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
            return None
        if self.kind == "fifo":
            self.reader.join(30)
            assert stat.S_ISFIFO(os.stat(self.real).st_mode) and len(self.got) == 1
            return self.got[0]
        if self.kind == "symlink":
            assert os.path.islink(self.tmp / self.real.name)
        if self.kind == "file":
            assert stat.S_IMODE(os.stat(self.real).st_mode) == 0o640  # replaced, its mode kept
        assert not [n for n in os.listdir(self.real.parent) if n.endswith(".tmp")]  # no temporary file left
        return self.real.read_bytes()

    def check_refused(self, proc: subprocess.CompletedProcess, option: str) -> None:
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and "fragviz bug" not in lines[0], lines
        words = "is a directory" if self.kind == "directory" else "does not exist: create it first"
        assert lines[0].startswith(f"fragviz: {option} {self.path}: ") and words in lines[0], lines


# -- fragviz gate: exit statuses ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def summary(tmp_path_factory) -> str:
    """A memory summary of the gate's small run (12 + 8 + 8 + 4 MiB: 32 MiB reserved at the peak)."""
    tmp = tmp_path_factory.mktemp("gate")
    snapshot = write_pickle(str(tmp / "base.pickle"), run().snapshot())
    out = fragviz("gate", snapshot, "--write-summary", str(tmp / "base.json"))
    assert out.returncode == 0, out.stderr
    return str(tmp / "base.json")


@pytest.mark.parametrize("budget, status", [("--max-peak-reserved=1GiB", 0), ("--max-peak-reserved=31MiB", 1),
                                            ("--max-growth=5%", 2)], ids=["pass", "broken", "cannot judge"])
def test_gate_exit_status_is_the_verdict(summary, budget, status):
    out = fragviz("gate", summary, budget)
    assert out.returncode == status, out.stdout + out.stderr
    first = out.stdout.decode().splitlines()[0]
    assert first.startswith({0: "memory gate passed", 1: "memory gate FAILED", 2: "memory gate cannot judge"}[status])


@pytest.mark.parametrize("args, words", [
    (["--max-growth", "5" * 5000 + "%"], "--max-growth: '55555"),
    (["--max-peak-reserved", "9" * 5000], "--max-peak-reserved: '99999"),
    (["--junit", "{tmp}"], "--junit {tmp}: is a directory"),
    (["--write-summary", "{tmp}/missing/s.json"], "--write-summary {tmp}/missing/s.json: the folder"),
    (["--markdown", "{tmp}/missing/r.md"], "--markdown {tmp}/missing/r.md: the folder")],
    ids=["5000-digit growth", "5000-digit size", "junit a folder", "summary in a missing folder",
         "markdown in a missing folder"])
def test_gate_bad_input_is_exit_2_in_one_line_never_a_bug(summary, tmp_path, args, words):
    out = fragviz("gate", summary, "--baseline", summary, *[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert out.returncode == 2, out.stderr
    lines = out.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fragviz: " + words.replace("{tmp}", str(tmp_path))), lines
    assert "fragviz bug" not in lines[0] and out.stdout == b""  # refused before any verdict


def _with_command(name: str, runner) -> callable:
    """fragviz's parser with one more subcommand, `name`, run by `runner`."""
    original = cli_parser.build_parser

    def build() -> argparse.ArgumentParser:
        parser = original()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        command = sub.add_parser(name)
        command.add_argument("--debug", dest="debug_errors", action="store_true")
        command.set_defaults(run=runner)
        return parser

    return build


def test_an_internal_error_is_exit_3_in_one_line_for_any_command(monkeypatch, capsys):
    def explode(args: argparse.Namespace) -> int:
        return 1 // 0

    monkeypatch.setattr(cli_parser, "build_parser", _with_command("explode", explode))
    assert cli.main(["explode"]) == cli.INTERNAL_ERROR == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fragviz: internal error (ZeroDivisionError: integer division or "
                                                   "modulo by zero); this is a fragviz bug"), err
    assert cli.main(["explode", "--debug"]) == 3 and "Traceback" in capsys.readouterr().err


def test_an_internal_error_inside_the_gate_is_exit_3_not_1(monkeypatch, capsys, summary):
    from fragviz.cli.gate import cmd_gate

    def gate_without_reports(args: argparse.Namespace) -> int:
        # the gate's own code on a namespace that lacks its report options: an AttributeError, a bug in a caller
        args.candidate, args.baseline, args.db, args.json = summary, None, None, False
        for name in ("max_peak_reserved", "max_peak_allocated", "max_growth", "max_fragmentation", "device_memory",
                     "alloc_conf"):
            setattr(args, name, "1" if name == "max_peak_reserved" else None)  # a budget that is broken: 1 byte
        return cmd_gate(args)

    monkeypatch.setattr(cli_parser, "build_parser", _with_command("gate-bug", gate_without_reports))
    assert cli.main(["gate-bug"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error (AttributeError" in err and "fragviz bug" in err, err


# -- fragviz gate: every output kind --------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("option", ["--markdown", "--junit", "--write-summary"])
def test_gate_writes_each_report_to_each_kind_of_target(summary, tmp_path, option, kind):
    target = Target(tmp_path, kind, "report.out")
    out = fragviz("gate", summary, "--max-peak-reserved=31MiB", option, target.path, stdout=target.stdout)
    if target.refused:
        target.check_refused(out, option)
        return
    assert out.returncode == 1, out.stderr  # the verdict stands, wherever its reports went
    data = target.written(out)
    if data is None:
        return
    text = data.decode()
    if option == "--markdown":
        assert text.startswith("### ❌ memory gate FAILED: 1 of 1 budget(s) broken"), text[:200]
    elif option == "--junit":
        assert ET.fromstring(text).get("failures") == "1", text[:200]
    else:
        assert '"kind": "fragviz-memory-summary"' in text, text[:200]
    if kind in ("-", "/dev/stdout", "/dev/stdout appended"):  # the report alone on standard output
        assert "memory gate FAILED" in out.stderr.decode()
    else:
        assert out.stdout.decode().startswith("memory gate FAILED")


# -- fragviz export, simulate --out ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[str, str]:
    """A store holding the gate's small run as snapshot 1, and the snapshot file."""
    tmp = tmp_path_factory.mktemp("store")
    snapshot = write_pickle(str(tmp / "base.pickle"), run(leak=6 * MiB).snapshot())
    db = str(tmp / "store.sqlite")
    out = fragviz("ingest", snapshot, "--db", db)
    assert out.returncode == 0, out.stderr
    return db, snapshot


@pytest.mark.parametrize("kind", KINDS)
def test_export_writes_to_each_kind_of_target(store, tmp_path, kind):
    target = Target(tmp_path, kind, "series.csv")
    out = fragviz("export", "1", "--db", store[0], "--format", "csv", "-o", target.path, stdout=target.stdout)
    if target.refused:
        target.check_refused(out, "-o")
        return
    assert out.returncode == 0, out.stderr
    data = target.written(out)
    if data is not None:
        assert data.decode().startswith("device,event,time_us,allocated_bytes"), data[:200]


@pytest.mark.parametrize("kind", ["file", "-", "fifo", "symlink", "/dev/null", "directory", "missing folder"])
def test_simulate_writes_its_snapshot_to_each_kind_of_target(store, tmp_path, kind):
    target = Target(tmp_path, kind, "whatif.pickle")
    out = fragviz("simulate", store[1], "--alloc-conf", "expandable_segments:True", "--out", target.path,
                  stdout=target.stdout)
    if target.refused:
        target.check_refused(out, "--out")
        return
    assert out.returncode == 0, out.stderr
    data = target.written(out)
    if data is not None:
        assert decode_bytes(data, "whatif").data["device_traces"], data[:100]  # a snapshot, alone on the output


# -- fragviz capture ------------------------------------------------------------------------------------------------

WORKLOAD = """
import torch
kept = torch.empty(3 * 1024 * 1024, dtype=torch.uint8)
"""


@pytest.mark.parametrize("kind", ["file", "-", "fifo", "/dev/stdout", "symlink", "/dev/null", "directory",
                                  "missing folder"])
def test_capture_writes_its_snapshot_to_each_kind_of_target(tmp_path, kind):
    script = tmp_path / "work.py"
    script.write_text(textwrap.dedent(WORKLOAD))
    target = Target(tmp_path, kind, "snap.pickle")
    out = fragviz("capture", "--out", target.path, "--device-memory", "1GiB", "--", "python", str(script),
                  stdout=target.stdout, timeout=300)
    if target.refused:
        target.check_refused(out, "--out")  # before the script ran
        return
    assert out.returncode == 0, out.stderr
    data = target.written(out)
    if data is not None:
        snapshot = decode_bytes(data, "capture").data
        sizes = [b["size"] for seg in snapshot["segments"] for b in seg["blocks"] if b["state"] == "active_allocated"]
        assert sizes == [3 * MiB], sizes


def test_a_refused_output_leaves_nothing_behind_and_no_verdict(tmp_path):
    out = fragviz("gate", str(tmp_path / "none.json"), "--markdown", str(tmp_path))
    assert out.returncode == 2 and out.stdout == b"", out.stderr
    assert os.listdir(tmp_path) == []  # no file, no temporary file


@pytest.mark.parametrize("kind", ["directory", "missing folder", "fifo", "/dev/stdout"])
def test_ingest_progress_file_is_appended_where_it_can_be_and_refused_in_one_line_where_not(tmp_path, kind):
    snapshot = write_pickle(str(tmp_path / "run.pickle"), run().snapshot())
    target = Target(tmp_path, kind, "progress.jsonl")
    db = tmp_path / "store.sqlite"
    out = fragviz("ingest", snapshot, "--db", str(db), "--progress-file", target.path)
    if target.refused:
        target.check_refused(out, "--progress-file")
        assert not db.exists()  # refused before the store was made
        return
    assert out.returncode == 0, out.stderr
    lines = target.written(out).decode().splitlines()
    assert '{"phase":"store"}' in lines, lines
