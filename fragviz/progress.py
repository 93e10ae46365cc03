"""A terminal progress bar for long work, on stderr, drawn only where a person is watching."""
from __future__ import annotations

import sys
import time
from typing import TextIO


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
