"""An upload ingested in a child process (`python -m fragviz.ui.http.ingest_child SPEC`), both ends.

The server (`ingest_in_child`) runs `fragviz ingest` in a child because a single-threaded process caps its
own address space while it unpickles (fragviz.snapshot.loader), which a threaded server cannot. The child
must not outlive the upload it ingests:
- the upload's client goes away: the server sees its socket closed, and stops the child (SIGTERM, then
  SIGKILL after KILL_AFTER seconds);
- the server stops in order (SIGTERM, SIGINT): it stops every child it runs (`stop_all`);
- the server is killed (SIGKILL included): on Linux the child asked the kernel for SIGTERM when the server's
  thread that started it ends (PR_SET_PDEATHSIG), and checked the server was still there after asking.
On SIGTERM, SIGINT or SIGHUP the child removes the upload's temporary files (and the server's spool folder
where the server is gone and the folder is empty) and exits at once, committing nothing. The name travels
inside one JSON argument and reaches `fragviz ingest` as `--name=NAME`, so no name is ever read as an option.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator

from fragviz.base.errors import FragvizError

POLL = 0.2  # seconds between looks at the client while the child works
KILL_AFTER = 5.0  # seconds a child is given to end on SIGTERM before SIGKILL
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ChildIngest:
    """One upload to ingest: the file received, the name to store it under, the progress file to write (or
    None), the spool folder they are in (or None), and the server's process id."""

    file: str
    name: str
    progress_file: str | None = None
    spool: str | None = None
    parent: int = 0

    def command(self) -> list[str]:
        return [sys.executable, "-m", "fragviz.ui.http.ingest_child", json.dumps(asdict(self))]

    def ingest_argv(self) -> list[str]:
        """`fragviz ingest`'s arguments: every value glued to its option, the file after `--`."""
        follow = [f"--progress-file={self.progress_file}"] if self.progress_file else []
        return ["ingest", f"--name={self.name}", "--json", "--no-progress", *follow, "--", self.file]

    def temporaries(self) -> list[str]:
        return [p for p in (self.file, self.progress_file) if p]


# -- the server's end -------------------------------------------------------------------------------------

class Abandoned(FragvizError):
    """The upload's client went away while its file was ingested: the child was stopped."""


class Stopping(FragvizError):
    """The server is stopping: the child was stopped before it gave a result."""


_running: set[subprocess.Popen] = set()
_running_lock = threading.Lock()
_stopping = threading.Event()


def run_child(job: ChildIngest, env: dict[str, str], abandoned: Callable[[], bool]) -> tuple[int, str, str]:
    """Run the child to its end: (exit status, stdout, stderr); Abandoned (the child stopped) as soon as
    `abandoned()` says the client is gone, Stopping where the server stopped it."""
    proc = subprocess.Popen(job.command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    with _tracked(proc):
        while True:
            try:
                out, err = proc.communicate(timeout=POLL)
                if _stopping.is_set() and not out.strip():
                    raise Stopping()
                return proc.returncode, out, err
            except subprocess.TimeoutExpired:
                if abandoned():
                    raise Abandoned() from None


@contextmanager
def _tracked(proc: subprocess.Popen) -> Iterator[None]:
    with _running_lock:
        _running.add(proc)
    try:
        yield
    finally:
        stop(proc)
        with _running_lock:
            _running.discard(proc)


def stop(proc: subprocess.Popen) -> None:
    """End a child that still runs: SIGTERM (it removes its temporaries), SIGKILL if it lingers."""
    if proc.poll() is None:
        with suppress(OSError):
            proc.terminate()
        try:
            proc.wait(KILL_AFTER)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            with suppress(OSError):
                stream.close()


def stop_all() -> None:
    """End every child this process runs (the server is stopping)."""
    _stopping.set()
    with _running_lock:
        procs = list(_running)
    for proc in procs:
        with suppress(OSError):
            proc.terminate()
    for proc in procs:
        stop(proc)


# -- the child's end --------------------------------------------------------------------------------------

def main(argv: list[str]) -> int:
    job = ChildIngest(**json.loads(argv[0]))
    _end_on_signals(job)
    _end_with_parent(job)
    from fragviz.cli import main as cli_main

    return cli_main(job.ingest_argv())


def _end_on_signals(job: ChildIngest) -> None:
    def end(signum: int, _frame: Any) -> None:
        _clean_up(job)
        os._exit(128 + signum)  # at once: the store's transaction is rolled back by the engine

    for sig in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            signal.signal(sig, end)


def _end_with_parent(job: ChildIngest) -> None:
    """Ask for SIGTERM when the server's thread that started this child ends (Linux); end now if it has."""
    if sys.platform.startswith("linux"):
        with suppress(OSError, AttributeError):
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if job.parent and os.getppid() != job.parent:  # the server was gone before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _clean_up(job: ChildIngest) -> None:
    for path in job.temporaries():
        with suppress(OSError):
            os.unlink(path)
    if job.spool and job.parent and os.getppid() != job.parent:
        with suppress(OSError):
            os.rmdir(job.spool)  # only when empty: the next server's sweep takes the rest


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
