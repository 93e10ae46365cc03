"""Bytes to plain Python data, safely.

A snapshot is plain data (dicts, lists, strings, numbers, one kind of tuple), so the unpickler here
refuses every global: a file that names `os.system`, `builtins.eval` or any class is rejected before a
single object is built from it. Gzip is decompressed with a ratio guard against decompression bombs.
"""
from __future__ import annotations

import hashlib
import io
import json
import pickle
import zlib
from dataclasses import dataclass
from typing import Any

from fragviz.errors import SnapshotFormatError

# A real snapshot pickle compresses 5-30x; a stream that inflates past this ratio (once past the floor) is
# a decompression bomb, not a snapshot.
MAX_INFLATE_RATIO = 200
INFLATE_FLOOR = 64 * 1024 * 1024
_CHUNK = 1 << 20
# Opcodes a protocol 0 or 1 pickle of a dict or list (or a hostile one) can start with.
_OLD_PROTOCOL_STARTS = (b"(", b"]", b"}", b"c", b"i", b"R")

_SIGNATURES = (
    (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
    (b"%PDF", "a PDF document"), (b"PK\x03\x04", "a zip archive"), (b"\x7fELF", "an ELF binary"),
    (b"BZh", "a bzip2 archive"), (b"\xfd7zXZ", "an xz archive"), (b"<", "an HTML or XML document"),
)


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


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that builds only plain data; any global lookup is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refuses to load global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refuses persistent ids")


def read_raw(path: str, name: str | None = None) -> RawSnapshot:
    """Read the file at `path` and decode it to plain data."""
    source = name or path
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except IsADirectoryError:
        raise SnapshotFormatError(source, "is a directory, not a snapshot file") from None
    except OSError as exc:
        raise SnapshotFormatError(source, f"cannot be read ({exc.strerror or exc})") from None
    return decode_bytes(data, source)


def content_hash(data: bytes) -> str:
    """The identity of a snapshot file in the store: the SHA-256 of its bytes."""
    return hashlib.sha256(data).hexdigest()


def decode_bytes(data: bytes, source: str, digest: str | None = None) -> RawSnapshot:
    """Decode file bytes (pickle, gzip-compressed pickle or JSON) to plain data."""
    if not data:
        raise SnapshotFormatError(source, "is empty")
    digest = digest or content_hash(data)
    size = len(data)
    compression = None
    if data[:2] == b"\x1f\x8b":
        compression = "gzip"
        data = _gunzip(data, source)
        if not data:
            raise SnapshotFormatError(source, "is an empty gzip stream")
    content, encoding, protocol = _decode_payload(data, source)
    return RawSnapshot(source, content, encoding, compression, protocol, digest, size)


def _decode_payload(data: bytes, source: str) -> tuple[Any, str, int | None]:
    head = data[:16].lstrip()
    if data[:1] == b"\x80":
        return _unpickle(data, source), "pickle", data[1]
    if head[:1] in (b"{", b"["):
        return _parse_json(data, source), "json", None
    if data[:1] in _OLD_PROTOCOL_STARTS:  # protocols 0 and 1 have no PROTO opcode
        return _unpickle(data, source), "pickle", None
    raise SnapshotFormatError(source, f"is not a snapshot: {_describe(data)}")


def _unpickle(data: bytes, source: str) -> Any:
    if data[:1] == b"\x80" and not 0 <= data[1] <= pickle.HIGHEST_PROTOCOL:
        raise SnapshotFormatError(source, f"uses unknown pickle protocol {data[1]}")
    try:
        return _RestrictedUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as exc:
        msg = str(exc)
        if msg.startswith("refuses"):
            raise SnapshotFormatError(source, f"is not plain snapshot data: the pickle {msg}") from None
        raise SnapshotFormatError(source, f"is a corrupt pickle ({msg})") from None
    except EOFError:
        raise SnapshotFormatError(source, "is truncated: the pickle ends before its STOP opcode") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as exc:
        raise SnapshotFormatError(source, f"is a corrupt pickle ({type(exc).__name__}: {exc})") from None
    except MemoryError:
        raise SnapshotFormatError(source, "needs more memory to unpickle than is available") from None
    except RecursionError:
        raise SnapshotFormatError(source, "is nested too deeply to be a snapshot") from None


def _parse_json(data: bytes, source: str) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotFormatError(source, f"is not valid JSON ({exc})") from None
    except RecursionError:
        raise SnapshotFormatError(source, "is nested too deeply to be a snapshot") from None


def _gunzip(data: bytes, source: str) -> bytes:
    limit = max(INFLATE_FLOOR, len(data) * MAX_INFLATE_RATIO)
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = bytearray(inflater.decompress(data, 64))  # the head first: refuse a non-snapshot at once
        _check_inflated_head(bytes(out), source)
        while inflater.unconsumed_tail:
            out += inflater.decompress(inflater.unconsumed_tail, _CHUNK * 16)
            if len(out) > limit:
                raise SnapshotFormatError(
                    source, f"inflates past {MAX_INFLATE_RATIO}x its size: a decompression bomb, not a snapshot")
        out += inflater.flush()
    except zlib.error as exc:
        raise SnapshotFormatError(source, f"is a corrupt or truncated gzip stream ({exc})") from None
    if not inflater.eof:
        raise SnapshotFormatError(source, "is a truncated gzip stream")
    return bytes(out)


def _check_inflated_head(head: bytes, source: str) -> None:
    if not head or head[:1] == b"\x80" or head[:1] in _OLD_PROTOCOL_STARTS or head.lstrip()[:1] in (b"{", b"["):
        return
    raise SnapshotFormatError(source, f"is gzip-compressed but does not hold a snapshot: {_describe(head)}")


def _describe(data: bytes) -> str:
    for magic, what in _SIGNATURES:
        if data.lstrip()[: len(magic)] == magic:
            return f"the content is {what}"
    return f"unrecognised content starting with {data[:8]!r}"

