"""The link between a job and its agent's server process: framed messages over a Unix socket pair.

A message is a JSON header (a dict) and a binary payload: 12 bytes (the header's length, the payload's
length, network order), then the header, then the payload. The server asks (`{"id": n, "op": ...}`); the job
answers each ask with the same id; either side may also tell the other something that wants no answer (no
id). A side whose peer has gone reads None (end of file) and stops.

Standard library only: the job's side runs inside someone's training job.
"""
from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Any, Iterator

_PREFIX = struct.Struct("!IQ")
MAX_HEADER = 64 << 20   # a header carries segments as JSON: a few MB for a real job
MAX_PAYLOAD = 1 << 36   # a packed trace or a pickled snapshot; what a job sends its own server


@dataclass(frozen=True)
class Answer:
    """What the job sends for one ask: a header and a payload (bytes, or a mapping that `release()` closes once
    it is sent, unless `keep`: an OOM's copy, asked for again until fetched)."""
    header: dict[str, Any]
    payload: Any = b""
    keep: bool = False

    def release(self) -> None:
        """Once sent: a mapping's memory back to the system at once, unless it is kept."""
        if not self.keep and hasattr(self.payload, "close"):
            self.payload.close()


class LinkClosed(ConnectionError):
    """The other side of the link has gone (its process ended, or it closed the link)."""


def send(sock: socket.socket, header: dict[str, Any], payload: Any = b"", lock: threading.Lock | None = None) -> None:
    """One message (whole, under `lock` when several threads send on `sock`); the payload is any bytes-like."""
    head = json.dumps(header, separators=(",", ":")).encode()
    with lock or contextlib.nullcontext():
        sock.sendall(_PREFIX.pack(len(head), len(payload)) + head)
        if payload:
            sock.sendall(payload)  # the socket's own sends: the job's other threads run meanwhile


def receive(sock: socket.socket) -> tuple[dict[str, Any], bytearray] | None:
    """The next message, or None when the other side has gone. A message that breaks the framing raises
    LinkClosed (the two sides are one program: it cannot be trusted any further)."""
    prefix = _exactly(sock, _PREFIX.size)
    if prefix is None:
        return None
    head_len, payload_len = _PREFIX.unpack(prefix)
    if head_len > MAX_HEADER or payload_len > MAX_PAYLOAD:
        raise LinkClosed(f"a message of {head_len:,} + {payload_len:,} bytes is past the link's limits")
    head = _exactly(sock, head_len)
    payload = _exactly(sock, payload_len) if payload_len else bytearray()
    if head is None or payload is None:
        raise LinkClosed("the link closed in the middle of a message")
    header = json.loads(head)
    if not isinstance(header, dict):
        raise LinkClosed("a message whose header is not an object")
    return header, payload


def messages(sock: socket.socket) -> Iterator[tuple[dict[str, Any], bytearray]]:
    """Every message until the other side has gone (receive's errors pass through)."""
    while True:
        message = receive(sock)
        if message is None:
            return
        yield message


def _exactly(sock: socket.socket, n: int) -> bytearray | None:
    """Exactly n bytes, read into one buffer (not copied again: a payload may be megabytes)."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], min(n - got, 1 << 20))
        if k == 0:
            return None
        got += k
    return buf
