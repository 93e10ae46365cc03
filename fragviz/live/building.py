"""Snapshots built in the agent's server process from what the job copied, a little at a time.

The job sends each interned frame and stack once (`FrameMirror` keeps them) and, for a snapshot, only the
trace entries added since the last one (`allocator.packed.TraceMirror` keeps the rows). `TraceEntries` turns
each row into its PyTorch-format entry once, and keeps the entries as the job keeps its rows, so a snapshot
builds only what is new and pickles the rest as it stands. The build and the pickle hand the GIL to the
server's other threads every few hundred entries and every 64 KiB (`pause`): the server runs at a low priority,
and a stats request must not wait for a snapshot that the scheduler keeps short of CPU.
"""
from __future__ import annotations

import collections
import pickle
import threading
import time
from typing import Any, Callable

PAUSE_EVERY = 256


def pause() -> None:
    """Hand the GIL to another thread that waits for it."""
    time.sleep(0)


class FrameMirror:
    """The job's interned frames and stacks, as far as it has sent them (it sends each only once)."""

    def __init__(self) -> None:
        self.frames: list[Any] = []
        self.stacks: list[tuple[int, ...]] = []
        self._lock = threading.Lock()

    def update(self, header: dict[str, Any]) -> tuple[tuple[Any, ...], tuple[tuple[int, ...], ...]]:
        """Add the frames and stacks this message brings (messages in the order the job sent them); the whole
        tables, as of it."""
        from fragviz.model import Frame

        with self._lock:
            if header["frames_from"] != len(self.frames) or header["stacks_from"] != len(self.stacks):
                raise RuntimeError("the job's frames and the server's copy of them disagree")
            self.frames.extend(Frame(str(f), int(line), str(name)) for f, line, name in header["frames"])
            self.stacks.extend(tuple(s) for s in header["stacks"])
            return tuple(self.frames), tuple(self.stacks)


class TraceEntries:
    """The job's trace as PyTorch-format entries (frames shared by stack), each built once."""

    def __init__(self) -> None:
        self.entries: collections.deque[dict[str, Any]] = collections.deque()
        self.frame_lists: dict[int, list[dict[str, Any]]] = {}
        self.upto = 0  # rows ever added when the entries were last brought up to date

    def sync(self, rows: Any, appended: int, frames: tuple[Any, ...], stacks: tuple[tuple[int, ...], ...]) -> list:
        """The entries of these rows (the mirror's, `appended` rows ever added), building only the new ones."""
        from fragviz.allocator.packed import WIDTH

        new = min(len(rows) // WIDTH, appended - self.upto)
        fresh = entries_of(rows[len(rows) - new * WIDTH:] if new else rows[:0], frames, stacks, self.frame_lists)
        self.entries.extend(fresh)
        while len(self.entries) > len(rows) // WIDTH:
            self.entries.popleft()
        self.upto = appended
        return list(self.entries)


def entries_of(rows: Any, frames: tuple[Any, ...], stacks: tuple[tuple[int, ...], ...],
               frame_lists: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """PyTorch-format trace entries of packed rows: the simulator's stack and event out, the frames in."""
    from fragviz.allocator.packed import unpack

    out = []
    for n, entry in enumerate(unpack(rows)):
        if n % PAUSE_EVERY == 0:
            pause()
        stack = entry.pop("stack")
        entry.pop("event", None)
        if 0 <= stack < len(stacks):
            fl = frame_lists.get(stack)
            if fl is None:
                fl = frame_lists[stack] = [{"filename": frames[i].filename, "line": frames[i].line,
                                            "name": frames[i].name} for i in stacks[stack]]
            if fl:
                entry["frames"] = fl
        out.append(entry)
    return out


def snapshot_blob(header: dict[str, Any], payload: bytes, trace: TraceEntries) -> bytes:
    """The snapshot as the job's answer holds it: pickled by the job (a CUDA device), or built and pickled
    here from the packed copy of a simulated device (protocol 4: what PyTorch's viewer and fragviz read).
    `trace` keeps the entries of delta answers between snapshots (one snapshot is built at a time)."""
    if header.get("format") == "pickle":
        return payload
    from fragviz.allocator.state import CopiedState, build_snapshot

    frames, stacks = header["tables"]
    segments = header["segments"]
    for seg in segments:
        seg["segment_pool_id"] = tuple(seg["segment_pool_id"])
    rows, appended = header["rows"]
    device = int(header["device"])
    state = CopiedState(segments, [(device, [])], header["settings"])
    data = build_snapshot(state, frames, stacks, header["provenance"], pause, trace.frame_lists)
    if appended is not None:
        data["device_traces"][device] = trace.sync(rows, appended, frames, stacks)
    elif len(rows):
        data["device_traces"][device] = entries_of(rows, frames, stacks, trace.frame_lists)
    return dumps_in_parts(data, pause)


class _Parts:
    """A pickle's output in parts: the C pickler hands over each 64 KiB frame through this `write`, where other
    threads may run (pickle.dumps would hold the GIL from its first byte to its last)."""

    def __init__(self, pause: Callable[[], None]) -> None:
        self.parts: list[bytes] = []
        self._pause = pause

    def write(self, data: bytes) -> None:
        self.parts.append(bytes(data))
        self._pause()


def dumps_in_parts(data: Any, pause: Callable[[], None]) -> bytes:
    """Pickle protocol 4 (what PyTorch's own viewer and fragviz's loader read), `pause` between frames."""
    out = _Parts(pause)
    pickle.Pickler(out, protocol=4).dump(data)
    return b"".join(out.parts)
