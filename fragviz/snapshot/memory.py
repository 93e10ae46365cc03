"""What a decode may cost in memory: the memory available, measured once before any decode, and the
address-space cap a decode runs under.

CPython's C unpickler allocates some values at the size a file declares (a 4-byte memo index can ask for
gigabytes), and a JSON of empty containers takes ~30 times its size. So every decode runs under RLIMIT_AS
(its address space may grow by FLOOR plus FACTOR times the payload, never by more than the memory
available), and a decode that needs more ends in a MemoryError, said as one line, rather than the kernel's
OOM killer. Messages use figures measured before the cap applies: under it, even opening /proc/meminfo may
fail.
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

try:
    import resource
except ImportError:  # not on Windows: no cap there
    resource = None  # type: ignore[assignment]

from fragviz.base.units import format_bytes

# While a payload is decoded, the process's address space may grow by this much plus this many times the
# payload's size (what a real one needs several times over: a pickle takes 3-13x, a JSON 4-6x), and never by
# more than the memory available.
FLOOR = 512 << 20
FACTOR = 16


def memory_available() -> int:
    """Bytes this process can still take: the kernel's MemAvailable (what it gives without swapping), or less
    where the process's address space is capped (RLIMIT_AS); a large figure where neither is known."""
    available = 1 << 50
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if resource is not None:
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            available = min(available, max(0, soft - address_space()))
    return available


def address_space() -> int:
    """The process's address space now (bytes), 0 where it cannot be read."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


@dataclass
class Room:
    """The memory one file's decode may use: `available` measured once, before anything is decoded or
    capped; `factor` is the decode's estimated bytes per payload byte, once a sample has been measured."""

    available: int
    factor: float | None = None
    sampled: int = 0

    @classmethod
    def now(cls) -> Room:
        return cls(memory_available())

    def allowance(self, payload: int) -> int:
        """How far the address space may grow while a payload of this size is decoded."""
        return min(FLOOR + FACTOR * payload, max(FLOOR, self.available))

    def too_little(self, payload: int, verb: str = "decode") -> str:
        """The problem of a decode that ran out of its allowance: what it could take and why."""
        allowed = self.allowance(payload)
        if allowed >= self.available:
            return f"needs more memory to {verb} than the {format_bytes(self.available)} available"
        return (f"needs more memory to {verb} than the {format_bytes(allowed)} it may take ({FACTOR}x its "
                f"{format_bytes(payload)} + {format_bytes(FLOOR)}; {format_bytes(self.available)} is available)")


@contextmanager
def address_space_cap(payload: int, room: Room) -> Iterator[None]:
    """RLIMIT_AS lowered for a decode, then restored: only while this is the process's one Python thread
    (a command, a worker), since the limit binds every thread; a threaded server ingests uploads in a child."""
    if resource is None or threading.active_count() != 1:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = address_space() + room.allowance(payload)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft != resource.RLIM_INFINITY and soft <= cap:
        yield  # already held tighter
        return
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
