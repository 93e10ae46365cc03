"""Background jobs that belong to one app (the what-if page's simulations): a few at a time, and a finished
job's result kept until shortly after it is read, or for a while if nobody reads it, so that nothing piles up
in a long-running server.

A page polls for its job; a poll's answer can be dropped by the browser when the next poll overtakes it on a
slow server, so a result stays readable for READ_GRACE after its first read instead of vanishing at once."""
from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from fragviz.base.errors import FragvizError

MAX_RUNNING = 2
KEEP_SECONDS = 600.0
READ_GRACE = 30.0


class Busy(FragvizError):
    """As many jobs as the app runs at once are running."""


@dataclass
class Job:
    progress: float = 0.0
    done: bool = False
    error: str | None = None
    result: Any = None
    finished_at: float | None = None
    read_at: float | None = None

    def set_progress(self, share: float) -> None:
        self.progress = min(1.0, max(0.0, share))


class JobRunner:
    """Runs `work(job)` in a thread per job: at most `max_running` at once; results dropped `read_grace` after
    their first read, or `keep_seconds` after they finished."""

    def __init__(self, max_running: int = MAX_RUNNING, keep_seconds: float = KEEP_SECONDS,
                 clock: Callable[[], float] = time.monotonic, read_grace: float = READ_GRACE) -> None:
        self.max_running, self.keep_seconds, self.clock = max_running, keep_seconds, clock
        self.read_grace = read_grace
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def start(self, work: Callable[[Job], Any], name: str = "job") -> str:
        with self._lock:
            self._drop_stale()
            if sum(not j.done for j in self._jobs.values()) >= self.max_running:
                raise Busy(f"{self.max_running} simulations are running already: try again when one has finished")
            job_id, job = uuid.uuid4().hex, Job()
            self._jobs[job_id] = job
        threading.Thread(target=self._run, args=(job, work), daemon=True, name=f"{name}-{job_id[:8]}").start()
        return job_id

    def peek(self, job_id: str) -> Job | None:
        """The job, still held (running, or finished and not yet taken); None if unknown or dropped."""
        with self._lock:
            self._drop_stale()
            return self._jobs.get(job_id)

    def read(self, job_id: str) -> Job | None:
        """The job as `peek` gives it; a finished one counts as read from the first call (see READ_GRACE)."""
        with self._lock:
            self._drop_stale()
            job = self._jobs.get(job_id)
            if job is not None and job.done and job.read_at is None:
                job.read_at = self.clock()
            return job

    def held(self) -> int:
        with self._lock:
            return len(self._jobs)

    def _run(self, job: Job, work: Callable[[Job], Any]) -> None:
        try:
            job.result = work(job)
        except FragvizError as exc:
            job.error = str(exc)
        except Exception as exc:  # noqa: BLE001  shown as a message, never a traceback
            job.error = f"the simulation failed ({type(exc).__name__}: {exc})"
        finally:
            job.finished_at = self.clock()
            job.done = True

    def _drop_stale(self) -> None:
        now = self.clock()
        stale = [k for k, j in self._jobs.items() if j.done and j.finished_at is not None and (
            now - j.finished_at > self.keep_seconds or (j.read_at is not None and now - j.read_at > self.read_grace))]
        for k in stale:
            del self._jobs[k]
