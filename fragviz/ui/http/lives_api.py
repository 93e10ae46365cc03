"""GET /api/snapshots/<id>/devices/<device>/lives: every state of a device in one binary answer, for the page to
rebuild any event's segments and gaps itself (assets/lives.js decodes it).

The answer: the 8 bytes "FVLIVES1", the header's length (uint32, little-endian), the header (UTF-8 JSON:
device, states, segments and blocks (row counts), columns ([table, name, dtype, byte offset]) and sites (a
stack's short site, for the map's hover)), then the columns, each at an offset that is a multiple of 8, in
little-endian: "f8" (float64: addresses and sizes, exact below 2**53) or "i4" (int32). A trace longer than the
setting page_state_events is refused with 413: the page then asks the server for each state.
"""
from __future__ import annotations

import json
import struct
from collections import OrderedDict
from threading import Lock
from typing import Callable, Iterable

import numpy as np
from flask import Blueprint, Response, jsonify

from fragviz.base.errors import NotFoundError
from fragviz.base.settings import setting
from fragviz.library import Library
from fragviz.replay.lives import BLOCK_COLUMNS, SEGMENT_COLUMNS, Lives
from fragviz.usage.sites import site_label

MAGIC = b"FVLIVES1"
WIDE = {"address", "size", "requested", "stream", "pool_a", "pool_b"}  # float64; the rest fit int32
CACHED = 8  # devices whose answers the server keeps


def encode_lives(lives: Lives, sites: dict[int, str]) -> bytes:
    """The binary answer for these lives (see the module's docstring)."""
    tables = (("segments", SEGMENT_COLUMNS, lives.segments), ("blocks", BLOCK_COLUMNS, lives.blocks))
    parts, columns, offset = [], [], 0
    for table, names, data in tables:
        for name in names:
            dtype = "f8" if name in WIDE else "i4"
            raw = np.ascontiguousarray(data[name], dtype="<" + dtype).tobytes()
            raw += b"\0" * (-len(raw) % 8)
            columns.append([table, name, dtype, offset])
            parts.append(raw)
            offset += len(raw)
    header = json.dumps({"device": lives.device, "states": lives.states, "segments": len(lives.segments["first"]),
                         "blocks": len(lives.blocks["first"]), "columns": columns,
                         "sites": {str(k): v for k, v in sites.items()}}).encode()
    header += b" " * (-(len(MAGIC) + 4 + len(header)) % 8)  # the columns start 8-aligned
    return b"".join([MAGIC, struct.pack("<I", len(header)), header, *parts])


def sites_of(reader: Library, sid: int, lives: Lives) -> dict[int, str]:
    """The short site of each stack the lives name."""
    return stack_sites(reader, sid, np.concatenate([lives.segments["stack"], lives.blocks["stack"]]).tolist())


def stack_sites(reader: Library, sid: int, used: Iterable[int]) -> dict[int, str]:
    """The short site of each of the `used` stacks that has frames."""
    frames, stacks = reader.stacks(sid)
    return {s: site_label([frames[f] for f in stacks[s]]) for s in sorted(set(used))
            if 0 <= s < len(stacks) and stacks[s]}


class LivesCache:
    """The encoded lives of the last few devices asked for; one build at a time per server."""

    def __init__(self, build: Callable[[int, int], bytes]) -> None:
        self._build, self._lock = build, Lock()
        self._kept: OrderedDict[tuple[int, int], bytes] = OrderedDict()

    def get(self, sid: int, device: int) -> bytes:
        with self._lock:
            key = (sid, device)
            if key not in self._kept:
                self._kept[key] = self._build(sid, device)
                while len(self._kept) > CACHED:
                    self._kept.popitem(last=False)
            self._kept.move_to_end(key)
            return self._kept[key]


def add_lives_route(bp: Blueprint, reader: Library) -> None:
    """Add the lives route to the API's blueprint (under its /api prefix)."""

    def build(sid: int, device: int) -> bytes:
        lives = reader.device_lives(sid, device)
        return encode_lives(lives, sites_of(reader, sid, lives))

    cache = LivesCache(build)

    @bp.get("/snapshots/<int:sid>/devices/<int(signed=True):device>/lives")
    def lives(sid: int, device: int):
        n = reader.trace_length(sid, device) if device in reader.snapshot_row(sid).devices else None
        if n is None:
            raise NotFoundError(f"snapshot {sid} has no device {device}")
        budget = int(setting("page_state_events"))
        if n > budget:
            return jsonify({"error": f"device {device}'s trace has {n:,} events, over page_state_events "
                                     f"({budget:,}): the page asks the server for each state"}), 413
        return Response(cache.get(sid, device), mimetype="application/octet-stream")
