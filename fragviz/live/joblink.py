"""The server process's side of the link to its job: asks, answers by id, and snapshots built from the copy.

Many request threads ask the job at once; one reader thread hands each answer to the thread that asked.
An ask the job does not answer in time is given up (its late answer is dropped). A packed snapshot (a
simulated device's state as the job copied it, fragviz.allocator.recorder.PackedState) is built and pickled
here, in the server's process, with the frames and stacks the job sent so far mirrored (the reader thread
adds each message's new ones, in the order the job sent them).
"""
from __future__ import annotations

import itertools
import os
import socket
import threading
from typing import Any

from fragviz.live import link
from fragviz.live.building import FrameMirror


class JobGone(ConnectionError):
    """The job has ended (or closed its link): nothing more can be asked."""


class JobLink:
    """Asks to the job over `sock`; `start()` runs the reader thread, `gone` is set when the job has ended."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.gone = threading.Event()
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, list[Any]] = {}  # id -> [event, answer]
        self.mirror = FrameMirror()
        self.trace_mirror: Any = None  # the job's trace as far as deltas brought it (allocator.packed.TraceMirror)

    def start(self) -> "JobLink":
        threading.Thread(target=self._read, name="fragviz-server-link", daemon=True).start()
        return self

    def _read(self) -> None:
        try:
            for header, payload in link.messages(self.sock):
                if "frames_from" in header:  # in the order the job sent them, whoever asked and waits or not
                    header["tables"] = self.mirror.update(header)
                    header["rows"] = self._rows(header, payload)
                with self._lock:
                    slot = self._waiting.pop(header.get("id"), None)
                if slot is not None:
                    slot[1] = (header, payload)
                    slot[0].set()
        except OSError:
            pass  # the job's end of the link went away: as at its end
        except Exception as exc:  # a message that cannot be taken: nothing after it can be trusted
            os.write(2, f"fragviz: the live agent's link to the job broke ({type(exc).__name__}: {exc}); it stops "
                        "serving, and the job runs on\n".encode(errors="replace"))
        finally:
            self.gone.set()
            with self._lock:
                for slot in self._waiting.values():
                    slot[0].set()  # with no answer: the asker sees the job gone
                self._waiting.clear()

    def _rows(self, header: dict[str, Any], payload: bytes) -> Any:
        """The trace rows of a packed snapshot, and how many rows the mirror was ever given: the mirror brought
        up to date by a delta, or the payload itself (an OOM's whole trace, copied when it happened; None)."""
        from array import array

        from fragviz.allocator.packed import TraceMirror

        if header.get("trace") == "delta":
            if self.trace_mirror is None:
                self.trace_mirror = TraceMirror()
            return self.trace_mirror.update(payload, int(header["trace_length"]))
        rows = array("q")
        if header.get("trace") == "full":
            rows.frombytes(payload)
        return rows, None

    def ask(self, op: str, timeout: float, **params: Any) -> tuple[dict[str, Any], bytes]:
        """The job's answer to `op` (TimeoutError when it takes longer than `timeout`, JobGone once it ended)."""
        if self.gone.is_set():
            raise JobGone("the job has ended")
        event, number = threading.Event(), next(self._ids)
        slot: list[Any] = [event, None]
        with self._lock:
            self._waiting[number] = slot
        try:
            link.send(self.sock, {"id": number, "op": op, **params}, lock=self._send_lock)
        except OSError:
            raise JobGone("the job has ended") from None
        if not event.wait(timeout):
            with self._lock:
                self._waiting.pop(number, None)
            raise TimeoutError(f"the job did not answer within {timeout:.0f} s")
        if slot[1] is None:
            raise JobGone("the job has ended")
        header, payload = slot[1]
        if header.get("error"):
            raise RuntimeError(str(header["error"])[:300])
        return header, payload

    def tell(self, op: str, **params: Any) -> None:
        """Something the job wants no answer to."""
        try:
            link.send(self.sock, {"op": op, **params}, lock=self._send_lock)
        except OSError:
            pass
