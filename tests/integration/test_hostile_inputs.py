"""Every hostile or clumsy input of issue 8's "Why", through the real `fragviz` command in a child process.

Each child runs under an address-space limit and a deadline: a file that made fragviz loop forever or
take memory without bound fails here by the deadline or the limit, not by a timing assert. The promise
checked for each: a clear one-line error (exit 2) or a correct result, never a traceback.
"""
from __future__ import annotations

import gzip
import os
import pickle
import resource
import sqlite3
import subprocess
import sys

import pytest

from tests.support.helpers import MiB, REAL, block, ev, frames, free_port, segment, snapshot, write_pickle

FRAGVIZ = [sys.executable, "-m", "fragviz"]
MEMORY_LIMIT = 3 * 1024**3  # far above what these small files need, far below what the bombs took
DEADLINE = 120  # seconds: these inputs take well under one; before the fix, some never ended


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def fragviz(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*FRAGVIZ, *args], capture_output=True, text=True, timeout=DEADLINE,
                          preexec_fn=_limit_memory, env={**os.environ, **(env or {})})


def refused(path: str, *words: str, env: dict | None = None, child: bool = True) -> str:
    """Report on `path` through the CLI: exit 2 with one line that names the file (and `words`).

    `child=False` runs the command in this process (for inputs that are only malformed, not bombs).
    """
    if child:
        out = fragviz("report", path, env=env)
        status, err = out.returncode, out.stderr
    else:
        status, err = in_process("report", path)
    lines = err.strip().splitlines()
    assert status == 2, err[-2000:]
    assert len(lines) == 1 and path in lines[0], err[-2000:]
    assert len(lines[0]) < len(path) + 400
    for w in words:
        assert w in lines[0]
    return lines[0]


def in_process(*args: str) -> tuple[int, str]:
    import contextlib
    import io

    from fragviz.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main(list(args))
    return status, err.getvalue()


def reported(path: str) -> str:
    out = fragviz("report", path)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def small_snapshot(**top) -> dict:
    seg = segment(0x7F0000000000, [block(0x7F0000000000, 2 * MiB, "active_allocated", 1000, frames("f"))],
                  pool="small")
    trace = [ev("segment_alloc", 0x7F0000000000, 2 * MiB), ev("alloc", 0x7F0000000000, 1000,
                                                              frames=frames("f"))]
    return snapshot([seg], trace, **top)


def with_raw_value(path: str, data: dict, raw_opcodes: bytes) -> str:
    """Pickle `data` (protocol 4) with the string "@RAW@" replaced by a value given as pickle opcodes."""
    blob = pickle.dumps(data, protocol=4)
    marker = b"\x8c\x05@RAW@\x94"
    assert blob.count(marker) == 1
    with open(path, "wb") as fh:
        fh.write(blob.replace(marker, raw_opcodes + b"\x94"))
    return path


def deep_list(depth: int) -> bytes:
    """Opcodes of a list nested `depth` deep: [[[...]]]. (Python's pickler cannot write one: it recurses.)"""
    return b"]" * depth + b"a" * (depth - 1)


def laughs(levels: int = 40) -> list:
    """A list that holds one nested list twice at every level: 2**levels leaves, a few hundred bytes pickled."""
    value: list = ["lol"]
    for _ in range(levels):
        value = [value, value]
    return value


# -- hangs from tiny files -------------------------------------------------------------------------------

def test_gzip_with_a_trailing_zero_byte_is_read(tmp_path):
    path = write_pickle(str(tmp_path / "s.pickle"), small_snapshot())
    data = open(path, "rb").read()
    (tmp_path / "zero.pickle.gz").write_bytes(gzip.compress(data) + b"\0")
    assert "device 0" in reported(str(tmp_path / "zero.pickle.gz"))


def test_gzip_with_a_second_member_is_read_as_the_format_says(tmp_path):
    data = pickle.dumps(small_snapshot(), protocol=4)
    two = tmp_path / "two.pickle.gz"
    two.write_bytes(gzip.compress(data[:100]) + gzip.compress(data[100:]))
    one = tmp_path / "one.pickle.gz"
    one.write_bytes(gzip.compress(data))
    assert reported(str(two)).replace("two.pickle.gz", "") == reported(str(one)).replace("one.pickle.gz", "")


def test_gzip_with_trailing_garbage_is_refused(tmp_path):
    data = pickle.dumps(small_snapshot(), protocol=4)
    path = tmp_path / "junk.pickle.gz"
    path.write_bytes(gzip.compress(data) + b"not gzip")
    refused(str(path), "after its gzip stream")


@pytest.mark.parametrize("where", ["allocator_settings", "frame name", "user_metadata", "external_annotations",
                                   "compile_context"])
def test_a_billion_laughs_is_refused_before_it_is_walked(tmp_path, where):
    bomb = laughs()
    data = small_snapshot()
    if where == "allocator_settings":
        data["allocator_settings"] = {"PYTORCH_CUDA_ALLOC_CONF": "", "extra": bomb}
    elif where == "frame name":
        data["segments"][0]["blocks"][0]["frames"] = [{"filename": "a.py", "line": 1, "name": bomb}]
    elif where == "external_annotations":
        data["external_annotations"] = [{"name": "x", "stage": "START", "device": 0, "time_us": 1, "extra": bomb}]
    else:
        data["device_traces"][0][1][where] = bomb
    path = write_pickle(str(tmp_path / "laughs.pickle"), data)
    assert os.path.getsize(path) < 20_000
    refused(path)


# -- cheap inputs, huge costs ------------------------------------------------------------------------------

@pytest.mark.parametrize("opcodes", [b"]r" + (150_000_000).to_bytes(4, "little"),  # LONG_BINPUT 150M
                                     b"B" + (2**32 - 1).to_bytes(4, "little")])  # BINBYTES of 4 GiB, absent
def test_a_few_bytes_that_declare_a_huge_memo_index_or_value_take_little_memory(tmp_path, opcodes):
    path = tmp_path / "tiny.pickle"
    path.write_bytes(b"\x80\x02" + opcodes + b".")
    script = ("import resource, subprocess, sys\n"
              "p = subprocess.run([sys.executable, '-m', 'fragviz', 'report', sys.argv[1]], capture_output=True)\n"
              "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True,
                         timeout=DEADLINE)
    status, peak_kib = map(int, out.stdout.split())
    assert status in (0, 2)
    assert peak_kib < 400 * 1024  # before: the C unpickler zero-filled a 2.3 GB memo for 9 bytes

def test_a_small_gzip_that_inflates_to_gigabytes_is_refused_from_the_first_bytes(tmp_path):
    small = tmp_path / "small-bomb.pickle.gz"
    small.write_bytes(gzip.compress(b"\x80\x04]" + b"\x00" * (64 * MiB), 9))  # 65 KB -> 64 MiB
    refused(str(small), "max_inflate_ratio")
    path = tmp_path / "bomb.pickle.gz"
    member = gzip.compress(b"\x00" * (64 * MiB), 9)  # ~65 KB; gzip members may follow one another
    path.write_bytes(gzip.compress(b"\x80\x04]", 9) + member * 80)  # ~5.4 GB inflated from ~5 MB
    refused(str(path), "max_inflate_ratio", "FRAGVIZ_MAX_INFLATE_RATIO")  # within its first member
    refused(str(path), "max_inflated_size", "FRAGVIZ_MAX_INFLATED_SIZE",
            env={"FRAGVIZ_MAX_INFLATED_SIZE": "50MiB", "FRAGVIZ_MAX_INFLATE_RATIO": "100000"})


def memo_trace(events: int) -> bytes:
    """A snapshot whose trace repeats one event dict `events` times: pickle writes each repeat as a 2-byte
    memo reference (BINGET), so the file is ~2 bytes an event where a real event takes dozens."""
    trace = [ev("alloc", 4096, 512)] * events
    return pickle.dumps({"segments": [], "device_traces": [trace]}, protocol=4)


def test_a_trace_built_from_memo_references_is_refused(tmp_path):
    plain = tmp_path / "memo.pickle"
    plain.write_bytes(memo_trace(3_000_000))
    refused(str(plain), "shared references")
    packed = tmp_path / "memo.pickle.gz"
    packed.write_bytes(gzip.compress(memo_trace(30_000_000), 9))
    assert packed.stat().st_size < 200_000
    refused(str(packed), "max_inflate_ratio")


def test_the_events_limit_is_configurable(tmp_path):
    data = small_snapshot()
    data["device_traces"][0] *= 3
    path = write_pickle(str(tmp_path / "s.pickle"), data)
    refused(path, "max_events", "FRAGVIZ_MAX_EVENTS", env={"FRAGVIZ_MAX_EVENTS": "5"})
    config = tmp_path / "fragviz.toml"
    config.write_text("max_events = 5\n")
    refused(path, "max_events", env={"FRAGVIZ_CONFIG": str(config)})
    config.write_text("max_events = 6\n")
    out = fragviz("report", path, env={"FRAGVIZ_CONFIG": str(config)})
    assert out.returncode == 0, out.stderr


def test_limits_show_where_each_came_from_and_bad_values_are_named(tmp_path):
    import json

    config = tmp_path / "fragviz.toml"
    config.write_text("[fragviz]\nmax_frames = 50\n")
    out = fragviz("limits", "--json", env={"FRAGVIZ_CONFIG": str(config), "FRAGVIZ_MAX_STRING": "1000"})
    rows = {r["name"]: r for r in json.loads(out.stdout)["settings"]}
    assert rows["max_frames"]["value"] == "50" and rows["max_frames"]["from"] == str(config)
    assert rows["max_string"]["from"] == "$FRAGVIZ_MAX_STRING" and rows["max_depth"]["from"] == "default"
    config.write_text("max_frame = 50\n")
    out = fragviz("limits", env={"FRAGVIZ_CONFIG": str(config)})
    assert out.returncode == 2 and "unknown setting 'max_frame'" in out.stderr
    out = fragviz("limits", env={"FRAGVIZ_MAX_EVENTS": "lots"})
    assert out.returncode == 2 and "max_events" in out.stderr and "FRAGVIZ_MAX_EVENTS" in out.stderr


def test_warnings_about_many_segments_are_collected_in_linear_time_and_capped(tmp_path):
    segs = [{"device": 0, "address": (i + 1) << 22, "total_size": 2 * MiB, "stream": 0,
             "blocks": [{"address": (i + 1) << 22, "size": MiB, "state": "inactive"}]} for i in range(100_000)]
    trace = [ev(f"mystery_{i}", 0, 0) for i in range(60)]
    path = write_pickle(str(tmp_path / "s.pickle"), {"segments": segs, "device_traces": [trace]})
    out = fragviz("report", path, "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    import json
    warnings = json.loads(out.stdout)["warnings"]
    assert any("more warnings like these" in w for w in warnings)
    assert len(warnings) <= 210


# -- tracebacks instead of errors ------------------------------------------------------------------------

HUGE = [2**63, 2**64, 2**200]


@pytest.mark.parametrize("value", HUGE)
@pytest.mark.parametrize("field", ["segment address", "segment total_size", "segment stream", "segment device",
                                   "block size", "block address", "event addr", "event size", "event stream",
                                   "oom device_free"])
def test_values_past_int64_are_one_clean_error(tmp_path, field, value):
    data = small_snapshot()
    seg, blk, evt = data["segments"][0], data["segments"][0]["blocks"][0], data["device_traces"][0][1]
    target, key = {"segment": (seg, None), "block": (blk, None), "event": (evt, None),
                   "oom": (evt, None)}[field.split()[0]]
    key = field.split()[1]
    if field.startswith("oom"):
        evt.clear()
        evt.update({"action": "oom", "size": 1, "stream": 0})
    target[key] = value
    path = write_pickle(str(tmp_path / "s.pickle"), data)
    line = refused(path, key, child=False)
    assert str(value)[:60] in line or "bits" in line


@pytest.mark.parametrize("where", ["frame name", "frame filename", "event field", "user_metadata", "settings"])
def test_deep_nesting_is_one_clean_error(tmp_path, where):
    data = small_snapshot()
    if where.startswith("frame"):
        data["segments"][0]["blocks"][0]["frames"] = [{"filename": "a.py", "line": 1, "name": "f",
                                                       where.split()[1]: "@RAW@"}]
    elif where == "event field":
        data["device_traces"][0][1]["size"] = "@RAW@"
    elif where == "user_metadata":
        data["device_traces"][0][1]["user_metadata"] = "@RAW@"
    else:
        data["allocator_settings"] = {"x": "@RAW@"}
    path = with_raw_value(str(tmp_path / "deep.pickle"), data, deep_list(200_000))
    refused(path)


def test_a_block_state_that_is_a_list_is_one_clean_error(tmp_path):
    data = small_snapshot()
    data["segments"][0]["blocks"][0]["state"] = ["active_allocated"]
    refused(write_pickle(str(tmp_path / "s.pickle"), data), "state", child=False)


@pytest.mark.parametrize("threshold", ["0.5", [0.5], 7])
def test_a_garbage_collection_threshold_that_is_not_a_fraction_is_one_clean_error(tmp_path, threshold):
    data = small_snapshot(allocator_settings={"garbage_collection_threshold": threshold})
    refused(write_pickle(str(tmp_path / "s.pickle"), data), "garbage_collection_threshold", child=False)


def test_a_free_after_its_segment_was_freed_is_replayed_not_a_crash(tmp_path):
    base = 0x7F0000000000
    trace = [ev("segment_alloc", base, 2 * MiB), ev("alloc", base, 512), ev("free_requested", base, 512),
             ev("segment_free", base, 2 * MiB), ev("free_completed", base, 512),
             ev("segment_alloc", base, 2 * MiB), ev("alloc", base, 1024)]
    path = write_pickle(str(tmp_path / "s.pickle"), snapshot([], trace))
    out = fragviz("report", path, "--json", "--at", "7")
    assert out.returncode == 0, out.stderr[-2000:]
    import json
    report = json.loads(out.stdout)
    assert report["devices"][0]["peak_reserved_bytes"] == 2 * MiB
    assert any("segment_free events while blocks are still live" in w for w in report["warnings"])


def test_a_lone_surrogate_in_a_frame_name_is_stored_and_shown(tmp_path):
    data = small_snapshot()
    data["segments"][0]["blocks"][0]["frames"] = [{"filename": "a\udc80.py", "line": 3, "name": "f\ud800g"}]
    path = write_pickle(str(tmp_path / "s.pickle"), data)
    db = str(tmp_path / "s.sqlite")
    out = fragviz("ingest", path, "--db", db)
    assert out.returncode == 0, out.stderr[-2000:]
    names = {r[0] for r in sqlite3.connect(db).execute("SELECT name FROM frames")}
    assert "f\ufffdg" in names
    assert fragviz("report", "1", "--db", db).returncode == 0


def test_error_messages_cut_the_bad_value(tmp_path):
    data = small_snapshot()
    data["segments"][0]["blocks"][0]["state"] = "x" * 10_000_000
    line = refused(write_pickle(str(tmp_path / "s.pickle"), data), "state")
    assert len(line) < 300


# -- wrong words -------------------------------------------------------------------------------------------

def test_an_unknown_db_url_is_refused_and_never_becomes_a_folder(tmp_path):
    out = subprocess.run([*FRAGVIZ, "ingest", os.path.join(REAL, "diffusion_tiny.pickle"), "--db",
                          "mysql://user:secret@host/db"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=DEADLINE)
    assert out.returncode == 2 and "unknown store URL scheme 'mysql'" in out.stderr and "secret" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert os.listdir(tmp_path) == []


def test_an_unreachable_server_store_is_one_line_without_its_password(tmp_path):
    port = free_port()  # a port nothing listens on
    out = subprocess.run([*FRAGVIZ, "ingest", os.path.join(REAL, "diffusion_tiny.pickle"), "--db",
                          f"postgresql://user:secret@127.0.0.1:{port}/db"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=DEADLINE)
    assert out.returncode == 2 and "secret" not in out.stderr
    assert out.stderr.strip() == (f"fragviz: postgresql://user:***@127.0.0.1:{port}/db: cannot reach the store's "
                                  "server (Connection refused)")
    assert os.listdir(tmp_path) == []


def test_a_busy_store_is_busy_not_a_bad_file(tmp_path):
    db = str(tmp_path / "s.sqlite")
    assert fragviz("ingest", os.path.join(REAL, "diffusion_tiny.pickle"), "--db", db).returncode == 0
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the store
    try:
        out = fragviz("ingest", os.path.join(REAL, "sketchkv.pickle"), "--db", db,
                      env={"FRAGVIZ_BUSY_TIMEOUT": "0.2s"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert out.returncode == 75, out.stderr
    assert "busy" in out.stderr and "try again" in out.stderr
    assert fragviz("ingest", os.path.join(REAL, "sketchkv.pickle"), "--db", db).returncode == 0


def test_an_internal_error_is_exit_3_with_one_line_and_the_traceback_behind_debug(tmp_path, monkeypatch, capsys):
    from fragviz import cli
    import fragviz.doctor.report

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(fragviz.doctor.report, "report_text", broken)
    path = os.path.join(REAL, "diffusion_tiny.pickle")
    assert cli.main(["report", path]) == 3  # never 1, which `fragviz gate` gives a broken budget
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error" in err and "--debug" in err
    assert cli.main(["report", path, "--debug"]) == 3
    assert "Traceback" in capsys.readouterr().err


def test_limits_never_show_a_store_urls_password():
    for args in (("limits",), ("limits", "--json")):
        out = fragviz(*args, env={"FRAGVIZ_DB": "postgresql://team:hunter2@db.internal:5432/fragviz"})
        assert out.returncode == 0 and "hunter2" not in out.stdout
        assert "postgresql://team:***@db.internal:5432/fragviz" in out.stdout
