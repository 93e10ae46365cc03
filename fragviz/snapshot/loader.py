"""Bytes to plain Python data, safely, in bounded time and memory.

A snapshot is plain data (dicts, lists, strings, numbers, one kind of tuple). The loader tells what a file
holds from its first bytes and hands it to one decoder: gzip is inflated as it is read, member by member,
under a ratio and an absolute cap that apply from the first byte (snapshot.inflate); a pickle is decoded by an
unpickler that refuses every global (snapshot.unpickle); JSON by Python's parser (snapshot.jsonparse). The
memory available is measured once, before anything is decoded; a payload whose decoded form would not fit is
refused up front, and every decode runs under an address-space cap (snapshot.memory), so a wrong estimate
ends in one line, never the OOM killer. A pipe is read once, into a spool (snapshot.source). What the payload
may hold is checked by the parser.
"""
from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass
from typing import Any, BinaryIO

from fragviz.base.errors import SnapshotFormatError
from fragviz.base.limits import Limits
from fragviz.snapshot.inflate import Watch, head_of, inflate
from fragviz.snapshot.jsonparse import check_json_size, json_estimate, parse_json
from fragviz.snapshot.memory import Room, address_space_cap, memory_available
from fragviz.snapshot.sniff import GZIP_MAGIC, describe, payload_kind
from fragviz.snapshot.source import check_size, is_regular, opened, pipe_digest, seekable
from fragviz.snapshot.unpickle import SAMPLE_SIZE, SURE_FACTOR, estimated_memory, sample_factor, unpickle_file
from fragviz.base.units import format_bytes

__all__ = ["RawSnapshot", "read_raw", "file_digest", "decode_file", "decode_bytes", "content_hash",
           "estimated_memory", "memory_available"]

_CHUNK = 1 << 20


@dataclass(frozen=True)
class RawSnapshot:
    """Decoded file content before it is checked against the snapshot format."""

    source: str
    data: Any
    encoding: str  # "pickle" or "json"
    compression: str | None
    pickle_protocol: int | None
    content_hash: str
    file_size: int
    payload_size: int = 0  # bytes after decompression: what the unpickler or JSON parser read


def read_raw(path: str, name: str | None = None, limits: Limits | None = None) -> RawSnapshot:
    """Read the file at `path` and decode it to plain data."""
    source = name or path
    limits = limits or Limits.current()
    return decode_file(path, source, file_digest(path, source, limits), limits)


def file_digest(path: str, source: str, limits: Limits) -> str:
    """The content hash of the file at `path`, read in chunks (the file is not held in memory). A pipe is
    spooled as it is hashed, for the decode_file that follows."""
    h = hashlib.sha256()
    with opened(path, source) as fh:
        if not is_regular(fh):
            return pipe_digest(path, fh, source, limits)
        check_size(os.fstat(fh.fileno()).st_size, source, limits)
        read = 0
        while chunk := fh.read(_CHUNK):
            read += len(chunk)
            if read > limits.max_file_size:  # a file that grew while read
                raise limits.refuse(source, "max_file_size", f"is over {limits.max_file_size:,} bytes")
            h.update(chunk)
    return h.hexdigest()


def decode_file(path: str, source: str, digest: str, limits: Limits) -> RawSnapshot:
    """Decode the file at `path` to plain data. An uncompressed pickle is unpickled as it is read, and gzip
    is inflated as it is read, so the file's bytes are never held whole."""
    with seekable(path, source, limits) as (fh, size):
        return _decode(fh, size, source, digest, limits)


def content_hash(data: bytes) -> str:
    """The identity of a snapshot file in the store: the SHA-256 of its bytes."""
    return hashlib.sha256(data).hexdigest()


def decode_bytes(data: bytes, source: str, digest: str | None = None, limits: Limits | None = None) -> RawSnapshot:
    """Decode file bytes (pickle, gzip-compressed pickle or JSON) to plain data."""
    if not data:
        raise SnapshotFormatError(source, "is empty")
    limits = limits or Limits.current()
    check_size(len(data), source, limits)
    return _decode(io.BytesIO(data), len(data), source, digest or content_hash(data), limits)


def _decode(fh: BinaryIO, size: int, source: str, digest: str, limits: Limits) -> RawSnapshot:
    """Decode a file; past the process's own memory (outside any cap: the inflate, a read), one line too."""
    try:
        return _decode_file(fh, size, source, digest, limits)
    except MemoryError:
        pass  # the message is built once the exception, and the frames that hold the memory, are gone
    raise SnapshotFormatError(source, "is too large to decode in the memory available")


def _decode_file(fh: BinaryIO, size: int, source: str, digest: str, limits: Limits) -> RawSnapshot:
    room = Room.now()
    head = _peek(fh, source)
    if not head:
        raise SnapshotFormatError(source, "is empty")
    if head[:2] != GZIP_MAGIC:
        content, encoding, protocol = _decode_payload(fh, size, source, room)
        return RawSnapshot(source, content, encoding, None, protocol, digest, size, size)
    payload = inflate(fh, size, source, limits, _watch(room, source))
    if not payload:
        raise SnapshotFormatError(source, "is an empty gzip stream")
    content, encoding, protocol = _decode_payload(io.BytesIO(payload), len(payload), source, room, len(payload))
    return RawSnapshot(source, content, encoding, "gzip", protocol, digest, size, len(payload))


def _peek(fh: BinaryIO, source: str, size: int = 16) -> bytes:
    try:
        head = fh.read(size)
        fh.seek(0)
    except OSError as exc:
        raise SnapshotFormatError(source, f"cannot be read ({exc.strerror or exc})") from None
    return head


def _decode_payload(fh: BinaryIO, size: int, source: str, room: Room, held: int = 0) -> tuple[Any, str, int | None]:
    """(the data, "pickle" or "json", the pickle protocol) of a payload; `held` is the payload's bytes that
    the caller holds in memory (an inflated one) and `room` measured before it was made."""
    head = _peek(fh, source)
    kind = payload_kind(head)
    if kind is None:
        raise SnapshotFormatError(source, f"is not a snapshot: {describe(head)}")
    if kind == "json":
        return parse_json(_read_json(fh, size, source, room, held), source, room), "json", None
    if isinstance(fh, io.BytesIO):
        fh = io.BufferedReader(fh)  # type: ignore[arg-type]  # peek lets the C unpickler read ahead
    protocol = head[1] if head[:1] == b"\x80" and len(head) > 1 else None
    return unpickle_file(fh, size, source, room, held), "pickle", protocol


def _read_json(fh: BinaryIO, size: int, source: str, room: Room, held: int) -> bytes:
    """The whole JSON text, read only when its text alone fits in memory."""
    if not held:
        check_json_size(size, source, room)
    try:
        return fh.read()  # an inflated payload: the buffer itself, not a copy
    except OSError as exc:
        raise SnapshotFormatError(source, f"cannot be read ({exc.strerror or exc})") from None


def _watch(room: Room, source: str) -> Watch:
    """What checks a gzip payload as it inflates: the output plus what it will decode to must fit in the
    memory available (the decode's bytes per byte estimated from the output's first SAMPLE_SIZE)."""
    def watch(out: io.BytesIO) -> None:
        produced = out.tell()
        if produced * (1 + SURE_FACTOR) <= room.available:
            return
        if room.factor is None:
            _measure(room, head_of(out, SAMPLE_SIZE))
        need = int(produced * (1 + (room.factor or 0)))
        if need > room.available:
            raise SnapshotFormatError(source, f"inflates past {format_bytes(produced)}, which needs about "
                                              f"{format_bytes(need)} of memory to inflate and decode (estimated from "
                                              f"its first {format_bytes(room.sampled)}) and "
                                              f"{format_bytes(room.available)} is available")
    return watch


def _measure(room: Room, sample: bytes) -> None:
    """The decode's bytes of memory per byte of payload, from the payload's first bytes."""
    if payload_kind(sample) == "json":
        need, _ = json_estimate(sample)
        room.factor, room.sampled = need / max(1, len(sample)) - 1, len(sample)
        return
    with address_space_cap(len(sample), room):  # a hostile memo index in the sample
        room.factor, room.sampled = sample_factor(sample)
