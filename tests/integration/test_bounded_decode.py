"""Gzip, JSON and pipes in bounded time and memory, through the real `fragviz` command where it matters.

Time is checked by structure, not by a clock: the bytes the inflater is fed and the bytes read from the file
are counted and must stay a small multiple of the file (a loader that copies the rest of the file at each
gzip member or each output step is fed the square of it); the few commands run in children keep a deadline
that the old quadratic code missed by minutes. Memory is checked by the child's peak RSS.
"""
from __future__ import annotations

import gzip
import json
import os
import pickle
import resource
import subprocess
import sys
import threading
import tracemalloc
import types
import zlib

import pytest

import fragviz.snapshot.inflate as inflate_module
import fragviz.snapshot.memory as memory
from fragviz.base.errors import SnapshotFormatError
from fragviz.base.limits import Limits
from fragviz.snapshot.inflate import inflate
from fragviz.snapshot.jsonparse import json_estimate
from fragviz.snapshot.loader import decode_bytes, decode_file
from tests.support.helpers import REAL

FRAGVIZ = [sys.executable, "-m", "fragviz"]
MEMORY_LIMIT = 3 * 1024**3
DEADLINE = 60  # seconds: these take a few; the quadratic inflate took 77-130 s on the 8 MB file
SMALL = os.path.join(REAL, "diffusion_tiny.pickle")
EMPTY_MEMBER = gzip.compress(b"", mtime=0)  # 20 bytes


def _limited(limit: int = MEMORY_LIMIT):
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run(*args: str, limit: int = MEMORY_LIMIT, env: dict | None = None, shell: bool = False) -> subprocess.CompletedProcess:
    argv = ["bash", "-c", args[0]] if shell else [*FRAGVIZ, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=DEADLINE, preexec_fn=_limited(limit),
                          env={**os.environ, **(env or {})})


def one_line(out: subprocess.CompletedProcess, name: str, *words: str) -> str:
    """Exit 2 with one line that names the file and says `words`; never "a fragviz bug"."""
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2, out.stderr[-2000:]
    assert len(lines) == 1 and name in lines[0] and "fragviz bug" not in lines[0], out.stderr[-2000:]
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


PEAK = ("import resource, subprocess, sys\n"
        "p = subprocess.run([sys.executable, '-m', 'fragviz', *sys.argv[1:]], capture_output=True, text=True)\n"
        "sys.stderr.write(p.stderr)\n"
        "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def peak_run(*args: str) -> tuple[subprocess.CompletedProcess, int]:
    """Run fragviz in a grandchild: (its result with the exit status, its peak RSS in KiB)."""
    out = subprocess.run([sys.executable, "-c", PEAK, *args], capture_output=True, text=True, timeout=DEADLINE)
    status, peak_kib = map(int, out.stdout.split())
    out.returncode = status
    return out, peak_kib


class _Counting:
    """zlib with every byte fed to a decompressobj counted."""

    def __init__(self) -> None:
        self.fed = 0
        self.MAX_WBITS, self.error = zlib.MAX_WBITS, zlib.error

    def decompressobj(self, wbits: int):
        inner, counter = zlib.decompressobj(wbits), self

        class Inflater:
            def decompress(self, data, max_length=0):
                counter.fed += len(data)
                return inner.decompress(data, max_length)

            def __getattr__(self, name):
                return getattr(inner, name)

        return Inflater()


def fed_bytes(monkeypatch, blob: bytes) -> tuple[int, int, bytes]:
    """(bytes fed to the inflater, bytes read from the file, the output) of inflating `blob`."""
    counting = _Counting()
    monkeypatch.setattr(inflate_module, "zlib", types.SimpleNamespace(
        decompressobj=counting.decompressobj, MAX_WBITS=zlib.MAX_WBITS, error=zlib.error))
    read = [0]

    class File:
        def __init__(self) -> None:
            self.pos = 0

        def read(self, n: int) -> bytes:
            piece = blob[self.pos:self.pos + n]
            self.pos += len(piece)
            read[0] += len(piece)
            return piece

    out = inflate(File(), len(blob), "f.gz", Limits.current())  # type: ignore[arg-type]
    return counting.fed, read[0], out


# -- gzip in linear time ----------------------------------------------------------------------------------

def test_many_members_are_fed_to_the_inflater_a_bounded_number_of_times(monkeypatch):
    pick = open(SMALL, "rb").read()
    blob = EMPTY_MEMBER * 50_000 + gzip.compress(pick) + EMPTY_MEMBER * 50_000  # 2 MB, 100,001 members
    fed, read, out = fed_bytes(monkeypatch, blob)
    assert out == pick
    assert read == len(blob)  # the file read once
    assert fed < 4 * len(blob), fed  # before: each member was handed the rest of the file (~10^11 bytes)


def test_a_large_ordinary_gzip_is_fed_to_the_inflater_about_once(monkeypatch):
    pick = open(os.path.join(REAL, "hanmin_train_19k.pickle"), "rb").read()
    blob = gzip.compress(pick * 3, 6)  # 11 MB out, ~16 output steps
    fed, read, out = fed_bytes(monkeypatch, blob)
    assert out == pick * 3 and read == len(blob)
    assert fed < 2 * len(blob), fed  # before: every 1 MiB of output handed the inflater the rest of the file


def test_a_file_of_empty_members_is_refused_in_one_line_within_the_deadline(tmp_path):
    path = tmp_path / "members.pickle.gz"
    path.write_bytes(EMPTY_MEMBER * 400_000)  # 8 MB: 77-130 s before, about a second now
    one_line(run("report", str(path)), str(path), "is an empty gzip stream")


def test_many_members_before_a_real_snapshot_ingest_like_one(tmp_path):
    pick = open(SMALL, "rb").read()
    path = tmp_path / "members.pickle.gz"
    path.write_bytes(EMPTY_MEMBER * 100_000 + gzip.compress(pick))
    out = run("ingest", str(path), "--db", str(tmp_path / "s.sqlite"))
    assert out.returncode == 0, out.stderr[-2000:]


def test_a_gzip_whose_output_would_not_fit_is_refused_as_it_inflates(tmp_path, monkeypatch):
    pick = open(os.path.join(REAL, "hanmin_train_19k.pickle"), "rb").read()
    blob = gzip.compress(pick * 8, 6)  # 30 MB out
    monkeypatch.setattr(memory, "memory_available", lambda: 48 << 20)
    with pytest.raises(SnapshotFormatError) as info:
        decode_bytes(blob, "big.pickle.gz")
    line = str(info.value)
    assert line.startswith("big.pickle.gz: inflates past ") and "of memory to inflate and decode" in line
    assert line.endswith("48.00 MiB is available")
    past = float(line.split("inflates past ")[1].split(" MiB")[0])
    assert past < 16  # refused after a part of the 30 MiB, not once all of it was held


# -- JSON in bounded memory -------------------------------------------------------------------------------

def test_a_json_of_empty_objects_is_refused_up_front_in_little_memory(tmp_path):
    path = tmp_path / "bomb.json"
    path.write_bytes(b"[" + b"{}," * 6_666_666 + b"{}]")  # 20 MB: 568 MB peak before, and accepted
    out, peak_kib = peak_run("report", str(path))
    one_line(out, str(path), "of memory to parse as JSON", "6,666,668 lists and objects", "is available")
    assert peak_kib < 250 * 1024


def test_a_json_parse_that_outgrows_its_estimate_ends_at_the_cap_in_one_line(tmp_path):
    path = tmp_path / "bomb.json"
    path.write_bytes(b"[" + b"[[]]," * 12_800_000 + b"[]]")  # 64 MB, ~2 GB parsed: past 16x + 512 MiB (1.5 GB)
    code = ("import sys; import fragviz.snapshot.jsonparse as j; j.CONTAINER_COST = j.VALUE_COST = 0\n"
            "from fragviz.cli import main; sys.exit(main(sys.argv[1:]))")
    out = subprocess.run([sys.executable, "-c", code, "report", str(path)], capture_output=True, text=True,
                         timeout=DEADLINE, preexec_fn=_limited())
    one_line(out, str(path), "needs more memory to parse than the", "it may take")


def test_real_snapshots_as_json_fit_the_estimate_and_hostile_shapes_do_not_exceed_it():
    for name in ("diffusion_tiny.pickle", "sketchkv.pickle", "flexgen_opt13b_oom.pickle", "nuggets_nightly_mini.pickle"):
        with open(os.path.join(REAL, name), "rb") as fh:
            text = json.dumps(pickle.load(fh)).encode()  # noqa: S301  the real files the suite trusts
        assert json_estimate(text)[0] < 16 * len(text), name  # well inside the 16x a decode may take
    n = 200_000
    for text in (b"[" + b"{}," * n + b"{}]", b"[" + b"[[]]," * n + b"[]]", b"[" + b"0," * n + b"0]",
                 b"{" + b",".join(b'"%d":{}' % i for i in range(n)) + b"}", b"[" + b'{"":0},' * n + b"0]"):
        tracemalloc.start()
        value = json.loads(text)
        taken = tracemalloc.get_traced_memory()[1] + len(text)
        tracemalloc.stop()
        del value
        assert json_estimate(text)[0] > taken, text[:12]


# -- a refusal built after the cap is lifted --------------------------------------------------------------

def memo_then_lists(path, lists: int = 1_500_000) -> str:
    """LONG_BINPUT of index 150M (the C unpickler's memo would take 2.4 GB) then a list of empty lists: the
    pure unpickler it falls back to builds them until the cap stops it too."""
    path.write_bytes(b"\x80\x04Nr" + (150_000_000).to_bytes(4, "little") + b"0(" + b"]" * lists + b"l.")
    return str(path)


@pytest.mark.parametrize("command", ["report", "doctor", "simulate"])
def test_a_memo_bomb_that_exhausts_both_unpicklers_is_one_line(tmp_path, command):
    path = memo_then_lists(tmp_path / "memo.pickle")
    base = subprocess.run([sys.executable, "-c", "import fragviz.cli, fragviz.library.ingest, fragviz.doctor.report, os; "
                           "print(int(open('/proc/self/statm').read().split()[0]) * os.sysconf('SC_PAGE_SIZE'))"],
                          capture_output=True, text=True, check=True)
    out = run(command, path, limit=int(base.stdout) + (80 << 20))
    one_line(out, path, "needs more memory to decode than the")


def test_the_memory_figures_of_a_refusal_are_measured_before_the_cap(tmp_path, monkeypatch):
    import fragviz.snapshot.unpickle as unpickle

    capped = [False]
    real_cap = memory.address_space_cap

    def cap(payload, room):
        capped[0] = True
        try:
            with real_cap(payload, room):
                yield
        finally:
            capped[0] = False

    def available():
        if capped[0]:
            raise MemoryError  # what opening /proc/meminfo does at the cap
        return 4 << 30

    def out_of_memory(*args, **kwargs):
        raise MemoryError

    from contextlib import contextmanager
    monkeypatch.setattr(unpickle, "address_space_cap", contextmanager(cap))
    monkeypatch.setattr(memory, "memory_available", available)
    monkeypatch.setattr(unpickle, "_load", out_of_memory)
    path = memo_then_lists(tmp_path / "memo.pickle", 10)
    with pytest.raises(SnapshotFormatError, match="needs more memory to decode than the .* 4.00 GiB is available"):
        decode_file(path, "memo.pickle", "d", Limits.current())


# -- pipes and devices ------------------------------------------------------------------------------------

def test_a_snapshot_through_a_pipe_ingests_and_reports(tmp_path):
    db = tmp_path / "s.sqlite"
    out = run(f"{sys.executable} -m fragviz ingest <(cat {SMALL}) --db {db}", shell=True)
    assert out.returncode == 0 and "ingested as snapshot 1" in out.stdout, out.stderr[-2000:]
    out = run(f"{sys.executable} -m fragviz report <(gzip -c {SMALL})", shell=True)
    assert out.returncode == 0 and "device 0" in out.stdout, out.stderr[-2000:]


def test_a_named_fifo_is_read_once(tmp_path):
    fifo = str(tmp_path / "snap.fifo")
    os.mkfifo(fifo)
    data = open(SMALL, "rb").read()

    def write() -> None:
        with open(fifo, "wb") as fh:
            fh.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    out = run("ingest", fifo, "--db", str(tmp_path / "s.sqlite"))
    writer.join(timeout=DEADLINE)
    assert out.returncode == 0, out.stderr[-2000:]


def test_a_pipe_is_refused_as_soon_as_it_passes_the_file_size_limit(tmp_path):
    out = run(f"{sys.executable} -m fragviz report <(cat /dev/zero)", shell=True,
              env={"FRAGVIZ_MAX_FILE_SIZE": "4MiB"})  # an endless pipe
    one_line(out, "/dev/fd/", "is over 4,194,304 bytes", "max_file_size")


@pytest.mark.parametrize("command", ["report", "ingest"])
def test_a_character_device_is_refused_unread(tmp_path, command):
    args = ["--db", str(tmp_path / "s.sqlite")] if command == "ingest" else []
    one_line(run(command, "/dev/zero", *args), "/dev/zero", "is a character device, not a snapshot file")
