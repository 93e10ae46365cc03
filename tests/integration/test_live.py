"""Live attach with real processes and real HTTP: `fragviz run` serving a real torch training loop on a
simulated device, its endpoints, tokens, `fragviz attach` recording into a store through kills, restarts and
OOMs, torchrun ranks, and the store's migration from version 1.

Every wait is on a condition with a generous deadline; nothing asserts on how long anything took.
"""
from __future__ import annotations

import http.client
import json
import os
import pickle
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from types import SimpleNamespace
from typing import Any, Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fragviz.replay.analysis import analyze
from fragviz.doctor import diagnose
from fragviz.base.errors import StoreError
from fragviz.live.protocol import STATS_DEVICE_KEYS
from fragviz.doctor.records import Report
from fragviz.doctor.report import report_of as report_of_analysis
from fragviz.snapshot import load_snapshot, load_snapshot_bytes
from fragviz.library import Library
from fragviz.store.engine import open_store
from fragviz.store.schema import SCHEMA_VERSION
from tests.support import helpers
from tests.support.helpers import REAL, TESTS, free_port

BIN = os.path.dirname(sys.executable)
FRAGVIZ = os.path.join(BIN, "fragviz")
TORCHRUN = os.path.join(BIN, "torchrun")
TRAIN_LOOP = os.path.join(TESTS, "live", "train_loop.py")
STORE_V1 = os.path.join(TESTS, "data", "store_v1.sqlite")
SMALL = os.path.join(REAL, "cs336silmont_small.pickle")
DEADLINE = 60.0  # seconds any one condition may take to come true; only a bound, never a measurement
MiB = 1 << 20
DEVICE = 256 * MiB
TOKEN = "s3cret"
VERDICTS = {"exhaustion", "fragmentation", "outside_pytorch", "capacity_cap"}
LOOP = ("--step-ms", "50")  # a loop that trains until killed


# -- helpers ---------------------------------------------------------------------------------------------

def wait_for(condition: Callable[[], Any], what: str, procs: tuple = (), deadline: float = DEADLINE) -> Any:
    """helpers.wait_for, failing at once if a process in `procs` exits first, with their stderr."""
    def gone() -> str | None:
        dead = [p for p in procs if p.exited()]
        return f"{dead[0].name} exited ({dead[0].proc.returncode})" if dead else None

    return helpers.wait_for(condition, what, deadline=deadline, gone=gone,
                            tail=lambda: "".join(f"\n--- {p.name} stderr:\n{p.stderr()[-3000:]}" for p in procs))


def get(port: int, path: str, token: str | None = None, timeout: float = 30.0) -> tuple[int, bytes, Any]:
    """(status, body, headers) of a GET to the agent on 127.0.0.1:port."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read(), resp.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers


def raw_get(port: int, path: str, headers: dict[str, str]) -> tuple[int, bytes, Any]:
    """A GET with exactly these headers (http.client adds Host unless given)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read(), resp.headers
    finally:
        conn.close()


def answers(port: int) -> bool:
    try:
        get(port, "/v1/stats", timeout=5)
        return True
    except OSError:
        return False


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([FRAGVIZ, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=clean_env())


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FRAGVIZ_TOKEN", "FRAGVIZ_DB", "RANK", "LOCAL_RANK",
                                                             "WORLD_SIZE", "PYTORCH_CUDA_ALLOC_CONF")}
    env.update(extra)
    return env


class Proc:
    """A child process with its output in files; `stop()` always ends it."""

    def __init__(self, name: str, argv: list[str], tmp: Any, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.out_path = os.path.join(str(tmp), f"{name}.out")
        self.err_path = os.path.join(str(tmp), f"{name}.err")
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                         env=env or clean_env())

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def stdout(self) -> str:
        with open(self.out_path, errors="replace") as fh:
            return fh.read()

    def stderr(self) -> str:
        with open(self.err_path, errors="replace") as fh:
            return fh.read()

    def wait(self, deadline: float = DEADLINE) -> int:
        try:
            return self.proc.wait(deadline)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.name} did not exit within {deadline:.0f} s:\n{self.stderr()[-3000:]}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)

    stop = kill


class Job(Proc):
    """`fragviz run --port P --device-memory 256MiB -- python train_loop.py ARGS`."""

    def __init__(self, name: str, tmp: Any, *loop_args: str, port: int | None = None,
                 run_args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
        self.port = port if port is not None else free_port()
        super().__init__(name, [FRAGVIZ, "run", "--port", str(self.port), "--device-memory", "256MiB", *run_args,
                                "--", sys.executable, TRAIN_LOOP, *loop_args], tmp, env)

    def get(self, path: str, token: str | None = None) -> tuple[int, bytes, Any]:
        return get(self.port, path, token)

    def stats(self, token: str | None = None) -> dict[str, Any]:
        status, body, _ = self.get("/v1/stats", token)
        assert status == 200, body
        return json.loads(body)

    def steps(self) -> int:
        return sum(1 for line in self.stdout().splitlines() if line.startswith("step "))

    def ready(self, printed: str = "step ") -> "Job":
        """Wait until the agent answers and the script has printed `printed`."""
        wait_for(lambda: answers(self.port), f"{self.name}'s agent on port {self.port}", (self,))
        wait_for(lambda: printed in self.stdout(), f"{self.name} to print {printed!r}", (self,))
        return self


class Attach(Proc):
    def __init__(self, name: str, tmp: Any, db: str, *args: str) -> None:
        super().__init__(name, [FRAGVIZ, "attach", *args, "--db", db], tmp)

    def interrupt(self) -> int:
        """Ctrl-C, and the exit status."""
        self.proc.send_signal(signal.SIGINT)
        return self.wait()


def query(db: str, sql: str, args: tuple = ()) -> list[tuple]:
    """Rows from the store as it is now (read-only; nothing yet when the store or table does not exist)."""
    if not os.path.exists(db):
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute(sql, args).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def events(db: str, kind: str | None = None) -> list[tuple]:
    """(id, attachment_id, kind, detail, snapshot_id) of live events, oldest first."""
    sql = "SELECT id, attachment_id, kind, detail, snapshot_id FROM live_events"
    return query(db, sql + " WHERE kind = ? ORDER BY id" if kind else sql + " ORDER BY id", (kind,) if kind else ())


def sample_pids(db: str) -> set[int]:
    return {r[0] for r in query(db, "SELECT DISTINCT pid FROM live_samples")}


def report_of(blob: bytes, name: str = "live") -> Report:
    return report_of_analysis(analyze(load_snapshot_bytes(blob, name)))


# -- jobs of their own (first, while the shared jobs are not running yet) ----------------------------------

def test_run_refuses_a_public_address_without_a_token_and_never_runs_the_script(tmp_path):
    marker = tmp_path / "ran"
    script = tmp_path / "script.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    out = cli("run", "--host", "0.0.0.0", "--port", str(free_port()), "--", sys.executable, str(script), timeout=120)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fragviz: ") and "token" in lines[0], out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    assert not marker.exists()


def test_attach_follows_a_job_through_a_kill_and_a_restart(tmp_path):
    port = free_port()
    db = str(tmp_path / "store.sqlite")
    first = Job("first", tmp_path, *LOOP, port=port)
    attach = second = None
    try:
        first.ready()
        attach = Attach("attach", tmp_path, db, f"127.0.0.1:{port}", "--interval", "0.2s", "--snapshot-every", "1h")
        wait_for(lambda: first.pid in sample_pids(db), "samples of the first job", (attach,))
        first.proc.send_signal(signal.SIGKILL)
        first.wait()
        wait_for(lambda: events(db, "disconnected"), "the poller to notice the job is gone", (attach,))
        second = Job("second", tmp_path, *LOOP, port=port)
        second.ready()
        wait_for(lambda: events(db, "restarted"), "the poller to notice the new job", (attach, second))
        wait_for(lambda: second.pid in sample_pids(db), "samples of the second job", (attach, second))
        assert attach.interrupt() == 0, attach.stderr()
    finally:
        for p in (attach, first, second):
            if p is not None:
                p.kill()
    err = attach.stderr()
    summary = [line for line in err.splitlines() if re.search(r"\d+ polls, \d+ snapshots", line)]
    assert len(summary) == 1 and "1 gaps" in summary[0], err
    assert "Traceback" not in err

    kinds = [e[2] for e in events(db)]
    assert kinds == ["disconnected", "reconnected", "restarted"], kinds
    restarted = events(db, "restarted")[0]
    assert restarted[3] == f"pid {first.pid} -> {second.pid}"
    assert events(db, "reconnected")[0][3] == f"pid {second.pid}"

    reader = Library.open(db)
    try:
        (att,) = reader.live.attachments()
        assert att.pid == second.pid  # ended_at after Ctrl-C: see test_ctrl_c_ends_the_attachment
        s = reader.live.samples(att.id)
    finally:
        reader.close()
    pids, gaps = s["pid"], s["gap"]
    assert set(pids) == {first.pid, second.pid}
    switch = pids.index(second.pid)
    assert switch > 0 and all(p == first.pid for p in pids[:switch]) and all(p == second.pid for p in pids[switch:])
    assert gaps[switch] == 1, "the first sample after the gap is marked"
    assert sum(gaps) == 1
    assert s["t"][switch] > s["t"][switch - 1]


def test_ctrl_c_ends_the_attachment(tmp_path):
    """Ctrl-C while a poll is in flight (an agent that accepted the connection but has not answered yet):
    attach still exits 0 and the attachment is marked ended."""
    db = str(tmp_path / "store.sqlite")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.settimeout(DEADLINE)
        port = listener.getsockname()[1]
        attach = Attach("attach", tmp_path, db, f"127.0.0.1:{port}", "--interval", "0.2s")
        try:
            conn, _ = listener.accept()  # the poller's first request, which will not be answered
            with conn:
                conn.settimeout(DEADLINE)
                request = b""
                while b"\r\n\r\n" not in request:
                    chunk = conn.recv(4096)
                    assert chunk, "the poller closed its connection"
                    request += chunk
                assert request.startswith(b"GET /v1/stats ")
                wait_for(lambda: "Ctrl-C to stop" in attach.stderr(), "attach to start", (attach,))
                assert attach.interrupt() == 0, attach.stderr()
        finally:
            attach.kill()
    assert "Traceback" not in attach.stderr()
    ((ended_at,),) = query(db, "SELECT ended_at FROM live_attachments")
    assert ended_at is not None, "the attachment was never marked ended"


def test_an_oom_that_kills_the_job_arrives_in_the_store(tmp_path):
    db = str(tmp_path / "store.sqlite")
    # --linger 60: however slowly the poller comes, the dying job waits for it (and goes as soon as it has)
    job = Job("dying", tmp_path, *LOOP, "--oom-after", "20", "--oom-mib", "512", run_args=("--linger", "60"))
    attach = None
    try:
        job.ready()
        attach = Attach("attach", tmp_path, db, f"127.0.0.1:{job.port}", "--interval", "0.2s",
                        "--snapshot-every", "1h")
        oom = wait_for(lambda: events(db, "oom"), "the OOM snapshot in the store", (attach,))
        # the agent lingered until the poller fetched the OOM snapshot, then the job died of its OOM
        assert job.wait() == 1
        assert "Traceback (most recent call last)" in job.stderr() and "OutOfMemoryError" in job.stderr(), job.stderr()
        assert "oom" in job.stdout().splitlines()
        wait_for(lambda: events(db, "disconnected"), "the poller to see the job gone", (attach,))
        assert attach.interrupt() == 0, attach.stderr()
    finally:
        for p in (attach, job):
            if p is not None:
                p.kill()
    ((_, aid, kind, detail, sid),) = oom
    assert sid is not None
    assert json.loads(detail) == {"0": 1}
    assert f"1 OOM snapshots ({sid})" in attach.stderr()
    reader = Library.open(db)
    try:
        row = {r.id: r for r in reader.list_snapshots()}[sid]
        assert f"pid {job.pid} oom" in row.name
        analysis = reader.load_analysis(sid)
        assert report_of_analysis(analysis).devices[0].trace_actions["oom"] == 1
        (diag,) = diagnose(analysis, simulate=False)
        assert diag.verdict in VERDICTS and diag.requested_bytes == 512 * MiB
        assert diag.verdict == "exhaustion"  # 512 MiB asked of a 256 MiB device
        assert max(reader.live.samples(aid)["ooms"]) == 1
    finally:
        reader.close()


# -- torchrun ----------------------------------------------------------------------------------------------

def test_under_torchrun_each_rank_serves_on_port_plus_local_rank(tmp_path):
    assert os.path.exists(TORCHRUN), "torch installs torchrun beside python"
    port = free_port(pair=True)
    run = Proc("torchrun", [TORCHRUN, "--standalone", "--nproc-per-node", "2", "--no-python", FRAGVIZ, "run",
                            "--port", str(port), "--device-memory", "256MiB", "--", "python", TRAIN_LOOP, *LOOP],
               tmp_path)
    pids: list[int] = []
    try:
        for local in (0, 1):
            wait_for(lambda: answers(port + local), f"rank {local} on port {port + local}", (run,))
        wait_for(lambda: run.stdout().count("step ") >= 2, "both ranks to import torch and train", (run,))
        stats = [json.loads(get(port + local, "/v1/stats")[1]) for local in (0, 1)]
        pids = [s["pid"] for s in stats]
        for local, s in enumerate(stats):
            assert (s["rank"], s["local_rank"], s["world_size"]) == (local, local, 2)
            assert s["simulated"] is True and s["devices"][0]["device_total_bytes"] == DEVICE
        assert pids[0] != pids[1]
        metrics = get(port + 1, "/metrics")[1].decode()
        assert f'fragviz_reserved_bytes{{device="0",pid="{pids[1]}",rank="1"}}' in metrics
        pattern = re.compile(r"fragviz: live agent for rank (\d+) \(local rank (\d+)\), pid (\d+) .* on (\S+)$",
                             re.MULTILINE)
        found = wait_for(lambda: len(pattern.findall(run.stderr())) == 2 and pattern.findall(run.stderr()),
                         "both ranks to say where they serve", (run,))
        assert sorted(found) == [("0", "0", str(pids[0]), f"http://127.0.0.1:{port}"),
                                 ("1", "1", str(pids[1]), f"http://127.0.0.1:{port + 1}")]
        wait_for(lambda: run.stdout().splitlines().count("step 3") == 2, "both ranks to train", (run,))
    finally:
        if run.proc.poll() is None:
            run.proc.send_signal(signal.SIGTERM)  # torchrun passes it on to its ranks
            try:
                run.proc.wait(60)
            except subprocess.TimeoutExpired:
                run.proc.kill()
                run.proc.wait()
        for pid in pids:  # a rank torchrun failed to stop
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if TRAIN_LOOP.encode() in fh.read():  # still a rank, not a process that took its pid since
                        os.kill(pid, signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError):
                pass


# -- the store: version 1 -> 2 ------------------------------------------------------------------------------

def test_a_version_1_store_is_migrated_and_keeps_its_snapshot(tmp_path):
    copy = str(tmp_path / "v1.sqlite")
    shutil.copyfile(STORE_V1, copy)
    before = sqlite3.connect(copy)
    assert before.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("1",)
    assert before.execute("SELECT count(*) FROM sqlite_master WHERE name LIKE 'live_%'").fetchone() == (0,)
    before.close()

    open_store(copy).close()
    conn = sqlite3.connect(copy)
    try:
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (str(SCHEMA_VERSION),)
        assert SCHEMA_VERSION == 5
        # its figures are recomputed by the first library that opens it (the report below)
        assert conn.execute("SELECT snapshot_id FROM stale_figures").fetchall() == [(1,)]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"live_attachments", "live_samples", "live_events", "live_state"} <= tables
        assert conn.execute("SELECT id, name FROM snapshots").fetchall() == [(1, "cs336silmont_small.pickle")]
        assert conn.execute("SELECT count(*) FROM live_samples").fetchone() == (0,)
    finally:
        conn.close()
    open_store(copy).close()  # opening a migrated store again changes nothing
    out = cli("report", "1", "--db", copy, "--json")
    assert out.returncode == 0, out.stderr
    expected = report_of_analysis(analyze(load_snapshot(SMALL, name="cs336silmont_small.pickle")))
    assert json.loads(out.stdout) == json.loads(json.dumps(expected.as_dict()))
    reader = Library.open(copy)
    try:
        assert reader.live.attachments() == []
        assert reader.records.stale_snapshots() == []
    finally:
        reader.close()


def test_a_store_from_a_newer_fragviz_is_refused_with_one_line(tmp_path):
    copy = str(tmp_path / "v99.sqlite")
    shutil.copyfile(STORE_V1, copy)
    raw = sqlite3.connect(copy)
    raw.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    raw.commit()
    raw.close()
    for readonly in (False, True):
        with pytest.raises(StoreError) as err:
            open_store(copy, readonly=readonly).close()
        message = str(err.value)
        assert "\n" not in message and "99" in message and copy in message
    out = cli("report", "1", "--db", copy, "--json")
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and "99" in out.stderr
    check = sqlite3.connect(copy)
    try:
        assert check.execute("PRAGMA journal_mode").fetchone() == ("delete",), "a refused store is left as it was"
        assert check.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("99",)
        assert check.execute("SELECT count(*) FROM sqlite_master WHERE name LIKE 'live_%'").fetchone() == (0,)
    finally:
        check.close()


# -- the jobs several tests share ------------------------------------------------------------------------

@pytest.fixture(scope="module")


def jobs(tmp_path_factory):
    """A static job holding 8 tensors of 1 MiB, a training loop that OOMs (and recovers) on a trigger file,
    and a static job behind a token; started together."""
    tmp = tmp_path_factory.mktemp("jobs")
    trigger = str(tmp / "oom-trigger")
    started: list[Job] = []
    try:
        hold = Job("hold", tmp, "--hold")
        started.append(hold)
        loop = Job("loop", tmp, *LOOP, "--trigger", trigger, "--recover", "--oom-mib", "512")
        started.append(loop)
        secured = Job("secured", tmp, "--hold", run_args=("--token", TOKEN))
        started.append(secured)
        hold.ready("holding")
        loop.ready("step ")
        wait_for(lambda: answers(secured.port), "the token agent", (secured,))
        wait_for(lambda: "holding" in secured.stdout(), "the token job to hold its tensors", (secured,))
        yield SimpleNamespace(hold=hold, loop=loop, secured=secured, trigger=trigger, tmp=tmp)
    finally:
        for job in started:
            job.kill()


# -- /v1/stats -------------------------------------------------------------------------------------------

def check_stats_shape(stats: dict[str, Any], pid: int) -> dict[str, Any]:
    assert set(stats) == {"time", "pid", "process_start_time", "simulated", "rank", "local_rank", "world_size",
                          "devices", "agent"}
    assert 0 < time.time() - stats["process_start_time"] < 24 * 3600
    assert type(stats["time"]) is float and abs(stats["time"] - time.time()) < 24 * 3600
    assert type(stats["pid"]) is int and stats["pid"] == pid
    assert stats["simulated"] is True
    assert stats["rank"] is None and stats["local_rank"] is None and stats["world_size"] is None
    assert set(stats["agent"]) == {"polls", "cpu_seconds", "errors", "snapshots", "snapshot_lock_seconds",
                                   "state_walk_seconds", "torch_imported", "port", "requested_port",
                                   "server_cpu_seconds"}
    assert stats["agent"]["torch_imported"] is True and stats["agent"]["port"] == stats["agent"]["requested_port"]
    assert type(stats["agent"]["server_cpu_seconds"]) is float and stats["agent"]["server_cpu_seconds"] > 0
    assert type(stats["agent"]["snapshots"]) is int and stats["agent"]["snapshot_lock_seconds"] >= 0
    assert type(stats["agent"]["polls"]) is int and stats["agent"]["polls"] >= 1
    assert type(stats["agent"]["cpu_seconds"]) is float and stats["agent"]["cpu_seconds"] >= 0
    assert type(stats["agent"]["errors"]) is int
    assert len(stats["devices"]) == 1
    d = stats["devices"][0]
    assert list(d) == list(STATS_DEVICE_KEYS)
    assert d["device"] == 0
    for key in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes", "inactive_split_bytes",
                "num_alloc_retries", "num_ooms", "device_total_bytes", "device_free_bytes", "largest_free_block"):
        assert type(d[key]) is int and d[key] >= 0, key
    assert d["nvml_used_bytes"] is None and d["processes"] == []
    assert type(d["fragmentation"]) is float and 0.0 <= d["fragmentation"] <= 1.0
    assert d["device_total_bytes"] == DEVICE
    assert d["reserved_bytes"] >= d["active_bytes"] >= d["allocated_bytes"]
    assert d["requested_bytes"] <= d["active_bytes"]
    assert d["device_free_bytes"] == d["device_total_bytes"] - d["reserved_bytes"]
    cached_free = d["reserved_bytes"] - d["active_bytes"]
    assert d["largest_free_block"] <= cached_free and d["inactive_split_bytes"] <= cached_free
    return d


def test_stats_object_has_the_documented_shape_and_consistent_figures(jobs):
    for job in (jobs.hold, jobs.loop):
        first = job.stats()
        check_stats_shape(first, job.pid)
        second = job.stats()
        check_stats_shape(second, job.pid)
        assert second["agent"]["polls"] > first["agent"]["polls"]
        assert second["time"] >= first["time"]
    status, body, headers = jobs.hold.get("/v1/stats")
    assert headers["Content-Type"] == "application/json" and headers["Cache-Control"] == "no-store"


def test_a_static_job_agrees_with_its_own_snapshot_and_with_what_it_holds(jobs):
    hold = jobs.hold
    d = check_stats_shape(hold.stats(), hold.pid)
    # what the script holds, worked out by hand: 8 float32 tensors of 2**18 elements = 8 MiB
    assert d["allocated_bytes"] >= 8 * MiB and d["requested_bytes"] >= 8 * MiB
    status, blob, headers = hold.get("/v1/snapshot?trace=0")
    assert status == 200 and headers["Content-Type"] == "application/octet-stream"
    report = report_of(blob)
    (dev,) = report.devices
    assert dev.device == 0
    assert (dev.reserved_bytes, dev.allocated_bytes, dev.largest_free_block) == \
        (d["reserved_bytes"], d["allocated_bytes"], d["largest_free_block"])
    assert dev.requested_bytes == d["requested_bytes"]
    assert dev.trace_events == 0  # trace=0: the state without its history
    assert any("simulated" in w for w in report.warnings)
    # a static job: the figures do not move between requests
    again = hold.stats()["devices"][0]
    assert {k: again[k] for k in STATS_DEVICE_KEYS} == {k: d[k] for k in STATS_DEVICE_KEYS}
    # /v1/state: the same segments, compact
    status, body, _ = hold.get("/v1/state")
    state = json.loads(body)
    assert status == 200 and state["pid"] == hold.pid
    assert sum(s["total_size"] for s in state["segments"]) == d["reserved_bytes"]
    held = [b for s in state["segments"] for b in s["blocks"] if b[3] == "active_allocated"]
    assert sum(b[1] for b in held) == d["allocated_bytes"]
    assert sum(1 for b in held if b[1] == MiB) >= 8


def test_snapshot_with_trace_is_read_by_fragviz_ingest(jobs, tmp_path):
    loop = jobs.loop
    start = loop.steps()
    wait_for(lambda: loop.steps() >= start + 3, "three more training steps", (loop,))
    status, blob, _ = loop.get("/v1/snapshot?trace=1")
    assert status == 200
    path = tmp_path / "live.pickle"
    path.write_bytes(blob)
    db = str(tmp_path / "store.sqlite")
    out = cli("ingest", str(path), "--db", db)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{path}: ingested as snapshot 1"
    rep = cli("report", "1", "--db", db, "--json")
    assert rep.returncode == 0, rep.stderr
    (dev,) = json.loads(rep.stdout)["devices"]
    actions = dev["trace_actions"]
    assert dev["trace_events"] > 0 and dev["trace_events"] == sum(actions.values())
    assert actions.get("alloc", 0) > 0 and actions.get("free_completed", 0) > 0
    assert actions.get("segment_alloc", 0) >= 1
    assert dev["peak_requested_bytes"] >= dev["requested_bytes"] > 0
    text = cli("report", "1", "--db", db)
    assert text.returncode == 0
    assert re.search(r"trace\s+\d+ events \(alloc \d+", text.stdout), text.stdout
    assert "train_loop.py" in text.stdout  # the trace's stacks name the job's own lines


def test_oom_endpoint_is_404_before_an_oom_and_the_oom_snapshot_after(jobs, tmp_path):
    loop = jobs.loop
    status, body, _ = loop.get("/v1/oom")
    assert status == 404 and "error" in json.loads(body)
    assert loop.stats()["devices"][0]["num_ooms"] == 0
    open(jobs.trigger, "w").close()
    wait_for(lambda: loop.stats()["devices"][0]["num_ooms"] == 1, "the simulated OOM", (loop,))
    status, blob, _ = loop.get("/v1/oom")
    assert status == 200
    raw = pickle.loads(blob)  # our own job's snapshot, in PyTorch's format
    ooms = [e for e in raw["device_traces"][0] if e["action"] == "oom"]
    assert len(ooms) == 1 and ooms[0]["size"] == 512 * MiB
    assert report_of(blob).devices[0].trace_actions["oom"] == 1
    path = tmp_path / "oom.pickle"
    path.write_bytes(blob)
    doc = cli("doctor", str(path), "--json")
    assert doc.returncode == 0, doc.stderr
    (oom,) = json.loads(doc.stdout)["ooms"]
    assert oom["verdict"] in VERDICTS
    # worked out by hand: 512 MiB asked of a 256 MiB device is more than the device has: exhaustion
    assert oom["requested_bytes"] == 512 * MiB and oom["verdict"] == "exhaustion"
    # --recover: the job trains on, and the agent keeps the OOM snapshot
    wait_for(lambda: "oom" in loop.stdout().splitlines(), "the job to report the OOM", (loop,))
    after = loop.steps()
    wait_for(lambda: loop.steps() > after, "a step after the OOM", (loop,))
    assert loop.get("/v1/oom")[1] == blob


def test_metrics_are_prometheus_text_with_the_stats_figures(jobs):
    hold = jobs.hold
    stats = hold.stats()["devices"][0]
    status, body, headers = hold.get("/metrics")
    assert status == 200 and headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    values = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            values[(s.name, tuple(sorted(s.labels.items())))] = s.value
    dev = (("device", "0"), ("pid", str(hold.pid)))  # no rank outside a distributed launch; no GPU on a CPU run
    assert values[("fragviz_reserved_bytes", dev)] == stats["reserved_bytes"]
    assert values[("fragviz_allocated_bytes", dev)] == stats["allocated_bytes"]
    assert values[("fragviz_device_total_bytes", dev)] == DEVICE
    assert values[("fragviz_ooms_total", dev)] == 0
    assert values[("fragviz_simulated", (("pid", str(hold.pid)),))] == 1
    assert not any(name == "fragviz_nvml_used_bytes" for name, _ in values)


def test_unknown_paths_and_foreign_host_names_are_refused(jobs):
    status, body, _ = jobs.hold.get("/v2/nothing")
    assert status == 404 and "/v1/stats" in json.loads(body)["endpoints"]
    # a page's script reaching a loopback agent under another name (DNS rebinding) gets nothing
    status, body, _ = raw_get(jobs.hold.port, "/v1/stats", {"Host": "evil.example:80"})
    assert status == 403 and b"devices" not in body
    assert raw_get(jobs.hold.port, "/v1/stats", {"Host": f"localhost:{jobs.hold.port}"})[0] == 200


# -- tokens ----------------------------------------------------------------------------------------------

def test_a_token_agent_answers_only_the_right_bearer_token(jobs):
    port = jobs.secured.port
    for path in ("/v1/stats", "/metrics", "/v1/snapshot?trace=0", "/v1/oom", "/v1/state"):
        status, body, headers = raw_get(port, path, {})
        assert status == 401, path
        assert headers["WWW-Authenticate"].startswith("Bearer") and b"devices" not in body
    for header in ("Bearer wrong", f"Bearer {TOKEN}x", TOKEN, f"Basic {TOKEN}", f"Bearer {TOKEN[:-1]}"):
        assert raw_get(port, "/v1/stats", {"Authorization": header})[0] == 401, header
    status, body, _ = raw_get(port, "/v1/stats", {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200
    check_stats_shape(json.loads(body), jobs.secured.pid)
    assert raw_get(port, "/metrics", {"Authorization": f"bearer {TOKEN}"})[0] == 200


def test_attach_with_a_wrong_token_exits_2_and_says_it_was_refused(jobs, tmp_path):
    db = str(tmp_path / "store.sqlite")
    for token_args in (("--token", "wrong"), ()):
        out = cli("attach", f"127.0.0.1:{jobs.secured.port}", *token_args, "--db", db, "--interval", "0.2s",
                  "--duration", "60s", timeout=120)
        assert out.returncode == 2, out.stderr
        assert "refused" in out.stderr
    assert [e[2] for e in events(db)] == ["refused", "refused"]
    assert query(db, "SELECT count(*) FROM live_samples") == [(0,)]
    ok = cli("attach", f"127.0.0.1:{jobs.secured.port}", "--token", TOKEN, "--db", db, "--interval", "0.2s",
             "--duration", "3s", timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert query(db, "SELECT DISTINCT pid FROM live_samples") == [(jobs.secured.pid,)]


# -- the agent never disturbs the job --------------------------------------------------------------------

def test_stalled_clients_do_not_stop_other_requests_or_the_job(jobs):
    loop = jobs.loop
    stalled = []
    try:
        for i in range(12):  # more than the agent serves at once
            s = socket.create_connection(("127.0.0.1", loop.port), timeout=30)
            if i % 2:
                s.sendall(b"GET /v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # a request that never ends
            stalled.append(s)
        before = loop.steps()
        for _ in range(5):
            check_stats_shape(loop.stats(), loop.pid)
            assert loop.get("/metrics")[0] == 200
        wait_for(lambda: loop.steps() >= before + 5, "the job to keep training", (loop,))
    finally:
        for s in stalled:
            s.close()


# -- fragviz attach ----------------------------------------------------------------------------------------

def test_attach_records_samples_and_periodic_snapshots(jobs, tmp_path):
    loop = jobs.loop
    db = str(tmp_path / "store.sqlite")
    out = cli("attach", f"127.0.0.1:{loop.port}", "--db", db, "--interval", "0.2s", "--snapshot-every", "1s",
              "--duration", "5s", timeout=300)
    assert out.returncode == 0, out.stderr
    summary = [line for line in out.stderr.splitlines() if re.search(r"\d+ polls, \d+ snapshots", line)]
    assert len(summary) == 1 and f"127.0.0.1:{loop.port}" in summary[0]

    n_rows = query(db, "SELECT count(*) FROM live_samples")[0][0]
    assert n_rows >= 1
    assert query(db, "SELECT DISTINCT pid, device, gap FROM live_samples") == [(loop.pid, 0, 0)]

    reader = Library.open(db)
    try:
        (att,) = reader.live.attachments()
        assert att.target == f"127.0.0.1:{loop.port}" and att.pid == loop.pid and att.simulated is True
        assert att.rank is None and att.owner == "cli" and att.ended_at is not None and not att.is_live()
        samples = reader.live.samples(att.id)
        assert len(samples["id"]) == n_rows
        assert set(samples["pid"]) == {loop.pid} and set(samples["gap"]) == {0}
        assert samples["t"] == sorted(samples["t"])
        for reserved, active, allocated, total, free, frag in zip(
                samples["reserved"], samples["active"], samples["allocated"], samples["device_total"],
                samples["device_free"], samples["fragmentation"]):
            assert reserved >= active >= allocated and total == DEVICE and free == total - reserved
            assert 0.0 <= frag <= 1.0
        assert set(samples["nvml_used"]) == {None}
        snap_events = reader.live.events(att.id, kind="snapshot")
        assert len(snap_events) >= 1, out.stderr
        assert f"{len(snap_events)} snapshots" in summary[0]
        listed = {row.id: row for row in reader.list_snapshots()}
        for ev in snap_events:
            assert ev.snapshot_id in listed
            assert f"pid {loop.pid}" in listed[ev.snapshot_id].name
            rep = report_of_analysis(reader.load_analysis(ev.snapshot_id))
            assert rep.devices[0].trace_events > 0
            assert any("simulated" in w for w in rep.warnings)
        t, segments = reader.live.latest_state(att.id, 0)
        assert segments and all(seg.blocks for seg in segments) and t <= time.time()
    finally:
        reader.close()


def test_one_attach_records_several_targets(jobs, tmp_path):
    db = str(tmp_path / "store.sqlite")
    hold, loop = jobs.hold, jobs.loop
    out = cli("attach", f"127.0.0.1:{hold.port}", f"localhost:{loop.port}", "--db", db, "--interval", "0.2s",
              "--snapshot-every", "1h", "--duration", "3s", timeout=300)
    assert out.returncode == 0, out.stderr
    reader = Library.open(db)
    try:
        atts = {a.target: a for a in reader.live.attachments()}
        assert set(atts) == {f"127.0.0.1:{hold.port}", f"localhost:{loop.port}"}
        assert atts[f"127.0.0.1:{hold.port}"].pid == hold.pid and atts[f"localhost:{loop.port}"].pid == loop.pid
        for att in atts.values():
            s = reader.live.samples(att.id)
            assert len(s["id"]) >= 1 and set(s["pid"]) == {att.pid}
        held = reader.live.samples(atts[f"127.0.0.1:{hold.port}"].id)
        assert set(held["reserved"]) == {hold.stats()["devices"][0]["reserved_bytes"]}
    finally:
        reader.close()
    assert sum(1 for line in out.stderr.splitlines() if " polls, " in line) == 2
