"""Run fuzz inputs through everything a user meets, in worker processes with bounded memory and time.

For every input the promise is checked:
  (a) no code ran: the canary folder stays empty;
  (b) no crash: only FragvizError leaves load, parse, replay, report or doctor; ingest returns a result
      whose error is one line of at most MAX_MESSAGE characters and never "a fragviz bug";
  (c) bounded time and memory: each worker runs under RLIMIT_AS and the parent kills it at the deadline
      (a hang); a MemoryError anywhere is a failure (the input made fragviz use the whole allowance);
  (d) a failed ingest leaves the store byte for byte as it was (the file, its -wal and -shm).

The parent talks to each worker over its stdin/stdout, one JSON line per input; the input itself goes
through a file. A worker that hangs or dies is replaced, and its faulthandler dump tells where it was.
"""
from __future__ import annotations

import hashlib
import json
import os
import queue
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from .case import Case

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS_DIR)
MAX_MESSAGE = 400
MEMORY_LIMIT = 3 << 30
DEADLINE_S = 20.0
BASELINE_SNAPSHOT = "diffusion_tiny.pickle"
MEMORY_WORDS = ("memory available", "more memory")
# RLIMIT_AS makes an allocation past the limit fail at once (and fragviz may then recover); one that fits
# but takes most of it is as much a failure: an input may not make a worker's peak RSS pass this.
PEAK_RSS_MB = 2048


# Results ------------------------------------------------------------------------------------------
@dataclass
class Failure:
    kind: str  # code-ran, crash, bug-message, bad-message, memory, hang, worker-died, store-changed, disagree
    step: str  # ingest, load, analyze, report, doctor, worker
    exc: str = ""
    where: str = ""
    message: str = ""

    def signature(self) -> tuple[str, str, str, str]:
        where = self.where.split(":")[0] + ":" + self.where.split(" in ")[-1] if " in " in self.where else self.where
        return self.kind, self.step, self.exc, where

    def describe(self) -> str:
        text = f"{self.kind} in {self.step}"
        if self.exc:
            text += f": {self.exc}"
        if self.where:
            text += f" at {self.where}"
        if self.message:
            text += f" -- {self.message[:240]!r}"
        return text


@dataclass
class Outcome:
    case: Case
    failures: list[Failure] = field(default_factory=list)
    status: str = ""  # ingested / unchanged / error / hang / died
    seconds: float = 0.0
    peak_mb: float = 0.0


# The worker (runs in the child) -------------------------------------------------------------------
def _where(exc: BaseException) -> str:
    """The deepest frame of fragviz's own code in the traceback (else the deepest frame)."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f"{os.sep}fragviz{os.sep}" in f.filename and f"{os.sep}tests{os.sep}" not in f.filename]
    f = (ours or frames or [None])[-1]
    if f is None:
        return ""
    name = f.filename.split(f"{os.sep}fragviz{os.sep}", 1)[-1] if ours else os.path.basename(f.filename)
    return f"{'fragviz/' if ours else ''}{name}:{f.lineno} in {f.name}"


def _short(text: Any) -> str:
    text = str(text)
    return text if len(text) <= 300 else text[:300] + f"... ({len(text)} chars)"


class _Checker:
    def __init__(self, baseline: str, work: str, mode: str) -> None:
        self.baseline, self.work, self.mode = baseline, work, mode
        self.failures: list[Failure] = []

    def fail(self, kind: str, step: str, exc: BaseException | None = None, message: str = "") -> None:
        if exc is not None:
            kind = "memory" if isinstance(exc, MemoryError) else kind
            self.failures.append(Failure(kind, step, type(exc).__name__, _where(exc), _short(exc)))
        else:
            self.failures.append(Failure(kind, step, "", "", _short(message)))

    def message(self, msg: Any, step: str, exc: BaseException | None = None) -> None:
        """An error message a user reads: one line, bounded, never a bug report, not about running out of memory."""
        text = str(msg)
        where = _where(exc) if exc is not None else ""
        name = type(exc).__name__ if exc is not None else ""
        if "fragviz bug" in text:
            self.failures.append(Failure("bug-message", step, _exc_in_message(text) or name, where, _short(text)))
        elif any(w in text for w in MEMORY_WORDS):
            self.failures.append(Failure("memory", step, name, where, _short(text)))
        elif "\n" in text or "\r" in text:
            self.failures.append(Failure("bad-message", step, name or "multi-line", where, _short(text)))
        elif len(text) > MAX_MESSAGE:
            self.failures.append(Failure("bad-message", step, name or "too-long", where, f"{len(text)} chars: " + _short(text)))

    # the store ----------------------------------------------------------------------------------
    def store_files(self) -> list[str]:
        db = os.path.join(self.work, "store.sqlite")
        return [db, db + "-wal", db + "-shm"]

    def store_hash(self) -> dict[str, str]:
        out = {}
        for path in self.store_files():
            if os.path.exists(path):
                with open(path, "rb") as fh:
                    out[os.path.basename(path)] = hashlib.sha256(fh.read()).hexdigest()
        return out

    def fresh_store(self):
        from fragviz.store.engine import open_store

        for path in self.store_files():
            if os.path.exists(path):
                os.remove(path)
        shutil.copyfile(self.baseline, self.store_files()[0])
        return open_store(self.store_files()[0])

    # the run ------------------------------------------------------------------------------------
    def run(self, data: bytes, name: str) -> str:
        if self.mode == "unsafe-pickle":  # the harness's self-test: a plain unpickler must trip the canary
            import io
            import pickle

            try:
                pickle.load(io.BytesIO(data))
            except Exception:
                pass
            return "unsafe"
        status = self.ingest(data, name)
        loaded = self.load_path(data, name)
        if status not in ("ingested", "unchanged") and loaded and not any(f.step == "ingest" for f in self.failures):
            self.failures.append(Failure("disagree", "ingest", "", "", _short(self.ingest_error)))
        if status in ("ingested", "unchanged") and loaded is False and not self.failures:
            self.failures.append(Failure("disagree", "load", "", "", "ingest stored what load refuses: "
                                         + _short(self.load_error)))
        return status

    def ingest(self, data: bytes, name: str) -> str:
        from fragviz.library.ingest import IngestResult, ingest_bytes

        self.ingest_error = ""
        conn = self.fresh_store()
        try:
            before = self.store_hash()
            try:
                res = ingest_bytes(conn, data, name)
            except BaseException as exc:  # noqa: BLE001 - ingest promises to return, never raise
                self.fail("crash", "ingest", exc)
                return "raised"
            if not isinstance(res, IngestResult):
                self.fail("crash", "ingest", message=f"ingest returned {type(res).__name__}, not an IngestResult")
                return "bad"
            if res.status in ("ingested", "unchanged"):
                return res.status
            self.ingest_error = res.error or ""
            if res.status == "error":
                self.message(res.error, "ingest")
            elif res.status == "internal_error" or "fragviz bug" in self.ingest_error:
                detail = getattr(res, "detail", None) or ""
                self.failures.append(Failure("bug-message", "ingest", _exc_in_message(self.ingest_error),
                                             _where_in_text(detail), _short(self.ingest_error)))
                if not detail:
                    self.trace_ingest_bug(data, name)
            else:  # store_error, busy: a private store that nothing else holds, so the input caused it
                self.failures.append(Failure(f"status-{res.status}", "ingest", "", "", _short(self.ingest_error)))
            if self.store_hash() != before:
                self.fail("store-changed", "ingest", message=f"after a failed ingest: {_short(res.error)}")
            return res.status
        finally:
            conn.close()

    def trace_ingest_bug(self, data: bytes, name: str) -> None:
        """Ingest swallows the exception behind "a fragviz bug": run its steps again to see where it arose."""
        from fragviz.replay.analysis import analyze
        from fragviz.base.errors import FragvizError
        from fragviz.snapshot.loader import content_hash, decode_bytes
        from fragviz.snapshot.parse import parse_snapshot
        from fragviz.store.writer import write_analysis

        conn = self.fresh_store()
        try:
            raw = decode_bytes(data, name)
            analysis = analyze(parse_snapshot(raw))
            write_analysis(conn, analysis, content_hash(data) + "-trace", raw.file_size)
        except FragvizError:
            pass
        except BaseException as exc:  # noqa: BLE001
            bug = next(f for f in self.failures if f.kind == "bug-message")
            bug.exc, bug.where = type(exc).__name__, _where(exc)
        finally:
            conn.close()

    def load_path(self, data: bytes, name: str) -> bool | None:
        from fragviz.replay.analysis import analyze
        from fragviz.doctor import diagnose
        from fragviz.base.errors import FragvizError
        from fragviz.doctor.report import report_of, report_text
        from fragviz.snapshot import load_snapshot_bytes

        self.load_error = ""
        state: dict[str, Any] = {}
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("load", lambda: state.__setitem__("snap", load_snapshot_bytes(data, name))),
            ("analyze", lambda: state.__setitem__("an", analyze(state["snap"]))),
            ("report", lambda: json.dumps(report_of(state["an"]).as_dict())),
            ("report", lambda: report_text(state["an"]).encode("utf-8")),  # what `fragviz report` prints
            ("doctor", lambda: json.dumps({"ooms": [o.as_dict() for o in diagnose(state["an"])]})),
        ]
        for step, fn in steps:
            try:
                fn()
            except FragvizError as exc:
                self.message(exc, step, exc)
                if step == "load":
                    self.load_error = str(exc)
                    return False
                return None
            except BaseException as exc:  # noqa: BLE001 - anything but FragvizError is the failure we look for
                self.fail("crash", step, exc)
                return None
        return True


def _where_in_text(tb: str) -> str:
    """The deepest fragviz frame of a formatted traceback."""
    lines = [line.replace(", line ", " line ").replace(", in ", " in ") for line in tb.splitlines()]
    frames = _python_stack("\n".join(reversed(lines)))  # a traceback lists the innermost frame last
    return frames[0]


def _exc_in_message(text: str) -> str:
    """The exception type ingest names in its "fragviz bug" message: `(OverflowError: ...)`."""
    start = text.find("(")
    if start < 0:
        return ""
    head = text[start + 1:].split(":", 1)[0]
    return head if head.isidentifier() else ""


def _peak_reset() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def _peak_mb() -> float:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def worker_main() -> None:
    """The worker's loop: one JSON request per line on stdin, one JSON answer per line on stdout."""
    import faulthandler
    import gc
    import resource

    limit = int(os.environ.get("FRAGVIZ_FUZZ_AS", MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    faulthandler.enable(sys.stderr)
    from tests.fuzz import canary  # noqa: F401 - the canary classes an unrestricted unpickler could find
    from tests.fuzz.hostile import register_extensions

    import fragviz.replay.analysis  # noqa: F401 - imported before the first input, not timed with it
    import fragviz.doctor  # noqa: F401
    import fragviz.library.ingest  # noqa: F401
    import fragviz.doctor.report  # noqa: F401

    register_extensions()
    canary_dir = canary.canary_dir()
    out = sys.stdout
    sys.stdout = sys.stderr  # anything fragviz prints must not corrupt the protocol
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        with open(req["path"], "rb") as fh:
            data = fh.read()
        checker = _Checker(req["baseline"], req["work"], req.get("mode", "full"))
        faulthandler.dump_traceback_later(max(1.0, req["deadline"] - 1.0), exit=False, file=sys.stderr)
        _peak_reset()
        t0 = time.monotonic()
        try:
            status = checker.run(data, req["name"])
        except BaseException as exc:  # noqa: BLE001 - the harness's own failure, reported as such
            checker.fail("crash", "harness", exc)
            status = "harness"
        finally:
            faulthandler.cancel_dump_traceback_later()
        seconds = time.monotonic() - t0
        peak = _peak_mb()
        if peak > PEAK_RSS_MB:
            checker.failures.append(Failure("memory", "any", "peak-rss", "",
                                            f"peak RSS {peak:.0f} MB for a {len(data):,}-byte input"))
        ran = os.listdir(canary_dir)
        if ran:
            checker.failures.append(Failure("code-ran", "any", "", "", f"canary files: {sorted(ran)}"))
            for f in ran:
                os.remove(os.path.join(canary_dir, f))
        del data
        gc.collect()
        out.write(json.dumps({"status": status, "seconds": seconds, "peak_mb": peak,
                              "failures": [f.__dict__ for f in checker.failures]}) + "\n")
        out.flush()


# The parent ---------------------------------------------------------------------------------------
class Worker:
    def __init__(self, pool: "Pool", index: int) -> None:
        self.pool, self.index = pool, index
        self.dir = os.path.join(pool.tmp, f"worker{index}")
        os.makedirs(self.dir, exist_ok=True)
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.errpath = os.path.join(self.dir, "stderr.txt")
        self.err = open(self.errpath, "ab")
        env = dict(os.environ, FRAGVIZ_FUZZ_AS=str(self.pool.memory_limit), OPENBLAS_NUM_THREADS="1",
                   OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0", PYTHONFAULTHANDLER="1")
        env["FRAGVIZ_FUZZ_CANARY_DIR"] = self.pool.canary_dir
        # the repository's root, where the worker finds the tests package (its cwd is its own folder)
        env["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in [env.get("PYTHONPATH")] if p])
        code = "from tests.fuzz.harness import worker_main; worker_main()"
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, env=env, cwd=self.dir, start_new_session=True)
        line = self._readline(120)
        if line is None or not line.startswith(b"{"):
            raise RuntimeError(f"fuzz worker did not start: {self._stderr_tail(0)}")

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            self.proc = None
            self.err.close()

    def _readline(self, timeout: float) -> bytes | None:
        assert self.proc is not None and self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        return self.proc.stdout.readline()

    def _stderr_tail(self, offset: int) -> str:
        try:
            with open(self.errpath, "rb") as fh:
                fh.seek(offset)
                return fh.read()[-6000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def run(self, case: Case, mode: str = "full") -> Outcome:
        if self.proc is None:
            self.start()
        assert self.proc is not None and self.proc.stdin is not None
        path = os.path.join(self.dir, "input.bin")
        with open(path, "wb") as fh:
            fh.write(case.data)
        offset = os.path.getsize(self.errpath)
        req = {"path": path, "name": _upload_name(case.name), "baseline": self.pool.baseline, "work": self.dir,
               "deadline": self.pool.deadline, "mode": mode}
        t0 = time.monotonic()
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
            line = self._readline(self.pool.deadline)
        except (BrokenPipeError, OSError):
            line = b""
        seconds = time.monotonic() - t0
        if line is None:
            self.stop()
            stack = _python_stack(self._stderr_tail(offset))
            return Outcome(case, [Failure("hang", "worker", "", stack[0], f"no answer in {self.pool.deadline:.0f} s; "
                                          + " <- ".join(stack[:6]))], "hang", seconds)
        if not line:
            code = self.proc.wait() if self.proc else None
            tail = self._stderr_tail(offset)
            self.stop()
            why = f"signal {-code}" if code is not None and code < 0 else f"exit {code}"
            stack = _python_stack(tail)
            return Outcome(case, [Failure("worker-died", "worker", why, stack[0] if stack else "",
                                          tail.strip().splitlines()[-1][:300] if tail.strip() else why)],
                           "died", seconds)
        answer = json.loads(line)
        return Outcome(case, [Failure(**f) for f in answer["failures"]], answer["status"], answer["seconds"],
                       answer["peak_mb"])


def _upload_name(case_name: str) -> str:
    """A plain file name: the fuzz is about contents (a name with CR or LF would make every message two lines)."""
    return re.sub(r"[^A-Za-z0-9._+=@-]+", "_", case_name)[:120] + ".pickle"


def _python_stack(dump: str) -> list[str]:
    """fragviz frames (innermost first) from a faulthandler dump: `File "...", line N in f`."""
    out = []
    for line in dump.splitlines():
        line = line.strip()
        if line.startswith("File ") and " line " in line:
            path = line.split('"')[1]
            lineno = line.split(" line ")[1].split()[0]
            func = line.rsplit(" in ", 1)[-1]
            short = path.split(f"{os.sep}fragviz{os.sep}", 1)
            label = f"fragviz/{short[1]}" if len(short) == 2 else os.path.basename(path)
            out.append(f"{label}:{lineno} in {func}")
    ours = [s for s in out if s.startswith("fragviz/")]
    return ours + [s for s in out if s not in ours] or [""]


class Pool:
    """Worker processes, a baseline store holding one real snapshot, a canary folder."""

    def __init__(self, real_dir: str, workers: int | None = None, deadline: float = DEADLINE_S,
                 memory_limit: int = MEMORY_LIMIT, tmp: str | None = None) -> None:
        self.deadline, self.memory_limit = deadline, memory_limit
        self.tmp = tmp or tempfile.mkdtemp(prefix="fragviz-fuzz-")
        self.canary_dir = os.path.join(self.tmp, "canary")
        os.makedirs(self.canary_dir, exist_ok=True)
        os.environ["FRAGVIZ_FUZZ_CANARY_DIR"] = self.canary_dir  # the hostile corpus aims at it
        self.baseline = self._baseline(real_dir)
        self.workers = [Worker(self, i) for i in range(workers or max(1, os.cpu_count() or 1))]
        self.lock = threading.Lock()

    def _baseline(self, real_dir: str) -> str:
        from fragviz.library.ingest import ingest_file
        from fragviz.store.engine import open_store

        path = os.path.join(self.tmp, "baseline.sqlite")
        conn = open_store(path)
        res = ingest_file(conn, os.path.join(real_dir, BASELINE_SNAPSHOT))
        conn.close()
        if res.status != "ingested" or os.path.exists(path + "-wal"):
            raise RuntimeError(f"the baseline store could not be made: {res}")
        return path

    def run(self, cases: Iterable[Case], on_result: Callable[[Outcome], None] | None = None,
            mode: str = "full", stop: Callable[[], bool] | None = None) -> list[Outcome]:
        """Run every case (in parallel over the workers); outcomes in completion order."""
        todo: queue.Queue = queue.Queue()
        feeder_done = threading.Event()
        results: list[Outcome] = []

        def feed() -> None:
            for case in cases:
                if stop and stop():
                    break
                todo.put(case)
            feeder_done.set()

        def drain(worker: Worker) -> None:
            while True:
                try:
                    case = todo.get(timeout=0.2)
                except queue.Empty:
                    if feeder_done.is_set() and todo.empty():
                        return
                    continue
                outcome = worker.run(case, mode)
                with self.lock:
                    results.append(outcome)
                    if on_result:
                        on_result(outcome)

        threads = [threading.Thread(target=feed, daemon=True)]
        threads += [threading.Thread(target=drain, args=(w,), daemon=True) for w in self.workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        leftover = os.listdir(self.canary_dir)
        if leftover:  # a worker checks after each input; this catches code that ran late (a thread, a fork)
            results.append(Outcome(Case("canary-after-run", b"", "check"),
                                   [Failure("code-ran", "any", "", "", f"canary files: {sorted(leftover)}")]))
        return results

    def close(self) -> None:
        for w in self.workers:
            w.stop()

    def cleanup(self) -> None:
        self.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


# Reading results ----------------------------------------------------------------------------------
def group(outcomes: Iterable[Outcome]) -> dict[tuple, list[tuple[Outcome, Failure]]]:
    """Failures by signature (kind, step, exception, file:function), smallest input first."""
    groups: dict[tuple, list[tuple[Outcome, Failure]]] = {}
    for o in outcomes:
        for f in o.failures:
            groups.setdefault(f.signature(), []).append((o, f))
    for items in groups.values():
        items.sort(key=lambda of: len(of[0].case.data))
    return dict(sorted(groups.items(), key=lambda kv: -len(kv[1])))


def summary(outcomes: list[Outcome], limit: int = 40) -> str:
    groups = group(outcomes)
    failed = sum(1 for o in outcomes if o.failures)
    lines = [f"{len(outcomes)} inputs, {failed} failed, {len(groups)} distinct failures"]
    for sig, items in list(groups.items())[:limit]:
        o, f = items[0]
        lines.append(f"- [{len(items)}x] {f.describe()}")
        lines.append(f"    smallest: {o.case.name} ({len(o.case.data)} bytes)")
    if len(groups) > limit:
        lines.append(f"... and {len(groups) - limit} more")
    return "\n".join(lines)
