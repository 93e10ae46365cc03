"""A terminal progress bar for long work, on stderr, drawn only where a person is watching."""
from __future__ import annotations

import json
import sys
import time
from typing import TextIO

from fragviz.base.errors import OutputError


class ProgressBar:
    """`bar.update(done, total)` redraws at most 10 times a second; `bar.close()` ends the line."""

    def __init__(self, label: str, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.label = label
        self.phase = ""
        self._last = 0.0
        self._start = time.monotonic()
        self._drawn = False

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self._last = 0.0
        self.update(0, 1)

    def update(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < 0.1 and done < total:
            return
        self._last = now
        frac = 0.0 if total <= 0 else min(1.0, done / total)
        filled = int(frac * 30)
        bar = "#" * filled + "-" * (30 - filled)
        self.stream.write(f"\r{self.label} [{bar}] {frac:6.1%} {self.phase:<8} {now - self._start:6.1f}s")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


class PhaseClock:
    """When each phase of an ingest began, and when its first picture was ready: `fragviz ingest --timings`."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.marks: list[tuple[str, float]] = []
        self.first_picture: float | None = None

    def phase(self, name: str) -> None:
        self.marks.append((name, time.monotonic()))

    def picture(self) -> None:
        self.first_picture = time.monotonic()

    def summary(self) -> str:
        end = time.monotonic()
        ends = [t for _, t in self.marks[1:]] + [end]
        parts = [f"{name} {stop - begin:.2f} s" for (name, begin), stop in zip(self.marks, ends)]
        if self.first_picture is not None:
            parts.append(f"first picture at {self.first_picture - self.start:.2f} s")
        return ", ".join(parts) + f"; total {end - self.start:.2f} s"


class ProgressLog:
    """An ingest's progress as JSON lines in a file another process reads (the server, for an upload's page):
    {"phase": name}, {"done": n, "total": m} at most 5 times a second, and {"preview": [...]} once."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self.fh = open(path, "a", encoding="utf-8")  # appended to: a FIFO or /dev/stdout is written in place
        except OSError as exc:
            raise OutputError(f"--progress-file {path}: cannot be written ({exc.strerror or exc})") from None
        self._last = 0.0

    def _write(self, record: dict) -> None:
        try:
            self.fh.write(json.dumps(record, separators=(",", ":")) + "\n")
            self.fh.flush()
        except OSError as exc:
            raise OutputError(f"--progress-file {self.path}: cannot be written ({exc.strerror or exc})") from None

    def phase(self, name: str) -> None:
        self._write({"phase": name})

    def update(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self._last >= 0.2 or done >= total:
            self._last = now
            self._write({"done": done, "total": total})

    def preview(self, devices: list) -> None:
        self._write({"preview": [d.as_dict() for d in devices]})

    def close(self) -> None:
        self.fh.close()


def no_progress(phase: str | None = None) -> dict:
    """The state of a ProgressLog with nothing written yet: `phase` (None: not begun), no count, no preview."""
    return {"phase": phase, "done": 0, "total": 0, "preview": None}


def read_progress(path: str) -> dict:
    """The state a ProgressLog file tells: the latest phase and count, and the preview once written."""
    state = no_progress()
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    state.update(json.loads(line))
                except ValueError:  # a line being written
                    break
    except OSError:
        pass
    return state
