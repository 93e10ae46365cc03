"""How fast a client must talk to the dashboard's server.

Every read from a connection waits at most `read_timeout` for its next bytes (a silent client is dropped).
That alone lets a client trickle an upload a byte just under every `read_timeout` and hold an upload slot
for ever; so while an upload's body is read (`Pace.required`), each window of `read_timeout` seconds must
bring at least `upload_min_rate` bytes a second, else the read fails with `TooSlow`. The rule is enforced
below the HTTP parser, on each read from the socket (`PacedReader`), so a client cannot escape it by
sending tiny chunks or stalling inside one: the socket's timeout is set, before every read, to the time
left in the window whose quota is not met yet.
"""
from __future__ import annotations

import io
import socket
import time
from contextlib import contextmanager, suppress
from typing import Iterator

PACE_KEY = "fragviz.pace"  # the WSGI environ key under which the server hands a request its connection's Pace
DEFAULT_WINDOW = 30.0  # seconds: the window when read_timeout is 0 (never time out a silent client)


class TooSlow(TimeoutError):
    """An upload's body arrived slower than the rate the server asks for."""


class Pace:
    """One connection's reads: each waits at most `read_timeout` seconds (None: for ever), and while an upload
    is `required` to, each window must bring its quota of bytes."""

    def __init__(self, sock: socket.socket, read_timeout: float | None) -> None:
        self.sock = sock
        self.read_timeout = read_timeout or None
        self.failed = False  # once too slow, every later read fails at once: nothing more is waited for
        self._need = 0.0  # bytes each window must bring; 0 while no rate is required
        self._window = 0.0
        self._end = 0.0  # when the current window ends (time.monotonic)
        self._got = 0  # bytes the current window has brought

    @contextmanager
    def required(self, min_rate: float, window: float | None = None) -> Iterator[None]:
        """While the block runs (an upload's body is read), each window of `window` seconds (read_timeout,
        else DEFAULT_WINDOW) must bring `min_rate * window` bytes; `min_rate` 0 asks nothing."""
        self._window = window or self.read_timeout or DEFAULT_WINDOW
        self._need, self._got = max(0.0, min_rate) * self._window, 0
        self._end = time.monotonic() + self._window
        try:
            yield
        finally:
            self._need = 0.0
            self._settimeout(self.read_timeout)  # the answer is written under the plain timeout

    def before_read(self) -> None:
        """Set the socket's timeout for the next read: TooSlow if a window has passed without its quota."""
        if self.failed:
            raise TooSlow("this connection was too slow")
        if not self._need:
            self._settimeout(self.read_timeout)
            return
        now = time.monotonic()
        while now >= self._end:
            if self._got < self._need:
                raise self._too_slow()
            self._got, self._end = 0, self._end + self._window
        left = self._end - now if self._got < self._need else self._end + self._window - now
        self._settimeout(min(left, self.read_timeout or left))

    def after_timeout(self) -> None:
        """A read timed out: TooSlow where that was the rate's deadline, not a silence of read_timeout."""
        if self._need and self._got < self._need and time.monotonic() >= self._end:
            raise self._too_slow()

    def count(self, n: int) -> None:
        self._got += n

    def _too_slow(self) -> TooSlow:
        self.failed = True
        rate = self._need / self._window
        return TooSlow(f"{self._got} bytes in {self._window:g} s, under {rate:,.0f} bytes a second")

    def _settimeout(self, seconds: float | None) -> None:
        with suppress(OSError):  # a socket closed under us: the read that follows says so
            self.sock.settimeout(None if seconds is None else max(seconds, 0.001))


class PacedReader(io.RawIOBase):
    """A connection's raw reads (werkzeug's handler reads through a BufferedReader over this), each under its
    Pace."""

    def __init__(self, raw: io.RawIOBase, pace: Pace) -> None:
        super().__init__()
        self._raw = raw
        self.pace = pace

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int | None:  # type: ignore[override]
        self.pace.before_read()
        try:
            n = self._raw.readinto(buffer)
        except TimeoutError:
            self.pace.after_timeout()
            raise
        self.pace.count(n or 0)
        return n

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()
