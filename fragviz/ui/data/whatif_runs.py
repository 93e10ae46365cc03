"""The what-if page's simulations, run in the background by the app they belong to: a few at a time, and a
finished run's result kept until shortly after it is read, or for a while if nobody reads it, so that nothing
piles up in a long-running server. (Not fragviz.jobs, which is a training job's ranks.)

The page polls for its run; a poll's answer can be dropped by the browser when the next poll overtakes it on a
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
    """As many simulations as the app runs at once are running."""


@dataclass
class WhatIfRun:
    progress: float = 0.0
    done: bool = False
    error: str | None = None
    result: Any = None
    finished_at: float | None = None
    read_at: float | None = None

    def set_progress(self, share: float) -> None:
        self.progress = min(1.0, max(0.0, share))


class WhatIfRuns:
    """Runs `work(run)` in a thread per run: at most `max_running` at once; results dropped `read_grace` after
    their first read, or `keep_seconds` after they finished. Runs are named by a random id (the page keeps it)."""

    def __init__(self, max_running: int = MAX_RUNNING, keep_seconds: float = KEEP_SECONDS,
                 clock: Callable[[], float] = time.monotonic, read_grace: float = READ_GRACE) -> None:
        self.max_running, self.keep_seconds, self.clock = max_running, keep_seconds, clock
        self.read_grace = read_grace
        self._runs: dict[str, WhatIfRun] = {}
        self._lock = threading.Lock()

    def start(self, work: Callable[[WhatIfRun], Any], name: str = "whatif") -> str:
        with self._lock:
            self._drop_stale()
            if sum(not j.done for j in self._runs.values()) >= self.max_running:
                raise Busy(f"{self.max_running} simulations are running already: try again when one has finished")
            run_id, run = uuid.uuid4().hex, WhatIfRun()
            self._runs[run_id] = run
        threading.Thread(target=self._run, args=(run, work), daemon=True, name=f"{name}-{run_id[:8]}").start()
        return run_id

    def peek(self, run_id: str) -> WhatIfRun | None:
        """The run, still held (running, or finished and not yet taken); None if unknown or dropped."""
        with self._lock:
            self._drop_stale()
            return self._runs.get(run_id)

    def read(self, run_id: str) -> WhatIfRun | None:
        """The run as `peek` gives it; a finished one counts as read from the first call (see READ_GRACE)."""
        with self._lock:
            self._drop_stale()
            run = self._runs.get(run_id)
            if run is not None and run.done and run.read_at is None:
                run.read_at = self.clock()
            return run

    def held(self) -> int:
        with self._lock:
            return len(self._runs)

    def _run(self, run: WhatIfRun, work: Callable[[WhatIfRun], Any]) -> None:
        try:
            run.result = work(run)
        except FragvizError as exc:
            run.error = str(exc)
        except Exception as exc:  # noqa: BLE001  shown as a message, never a traceback
            run.error = f"the simulation failed ({type(exc).__name__}: {exc})"
        finally:
            run.finished_at = self.clock()
            run.done = True

    def _drop_stale(self) -> None:
        now = self.clock()
        stale = [k for k, j in self._runs.items() if j.done and j.finished_at is not None and (
            now - j.finished_at > self.keep_seconds or (j.read_at is not None and now - j.read_at > self.read_grace))]
        for k in stale:
            del self._runs[k]
