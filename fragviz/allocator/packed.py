"""A recording allocator's trace, packed: eight 64-bit integers an entry in one array, not a dict an entry.

A live job keeps up to twice `max_entries` trace entries for as long as it runs. As dicts they took some
400 bytes each (80 MB for 200,000) and a snapshot had to walk them in the job's process; packed they take 64
bytes, and a snapshot copies those added since the last one with one memory copy (`copy`) under the allocator's
lock. The agent's server process keeps its own copy (`TraceMirror`) and turns the rows back into PyTorch's
trace entries (`unpack`), outside the job.

Standard library only (the allocator model aside): the server process reads what the job wrote.
"""
from __future__ import annotations

import mmap
from array import array
from typing import Any, Iterator

from fragviz.allocator.sim import DeviceAllocator

ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
           "segment_unmap", "oom")
FIELDS = ("action", "addr", "size", "stream", "stack", "event", "time_us", "device_free")
WIDTH = len(FIELDS)
ABSENT = -1  # an entry without an address (an oom), a time or a device_free: the key is left out
_CODES = {name: i for i, name in enumerate(ACTIONS)}


class PackedTrace:
    """Trace entries in one array of int64, WIDTH a row. Iterates as PyTorch-format entry dicts (with the
    simulator's `stack` and `event`), supports `len` and dropping the oldest entries (`del trace[:n]`)."""

    def __init__(self) -> None:
        self.data = array("q")
        self.appended = 0  # entries ever added (dropping old ones does not lower it): where a reader left off

    def add(self, action: str, addr: int | None, size: int, stream: int, stack: int, event: int,
            time_us: int | None, device_free: int | None) -> None:
        self.data.extend((_CODES[action], ABSENT if addr is None else addr, size, stream, stack, event,
                          ABSENT if time_us is None else time_us, ABSENT if device_free is None else device_free))
        self.appended += 1

    def append(self, entry: dict[str, Any]) -> None:
        self.add(entry["action"], entry.get("addr"), entry["size"], entry["stream"], entry.get("stack", -1),
                 entry.get("event", 0), entry.get("time_us"), entry.get("device_free"))

    def __len__(self) -> int:
        return len(self.data) // WIDTH

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return unpack(self.data)

    def __delitem__(self, key: slice) -> None:
        if not isinstance(key, slice) or key.start not in (None, 0) or key.step not in (None, 1):
            raise TypeError("a packed trace drops only its oldest entries: del trace[:n]")
        stop = len(self) if key.stop is None else max(0, min(len(self), key.stop))
        del self.data[:stop * WIDTH]

    def copy(self, since: int = 0) -> tuple[mmap.mmap | None, int]:
        """The entries added after the first `since` ever added (all of them still kept, when fewer are), as raw
        bytes in a mapping of their own (None when there are none), and how many: one memory copy, and `close()`
        gives the memory back to the system at once (a bytes object this size may stay in the process's heap)."""
        new = min(len(self), max(0, self.appended - since))
        if not new:
            return None, 0
        view = memoryview(self.data)[len(self.data) - new * WIDTH:].cast("B")
        out = mmap.mmap(-1, len(view))
        out[:] = view
        return out, new


class TraceMirror:
    """A reader's copy of a packed trace, kept up to date from what was added since the last copy (`update`)."""

    def __init__(self) -> None:
        self.data = array("q")
        self.appended = 0  # rows ever added

    def update(self, new: bytes | memoryview, length: int) -> tuple[array, int]:
        """Add the new rows, drop the oldest until `length` are left (as the trace did); a copy of the rows, and
        how many rows were ever added."""
        if len(new) % (WIDTH * 8):
            raise ValueError(f"a packed trace of {len(new)} bytes is not rows of {WIDTH} int64")
        self.data.frombytes(new)
        self.appended += len(new) // (WIDTH * 8)
        extra = len(self.data) // WIDTH - length
        if extra > 0:
            del self.data[:extra * WIDTH]
        return array("q", self.data), self.appended


def unpack(data: array | bytes | memoryview) -> Iterator[dict[str, Any]]:
    """PyTorch-format trace entries (with `stack` and `event`) from packed int64 rows."""
    if not isinstance(data, array):
        raw, data = data, array("q")
        data.frombytes(raw)
    if len(data) % WIDTH:
        raise ValueError(f"a packed trace of {len(data)} numbers is not rows of {WIDTH}")
    for i in range(0, len(data), WIDTH):
        action, addr, size, stream, stack, event, time_us, device_free = data[i:i + WIDTH]
        entry: dict[str, Any] = {"action": ACTIONS[action], "size": size, "stream": stream, "stack": stack,
                                 "event": event}
        if addr != ABSENT:
            entry["addr"] = addr
        if device_free != ABSENT:
            entry["device_free"] = device_free
        if time_us != ABSENT:
            entry["time_us"] = time_us
        yield entry


class PackedAllocator(DeviceAllocator):
    """The allocator model with its trace packed (a recording of a live or captured workload)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trace: PackedTrace = PackedTrace()  # type: ignore[assignment]

    def _trace(self, action: str, addr: int | None, size: int, stream: int, stack: int, **extra: int) -> None:
        if self.record:
            self.trace.add(action, addr, size, stream, stack, self.event,
                           self.clock() if self.clock is not None else None, extra.get("device_free"))
