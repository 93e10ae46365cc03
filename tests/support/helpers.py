"""What many tests share: the repository's and the real snapshots' folders, builders for small snapshots in
PyTorch's own format (for tests that need exact, hand-worked figures), a free port, and a bounded wait."""
from __future__ import annotations

import os
import pickle
import socket
import time
from typing import Any, Callable

import pytest

MiB = 1024 * 1024
KiB = 1024
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
TESTS = os.path.join(ROOT, "tests")
REAL = os.path.normpath(os.path.join(ROOT, "..", "shared", "real_snapshots"))


def real(name: str) -> str:
    return os.path.join(REAL, name)


def frames(*names: str) -> list[dict[str, Any]]:
    return [{"filename": "/home/u/train.py", "line": 10 + i, "name": n} for i, n in enumerate(names)]


def block(address: int, size: int, state: str = "active_allocated", requested: int | None = None,
          stack: list | None = None) -> dict[str, Any]:
    b: dict[str, Any] = {"address": address, "size": size, "state": state,
                         "requested_size": size if requested is None else requested}
    b["frames"] = stack or []
    return b


def segment(address: int, blocks: list[dict], stream: int = 0, pool: str = "large", device: int = 0,
            expandable: bool = False) -> dict[str, Any]:
    total = sum(b["size"] for b in blocks)
    active = [b for b in blocks if b["state"] != "inactive"]
    return {"device": device, "address": address, "total_size": total,
            "allocated_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
            "active_size": sum(b["size"] for b in active),
            "requested_size": sum(b["requested_size"] for b in active), "stream": stream,
            "segment_type": pool, "segment_pool_id": (0, 0), "is_expandable": expandable, "frames": [],
            "blocks": blocks}


def ev(action: str, addr: int, size: int, stream: int = 0, **extra: Any) -> dict[str, Any]:
    e: dict[str, Any] = {"action": action, "addr": addr, "size": size, "stream": stream}
    e.update(extra)
    return e


def snapshot(segments: list[dict], *traces: list[dict], **top: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"segments": segments, "device_traces": list(traces) or [[]]}
    d.update(top)
    return d


def write_pickle(path: str, data: Any, protocol: int = 4) -> str:
    with open(path, "wb") as fh:
        pickle.dump(data, fh, protocol=protocol)
    return path


def free_port(pair: bool = False) -> int:
    """A loopback port nothing listens on, from the kernel (never a fixed number: tests run side by side in
    several workers); with `pair`, the next port is free too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not pair:
            return port
        if port < 65535:
            try:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
    raise AssertionError("no free port pair")


def wait_for(condition: Callable[[], Any], what: str, deadline: float = 90.0, interval: float = 0.1,
             gone: Callable[[], str | None] | None = None, tail: Callable[[], str] | None = None) -> Any:
    """Poll `condition` every `interval` seconds until it gives something truthy, and return that.

    The test fails after `deadline` seconds (a bound, never a measurement), or at once when `gone()` says why
    waiting is pointless (say, the process the condition depends on exited); `tail()` adds what helps read
    the failure (the end of a log)."""
    end = time.monotonic() + deadline
    while True:
        value = condition()
        if value:
            return value
        why = gone() if gone else None
        if not why and time.monotonic() > end:
            why = f"gave up after {deadline:.0f} s"
        if why:
            pytest.fail(f"{why} while waiting for {what}{tail() if tail else ''}")
        time.sleep(interval)
