"""The live agent's door: what any connection may cost the job before its token is looked at.

The agent runs inside someone's training job, and on loopback it takes requests without a token, so every
local user can reach it. Before a request is read far enough to check a token:
- at most MAX_CONNECTIONS connections are open at once (each is a thread in the job). When all are taken, a
  new one takes the place of the one that has spent longest sending its request (a slow or idle client),
  so a flood of connections that say nothing cannot keep a real client out;
- the request line and headers may take HEADER_BYTES in all (431 beyond), so a connection costs the job a
  bounded amount of memory;
- the whole request (line and headers) must arrive within REQUEST_DEADLINE seconds, not per read: a client
  that trickles a byte at a time is cut off all the same.
Standard library only.
"""
from __future__ import annotations

import http.client
import socket
import threading
import time
from contextlib import suppress
from typing import Any, Callable

MAX_CONNECTIONS = 16
HEADER_BYTES = 16 << 10
REQUEST_DEADLINE = 5.0


class HeadersTooLarge(http.client.LineTooLong):
    """The request line and headers passed HEADER_BYTES (http.server answers 431 to a LineTooLong)."""

    def __init__(self) -> None:
        super().__init__(f"request line and headers over {HEADER_BYTES:,} bytes")


class Door:
    """Open connections, by socket: when each began sending its request (None once it is read)."""

    def __init__(self, max_connections: int = MAX_CONNECTIONS) -> None:
        self.max_connections = max_connections
        self._lock = threading.Lock()
        self._open: dict[socket.socket, float | None] = {}
        self.evicted = 0

    def admit(self, sock: socket.socket) -> bool:
        """Take this connection in, in place of the slowest sender when all are taken; False when every open
        connection is being answered (the new one is closed)."""
        with self._lock:
            if len(self._open) >= self.max_connections:
                sending = [(began, s) for s, began in self._open.items() if began is not None]
                if not sending:
                    return False
                _, slowest = min(sending, key=lambda pair: pair[0])
                del self._open[slowest]
                self.evicted += 1
                shut(slowest)  # its thread ends at its next read
            self._open[sock] = time.monotonic()
            return True

    def read(self, sock: socket.socket) -> None:
        """The connection's request is read: it is being answered, and no longer evictable."""
        with self._lock:
            if sock in self._open:
                self._open[sock] = None

    def leave(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.pop(sock, None)

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._open)


class CappedReader:
    """A connection's reads, at most `limit` bytes of lines until `lift()` (the request line and headers)."""

    def __init__(self, raw: Any, limit: int = HEADER_BYTES) -> None:
        self._raw = raw
        self._left: int | None = limit

    def readline(self, size: int | None = -1) -> bytes:
        if self._left is None:
            return self._raw.readline(size)
        want = self._left + 1 if size is None or size < 0 else min(size, self._left + 1)
        line = self._raw.readline(want)
        self._left -= len(line)
        if self._left < 0:
            raise HeadersTooLarge()
        return line

    def lift(self) -> None:
        self._left = None

    def __getattr__(self, name: str) -> Any:  # read, close, ...: the connection's own
        return getattr(self._raw, name)


class Deadline:
    """Shuts a connection's socket when `seconds` pass before `cancel()`: a read blocked on it ends at once
    (`fired` then says why). `sock_of` gives the socket when the time comes (a client's is made after this)."""

    def __init__(self, sock_of: Callable[[], socket.socket | None], seconds: float = REQUEST_DEADLINE) -> None:
        self.fired = False
        self._sock_of = sock_of
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        sock = self._sock_of()
        if sock is not None:
            shut(sock)

    def cancel(self) -> None:
        self._timer.cancel()


def shut(sock: socket.socket) -> None:
    """End a connection's reads and writes now (its thread's blocked read returns at once)."""
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
