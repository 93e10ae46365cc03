"""Crashes and a full disk, measured on real processes and real snapshots.

1. `fragviz ingest` of three real snapshots (one command, about a second on this project's machine; no
   single real file takes a second), SIGKILLed 30 times: 20 after delays spread evenly (a fixed seed) over
   the measured length of an unkilled run (start-up, read, decode, parse, replay, the store's write), and 10
   aimed into a write to the store (once the progress bar says `store`, a random part of that file's write,
   as long as an unkilled run in this process measured it). After each kill the store opens, passes
   `PRAGMA integrity_check` and `foreign_key_check`, still holds the snapshot it held before, holds no
   partial snapshot (every stored snapshot owns exactly the rows a clean ingest of the same file gives it),
   and the same files ingested again (in this process) succeed and leave a store equal to a clean one (the
   same rows per table).
2. `fragviz attach` recording a real `fragviz run` training loop into one store, SIGKILLed at random points
   (start-up, polls, the segments, taking a snapshot into the library) several times: after each kill the
   store is consistent, its live tables read through LiveReader, every snapshot in it is whole; a new
   attach into the same store records and ends cleanly.
3. A full disk: a store on a small tmpfs that is filled until an ingest of a real snapshot cannot fit. The
   ingest gives one clear line that says the disk is full (no traceback, no "bad file", no "not a store"),
   with a documented exit status; the store passes integrity_check and holds what it held; once space is
   freed the same ingest works.

Random points come from a fixed seed and durations measured in the test; nothing asserts on how long
anything took, and every wait is on a condition with a generous deadline.
"""
from __future__ import annotations

import errno
import math
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import pytest

import fragviz.library.ingest
from fragviz.base import errors
from fragviz.library.ingest import ingest_file
from fragviz.library import Library
from fragviz.store.engine import open_store
from fragviz.library.stored import CHUNK_EVENTS
from tests.support import helpers
from tests.support.helpers import REAL, TESTS

FRAGVIZ = [sys.executable, "-m", "fragviz"]
TRAIN_LOOP = os.path.join(TESTS, "live", "train_loop.py")
SEED_FILE = os.path.join(REAL, "cs336silmont_small.pickle")  # what every store holds before the crash
KILLED_FILES = [os.path.join(REAL, f"{name}.pickle") for name in (
    "hanmin_train_19k", "cs336kk_ctx128_fullstep", "sqattn_segment_free")]
FULL_DISK_FILE = os.path.join(REAL, "hanmin_train_19k.pickle")  # about 3 MB of store
INGEST_KILLS = 30
WRITE_KILLS = 10  # of INGEST_KILLS: aimed into a write to the store
ATTACH_KILLS = 6
SEED = 20240806
DEADLINE = 120.0  # seconds a condition may take to come true; only a bound, never a measurement


# -- helpers -------------------------------------------------------------------------------------------------

def env() -> dict[str, str]:
    drop = ("FRAGVIZ_TOKEN", "FRAGVIZ_DB", "RANK", "LOCAL_RANK", "WORLD_SIZE", "PYTORCH_CUDA_ALLOC_CONF")
    return {k: v for k, v in os.environ.items() if k not in drop}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*FRAGVIZ, *args], capture_output=True, text=True, timeout=DEADLINE,
                          stdin=subprocess.DEVNULL, env=env())


def ingest(db: str, *files: str) -> subprocess.CompletedProcess:
    out = cli("ingest", *files, "--db", db)
    assert out.returncode == 0, out.stderr
    return out


def wait_for(condition, what: str, proc: subprocess.Popen | None = None, err_path: str | None = None) -> Any:
    """helpers.wait_for, failing at once when `proc` exits, with the end of its stderr (`err_path`)."""
    def gone() -> str | None:
        return f"exited ({proc.returncode})" if proc is not None and proc.poll() is not None else None

    return helpers.wait_for(condition, what, deadline=DEADLINE, interval=0.05, gone=gone,
                            tail=lambda: f":\n{read(err_path)[-3000:]}")


def read(path: str | None) -> str:
    if not path or not os.path.exists(path):
        return ""
    with open(path, errors="replace") as fh:
        return fh.read()


def sigkill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(DEADLINE)


def owned_tables(conn) -> list[str]:
    """Tables whose rows belong to one snapshot (deleted with it): the parts of a snapshot."""
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    return [t for t in tables if any(fk[2] == "snapshots" and fk[6] == "CASCADE"
                                     for fk in conn.execute(f"PRAGMA foreign_key_list({t})"))]


def table_counts(conn) -> dict[str, int]:
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}


def parts_by_hash(conn) -> dict[str, dict[str, int]]:
    """content hash -> {owned table: rows} for every stored snapshot."""
    out: dict[str, dict[str, int]] = {}
    tables = owned_tables(conn)
    for sid, digest in conn.execute("SELECT id, content_hash FROM snapshots").fetchall():
        out[digest] = {t: conn.execute(f"SELECT count(*) FROM {t} WHERE snapshot_id = ?", (sid,)).fetchone()[0]
                       for t in tables}
    return out


def check_consistent(db: str) -> dict[str, dict[str, int]]:
    """Open the store as fragviz does and check SQLite's own view of it; its snapshots' parts by hash."""
    open_store(db).close()
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        return parts_by_hash(conn)
    finally:
        conn.close()


def counts_of(db: str) -> dict[str, int]:
    conn = sqlite3.connect(db)
    try:
        return table_counts(conn)
    finally:
        conn.close()


def check_whole(db: str, reader: Library, sid: int) -> None:
    """A snapshot whose parts add up to what its own summary says (for snapshots with no clean twin)."""
    summary = reader.snapshot_row(sid).summary
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = dict(conn.execute("SELECT device, trace_events FROM devices WHERE snapshot_id = ?", (sid,)).fetchall())
        assert sorted(rows) == sorted(d.device for d in summary.devices), sid

        def count(table: str, device: int) -> int:
            return conn.execute(f"SELECT count(*) FROM {table} WHERE snapshot_id = ? AND device = ?",
                                (sid, device)).fetchone()[0]
        for d in summary.devices:
            dev, n = d.device, d.trace_events
            assert rows[dev] == n, (sid, dev)
            assert count("segments", dev) == d.segments and count("blocks", dev) == d.blocks, (sid, dev)
            assert count("trace_chunks", dev) == math.ceil(n / CHUNK_EVENTS), (sid, dev)
            assert count("series_chunks", dev) == math.ceil((n + 1) / CHUNK_EVENTS), (sid, dev)
    finally:
        conn.close()
    reader.load_analysis(sid)


def last_phase(err_path: str, out: str) -> str:
    """Where a killed `ingest --progress` was: 'start-up', 'N:phase' (N files done before it) or 'done'."""
    drawn = re.findall(r"%\s+(\w+)\s+[\d.]+s", read(err_path))
    done = len([line for line in out.splitlines() if line.strip()])
    if done == len(KILLED_FILES):
        return "done"
    return f"{done}:{drawn[-1]}" if drawn else "start-up"


# -- 1. ingests killed ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """A store that holds one snapshot: every killed ingest starts from a copy of it."""
    db = str(tmp_path_factory.mktemp("seed") / "seed.sqlite")
    ingest(db, SEED_FILE)
    return db


def ingest_here(db: str, phase=None) -> None:
    """The killed files ingested again by this process (no interpreter start-up to pay for)."""
    conn = open_store(db)
    try:
        for path in KILLED_FILES:
            result = ingest_file(conn, path, name=path, phase=phase)
            assert result.status in ("ingested", "unchanged"), result.error
    finally:
        conn.close()


def store_phase_seconds(db: str) -> list[float]:
    """An unkilled ingest in this process, timed: how long each file's write to the store takes."""
    marks: list[tuple[str, float]] = []
    ingest_here(db, phase=lambda name: marks.append((name, time.monotonic())))
    marks.append(("end", time.monotonic()))
    return [b[1] - a[1] for a, b in zip(marks, marks[1:]) if a[0] == "store"]


def killed_ingest(db: str, err: str, kill_when) -> str:
    """`fragviz ingest --progress` of the killed files, SIGKILLed when `kill_when(proc, err)` returns: its stdout."""
    with open(err, "wb") as err_fh:
        proc = subprocess.Popen([*FRAGVIZ, "ingest", *KILLED_FILES, "--db", db, "--progress"],
                                stdout=subprocess.PIPE, stderr=err_fh, stdin=subprocess.DEVNULL, env=env())
        try:
            kill_when(proc, err)
        finally:
            sigkill(proc)
    with proc.stdout:
        return proc.stdout.read().decode()


def after(delay: float):
    return lambda proc, err: time.sleep(delay)


def in_store_phase(k: int, delay: float):
    """Once file k's write to the store has begun (the progress bar says so), `delay` seconds later."""
    def wait(proc: subprocess.Popen, err: str) -> None:
        while read(err).count(" store ") <= k and proc.poll() is None:
            time.sleep(0.002)
        time.sleep(delay)
    return wait


def test_an_ingest_killed_anywhere_leaves_a_whole_store_that_takes_the_files_again(seeded, tmp_path):
    # unkilled runs: how long the command takes and how long each write takes (for the kill points), and
    # what a clean store holds
    clean_db, here_db = str(tmp_path / "clean.sqlite"), str(tmp_path / "here.sqlite")
    shutil.copyfile(seeded, clean_db)
    shutil.copyfile(seeded, here_db)
    started = time.monotonic()
    ingest(clean_db, *KILLED_FILES)
    duration = time.monotonic() - started
    writes = store_phase_seconds(here_db)
    clean_parts, clean_counts = check_consistent(clean_db), counts_of(clean_db)
    assert (check_consistent(here_db), counts_of(here_db)) == (clean_parts, clean_counts)
    assert len(clean_parts) == 1 + len(KILLED_FILES) and len(writes) == len(KILLED_FILES)
    seed_parts = check_consistent(seeded)

    rng = random.Random(SEED)
    uniform = INGEST_KILLS - WRITE_KILLS
    kills = [(f"after {(d := duration * (i + rng.random()) / uniform):.2f} s", after(d)) for i in range(uniform)]
    for i in range(WRITE_KILLS):  # the write is short: aim some kills into it
        k = i % len(KILLED_FILES)
        d = writes[k] * rng.random()
        kills.append((f"{d * 1000:.0f} ms into file {k}'s write", in_store_phase(k, d)))
    where: Counter = Counter()
    for i, (when, kill_when) in enumerate(kills):
        db, err = str(tmp_path / f"kill{i}.sqlite"), str(tmp_path / f"kill{i}.err")
        shutil.copyfile(seeded, db)
        at = last_phase(err, killed_ingest(db, err, kill_when))
        where[at.split(":")[-1]] += 1
        context = f"kill {i} {when} ({at})"

        parts = check_consistent(db)
        assert set(seed_parts) <= set(parts), f"{context}: the snapshot the store held is gone"
        for digest, owned in parts.items():
            assert digest in clean_parts, f"{context}: a snapshot no clean ingest stores"
            assert owned == clean_parts[digest], f"{context}: a partial snapshot: {owned} != {clean_parts[digest]}"

        ingest_here(db)
        assert check_consistent(db) == clean_parts, context
        assert counts_of(db) == clean_counts, context
        for path in (db, db + "-wal", db + "-shm", err):
            if os.path.exists(path):
                os.remove(path)
    print(f"\n{INGEST_KILLS} kills ({WRITE_KILLS} aimed at a write) over an unkilled run of {duration:.2f} s, by "
          f"the phase they hit: " + ", ".join(f"{k} {v}" for k, v in sorted(where.items())))


# -- 2. the live poller killed --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """`fragviz run --port 0` over a real training loop on a simulated device: (port, process)."""
    tmp = tmp_path_factory.mktemp("job")
    out_path, err_path = str(tmp / "job.out"), str(tmp / "job.err")
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen([*FRAGVIZ, "run", "--port", "0", "--device-memory", "256MiB", "--",
                                 sys.executable, TRAIN_LOOP, "--step-ms", "50"],
                                stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env())
    try:
        found = wait_for(lambda: re.search(r"on http://127\.0\.0\.1:(\d+)", read(err_path)), "the agent's port",
                         proc, err_path)
        wait_for(lambda: "step 3" in read(out_path), "the job to train", proc, err_path)
        yield int(found.group(1)), proc
    finally:
        sigkill(proc)


def start_attach(port: int, db: str, err_path: str, *args: str) -> subprocess.Popen:
    with open(err_path, "wb") as err:
        return subprocess.Popen([*FRAGVIZ, "attach", f"127.0.0.1:{port}", "--db", db, "--interval", "0.1s",
                                 "--snapshot-every", "0.5s", *args],
                                stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, env=env())


def live_rows(db: str, sql: str) -> int:
    """A count from the store as it is now (0 while it, or its schema, is still being made)."""
    if not os.path.exists(db):
        return 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute(sql).fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


def recorded(db: str, snapshots: str) -> str:
    """What the newest attachment recorded before it was killed, in words."""
    newest = "WHERE attachment_id = (SELECT max(id) FROM live_attachments)"
    samples = live_rows(db, f"SELECT count(*) FROM live_samples {newest}")
    state = live_rows(db, f"SELECT count(*) FROM live_state {newest}")
    return f"{samples} samples, {'its segments, ' if state else ''}{snapshots}"


def check_live_store(db: str, checked: set[int]) -> tuple[int, int]:
    """Integrity, the live tables through LiveReader, every snapshot whole: (attachments, snapshots)."""
    check_consistent(db)
    reader = Library.open(db)
    try:
        attachments = reader.live.attachments()
        for att in attachments:
            samples = reader.live.samples(att.id)
            assert len({len(column) for column in samples.values()}) == 1, att
            assert all(p == att.pid for p in samples["pid"]), att
            for ev in reader.live.events(att.id):
                assert ev.kind in {"snapshot", "oom", "disconnected", "reconnected", "restarted", "refused", "error"}
                assert ev.kind != "error", ev.detail
            for device in reader.live.devices(att.id):
                state = reader.live.latest_state(att.id, device)
                assert state is None or all(seg.blocks for seg in state[1])
        rows = reader.list_snapshots()
        for row in rows:
            if row.id not in checked:
                check_whole(db, reader, row.id)
                checked.add(row.id)
        return len(attachments), len(rows)
    finally:
        reader.close()


def test_an_attach_killed_anywhere_leaves_a_readable_store_and_a_new_attach_records(job, tmp_path):
    port, _ = job
    db = str(tmp_path / "live.sqlite")
    checked: set[int] = set()
    # an unkilled attach: how long until it has taken its first snapshot into the library (for the kill points)
    err = str(tmp_path / "first.err")
    started = time.monotonic()
    proc = start_attach(port, db, err)
    wait_for(lambda: live_rows(db, "SELECT count(*) FROM live_events WHERE kind = 'snapshot'") >= 1,
             "the first attach's first snapshot", proc, err)
    first_snapshot = time.monotonic() - started
    proc.send_signal(signal.SIGINT)
    assert proc.wait(DEADLINE) == 0, read(err)
    attachments, snapshots = check_live_store(db, checked)
    assert attachments == 1 and snapshots >= 1

    rng = random.Random(SEED)
    span = 2 * first_snapshot  # the second snapshot's write is a kill point too
    where: list[str] = []
    for i in range(ATTACH_KILLS):
        delay = span * (i + rng.random()) / ATTACH_KILLS
        err = str(tmp_path / f"attach{i}.err")
        proc = start_attach(port, db, err)
        time.sleep(delay)
        sigkill(proc)
        now_attachments, now_snapshots = check_live_store(db, checked)
        assert attachments <= now_attachments <= attachments + 1, f"kill {i} after {delay:.2f} s"
        assert now_snapshots >= snapshots
        where.append(f"{delay:.2f} s: " + ("before its attachment row" if now_attachments == attachments else
                                           recorded(db, f"{now_snapshots - snapshots} snapshots")))
        attachments, snapshots = now_attachments, now_snapshots

    print(f"\n{ATTACH_KILLS} attach kills over {span:.2f} s (twice the time to a first snapshot): " + "; ".join(where))

    err = str(tmp_path / "last.err")
    proc = start_attach(port, db, err, "--duration", "3s")
    assert proc.wait(DEADLINE) == 0, read(err)
    assert re.search(r"\d+ polls, \d+ snapshots", read(err)), read(err)
    check_live_store(db, checked)
    reader = Library.open(db)
    try:
        last = reader.live.attachments()[0]
        assert last.ended_at is not None and last.pid == job[1].pid
        assert len(reader.live.samples(last.id)["id"]) >= 1
        assert reader.live.events(last.id, kind="snapshot"), read(err)
    finally:
        reader.close()


# -- 3. a full disk -------------------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs, unmounted afterwards."""
    path = str(tmp_path / "disk")
    os.mkdir(path)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", path], capture_output=True,
                              text=True, timeout=60)
    except FileNotFoundError:
        pytest.skip("no `mount` command here: cannot make a small disk for the full-disk test")
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here (needs root or CAP_SYS_ADMIN): {done.stderr.strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", path], capture_output=True, timeout=60).returncode != 0:
            subprocess.run(["umount", "-l", path], capture_output=True, timeout=60)


def fill(path: str, leave: int) -> str:
    """Fill the file system of `path` until at most `leave` bytes are free: the filler's path."""
    filler = os.path.join(path, "filler")
    chunk = b"\0" * (1 << 16)
    with open(filler, "wb") as fh:
        while True:
            st = os.statvfs(path)
            free = st.f_bavail * st.f_frsize
            if free <= leave:
                break
            try:
                fh.write(chunk[: max(4096, min(len(chunk), free - leave))])
                fh.flush()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
    return filler


# the exit statuses fragviz documents: its errors' own, and an ingest's outcomes where it names them
DOCUMENTED_EXIT = ({cls.exit_code for cls in vars(errors).values()
                    if isinstance(cls, type) and issubclass(cls, errors.FragvizError)}
                   | set(getattr(fragviz.library.ingest, "EXIT_STATUS", {}).values()))


@pytest.fixture(scope="module")
def clean_full(seeded, tmp_path_factory):
    """What a clean store holds after the full-disk file is ingested into the seeded one: (parts, counts)."""
    db = str(tmp_path_factory.mktemp("clean_full") / "clean.sqlite")
    shutil.copyfile(seeded, db)
    conn = open_store(db)
    try:
        assert ingest_file(conn, FULL_DISK_FILE).status == "ingested"
    finally:
        conn.close()
    return check_consistent(db), counts_of(db)


@pytest.mark.parametrize("room", [256 * 1024, 0], ids=["room-to-open-not-to-write", "no-room-at-all"])
def test_a_full_disk_gives_one_clear_line_and_keeps_the_store(small_disk, seeded, clean_full, room):
    db = os.path.join(small_disk, "store.sqlite")
    shutil.copyfile(seeded, db)
    before_parts, before_counts = check_consistent(db), counts_of(db)

    filler = fill(small_disk, room)
    full = cli("ingest", FULL_DISK_FILE, "--db", db)
    os.remove(filler)  # the store is judged, and written again, with room on the disk
    assert check_consistent(db) == before_parts
    assert counts_of(db) == before_counts
    again = ingest(db, FULL_DISK_FILE)
    assert "ingested as snapshot 2" in again.stdout
    assert (check_consistent(db), counts_of(db)) == clean_full

    # what the user was told when the disk was full (last: the store's checks above hold already)
    lines = [line for line in full.stderr.splitlines() if line.strip()]
    assert full.returncode in DOCUMENTED_EXIT - {0, 1}, f"exit {full.returncode}: {full.stderr}"
    assert len(lines) == 1 and "Traceback" not in full.stderr, full.stderr
    message = lines[0]
    assert re.search(r"\bfull\b|no space|ENOSPC", message, re.I), f"does not say the disk is full: {message}"
    assert not re.search(r"not a fragviz store|not a snapshot|bug", message, re.I), f"blames the wrong thing: {message}"
