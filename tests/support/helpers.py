"""Builders for small snapshots in PyTorch's own format, for tests that need exact, hand-worked figures."""
from __future__ import annotations

import os
import pickle
from typing import Any

MiB = 1024 * 1024
KiB = 1024
REAL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "real_snapshots")
REAL = os.path.normpath(REAL)


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
