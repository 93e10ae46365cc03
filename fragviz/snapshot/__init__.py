"""Reading snapshot files: `load_snapshot(path)` gives a parsed, validated `Snapshot`."""
from __future__ import annotations

from fragviz.snapshot.loader import RawSnapshot, read_raw
from fragviz.snapshot.parse import parse_snapshot

__all__ = ["RawSnapshot", "read_raw", "parse_snapshot", "load_snapshot", "load_snapshot_bytes"]


def load_snapshot(path: str, name: str | None = None):
    """Read and parse the snapshot file at `path` (pickle, gzip or JSON; every format generation)."""
    return parse_snapshot(read_raw(path, name))


def load_snapshot_bytes(data: bytes, name: str):
    """Parse a snapshot held in memory (an upload); `name` is used in messages."""
    from fragviz.snapshot.loader import decode_bytes

    return parse_snapshot(decode_bytes(data, name))
