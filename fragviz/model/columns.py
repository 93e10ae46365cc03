"""A small columnar codec: a dict of 1-D numpy arrays to bytes and back (a JSON header, then raw data).

The store keeps event series, trace chunks and state checkpoints this way: one blob per chunk reads in
one query and decodes without a per-row loop.
"""
from __future__ import annotations

import json
import struct

import numpy as np

_HEAD = struct.Struct("<I")


def encode_columns(columns: dict[str, np.ndarray]) -> bytes:
    header = [[name, arr.dtype.str, int(arr.shape[0])] for name, arr in columns.items()]
    head = json.dumps(header, separators=(",", ":")).encode()
    parts = [_HEAD.pack(len(head)), head]
    parts.extend(np.ascontiguousarray(arr).tobytes() for arr in columns.values())
    return b"".join(parts)


def decode_columns(blob: bytes) -> dict[str, np.ndarray]:
    (n,) = _HEAD.unpack_from(blob, 0)
    header = json.loads(blob[_HEAD.size:_HEAD.size + n])
    offset = _HEAD.size + n
    out = {}
    for name, dtype, length in header:
        dt = np.dtype(dtype)
        out[name] = np.frombuffer(blob, dt, length, offset)
        offset += dt.itemsize * length
    return out
