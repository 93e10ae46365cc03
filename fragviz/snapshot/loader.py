"""Bytes to plain Python data, safely.

A snapshot is plain data (dicts, lists, strings, numbers, one kind of tuple), so the unpickler here
refuses every global: a file that names `os.system`, `builtins.eval` or any class is rejected before a
single object is built from it. Gzip is inflated member by member under a ratio and an absolute cap that
apply from the first byte (fragviz.limits); what the payload may hold is checked by the parser.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import stat
import threading
import tracemalloc
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator

try:
    import resource
except ImportError:  # not on Windows: no cap there
    resource = None  # type: ignore[assignment]

from fragviz.errors import SnapshotFormatError
from fragviz.limits import Limits
from fragviz.units import bytes_text, cut, format_bytes

GZIP_MAGIC = b"\x1f\x8b"
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
    payload_size: int = 0  # bytes after decompression: what the unpickler or JSON parser read


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that builds only plain data; any global lookup is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refuses to load global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refuses persistent ids")


class _RestrictedPyUnpickler(pickle._Unpickler):  # type: ignore[name-defined]
    """The same refusals on Python's pure unpickler (slow; used only after the C one ran out of memory)."""

    find_class = _RestrictedUnpickler.find_class
    persistent_load = _RestrictedUnpickler.persistent_load
    dispatch = dict(pickle._Unpickler.dispatch)  # type: ignore[attr-defined]

    def _load_bytearray8(self) -> None:  # Python's allocates the declared size first, too
        size = int.from_bytes(self.read(8), "little")
        value = self.read(size)
        if len(value) < size:
            raise EOFError
        self.append(bytearray(value))

    dispatch[pickle.BYTEARRAY8[0]] = _load_bytearray8


def read_raw(path: str, name: str | None = None, limits: Limits | None = None) -> RawSnapshot:
    """Read the file at `path` and decode it to plain data."""
    source = name or path
    limits = limits or Limits.current()
    return decode_file(path, source, file_digest(path, source, limits), limits)


def file_digest(path: str, source: str, limits: Limits) -> str:
    """The content hash of the file at `path`, read in chunks (the file is not held in memory)."""
    h = hashlib.sha256()
    with _opened(path, source) as fh:
        if not _is_regular(fh):
            return content_hash(read_file(path, source, limits))
        _check_size(os.fstat(fh.fileno()).st_size, source, limits)
        read = 0
        while chunk := fh.read(_CHUNK):
            read += len(chunk)
            if read > limits.max_file_size:  # a file that grew while read
                raise limits.refuse(source, "max_file_size", f"is over {limits.max_file_size:,} bytes")
            h.update(chunk)
    return h.hexdigest()


def decode_file(path: str, source: str, digest: str, limits: Limits) -> RawSnapshot:
    """Decode the file at `path` to plain data. An uncompressed pickle is unpickled as it is read, so the
    file's bytes are never held next to what they decode to; gzip and JSON are read whole first."""
    with _opened(path, source) as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(2)
        if not _is_regular(fh) or head == GZIP_MAGIC or head[:1] != b"\x80":
            fh.close()
            return decode_bytes(read_file(path, source, limits), source, digest, limits)
        _check_size(size, source, limits)
        fh.seek(0)
        content = _unpickle_file(fh, size, source)
    return RawSnapshot(source, content, "pickle", None, head[1], digest, size, size)


@contextmanager
def _opened(path: str, source: str) -> Iterator[BinaryIO]:
    try:
        fh = open(path, "rb")
    except IsADirectoryError:
        raise SnapshotFormatError(source, "is a directory, not a snapshot file") from None
    except OSError as exc:
        raise SnapshotFormatError(source, f"cannot be read ({exc.strerror or exc})") from None
    with fh:
        yield fh


def _is_regular(fh: BinaryIO) -> bool:
    return stat.S_ISREG(os.fstat(fh.fileno()).st_mode)


def _check_size(size: int, source: str, limits: Limits) -> None:
    if size > limits.max_file_size:
        raise limits.refuse(source, "max_file_size", f"is {size:,} bytes")


def read_file(path: str, source: str, limits: Limits) -> bytes:
    """The bytes of a snapshot file, refused unread when it is larger than max_file_size."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > limits.max_file_size:
                raise limits.refuse(source, "max_file_size", f"is {size:,} bytes")
            data = fh.read(size) if size else b""
            more = fh.read(1 << 20)
            while more and len(data) <= limits.max_file_size:  # a file that grows, or one with no size (a pipe)
                data += more
                more = fh.read(1 << 20)
    except IsADirectoryError:
        raise SnapshotFormatError(source, "is a directory, not a snapshot file") from None
    except OSError as exc:
        raise SnapshotFormatError(source, f"cannot be read ({exc.strerror or exc})") from None
    if len(data) > limits.max_file_size:  # a file that grew while read, or a device with no size
        raise limits.refuse(source, "max_file_size", f"is over {limits.max_file_size:,} bytes")
    return data


def content_hash(data: bytes) -> str:
    """The identity of a snapshot file in the store: the SHA-256 of its bytes."""
    return hashlib.sha256(data).hexdigest()


def decode_bytes(data: bytes, source: str, digest: str | None = None, limits: Limits | None = None) -> RawSnapshot:
    """Decode file bytes (pickle, gzip-compressed pickle or JSON) to plain data."""
    if not data:
        raise SnapshotFormatError(source, "is empty")
    limits = limits or Limits.current()
    if len(data) > limits.max_file_size:
        raise limits.refuse(source, "max_file_size", f"is {len(data):,} bytes")
    digest = digest or content_hash(data)
    size = len(data)
    compression = None
    if data[:2] == GZIP_MAGIC:
        compression = "gzip"
        data = gunzip(data, source, limits)
        if not data:
            raise SnapshotFormatError(source, "is an empty gzip stream")
    content, encoding, protocol = _decode_payload(data, source)
    return RawSnapshot(source, content, encoding, compression, protocol, digest, size, len(data))


def _decode_payload(data: bytes, source: str) -> tuple[Any, str, int | None]:
    head = data[:16].lstrip()
    if data[:1] == b"\x80":
        return _unpickle(data, source), "pickle", data[1] if len(data) > 1 else None
    if head[:1] in (b"{", b"["):
        return _parse_json(data, source), "json", None
    if data[:1] in _OLD_PROTOCOL_STARTS:  # protocols 0 and 1 have no PROTO opcode
        return _unpickle(data, source), "pickle", None
    raise SnapshotFormatError(source, f"is not a snapshot: {_describe(data)}")


# While a pickle is decoded, the process's address space may grow by this much plus this many times the
# pickle's size (what a real pickle needs several times over: a bare load takes 3-13x), and never by more
# than the memory available: far less than a file that names a huge memo index or counted size makes
# CPython's C unpickler allocate up front, and a MemoryError rather than the kernel's OOM killer.
UNPICKLE_FLOOR = 512 << 20
UNPICKLE_FACTOR = 16
# After the C unpickler runs out of memory, a pickle up to this size is read again by Python's own, which
# allocates a counted value only as the file holds it (hostile files are small); a larger one needs the memory.
FALLBACK_MAX = 64 << 20
# A pickle this many times its size fits in the memory available whatever it holds (real snapshots decode to
# 3-13x); a larger one has its first SAMPLE_SIZE bytes decoded under tracemalloc to estimate what it needs.
SURE_FACTOR = 16
SAMPLE_SIZE = 16 << 20


@contextmanager
def _address_space_cap(payload: int) -> Iterator[None]:
    """RLIMIT_AS lowered for the unpickle, then restored: only while this is the process's one Python thread
    (a command, a worker), since the limit binds every thread; a threaded server ingests uploads in a child."""
    if resource is None or threading.active_count() != 1:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    now = _address_space()
    cap = now + min(UNPICKLE_FLOOR + UNPICKLE_FACTOR * payload, max(UNPICKLE_FLOOR, memory_available()))
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft != resource.RLIM_INFINITY and soft <= cap:
        yield  # already held tighter
        return
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _address_space() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def memory_available() -> int:
    """Bytes this process can still take: the kernel's MemAvailable (what it gives without swapping), or less
    where the process's address space is capped (RLIMIT_AS); a large figure where neither is known."""
    available = 1 << 50
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if resource is not None:
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            available = min(available, max(0, soft - _address_space()))
    return available


def _unpickle(data: bytes, source: str) -> Any:
    return _unpickle_file(io.BytesIO(data), len(data), source)


def _check_protocol(head: bytes, source: str) -> None:
    if head[:1] == b"\x80" and (len(head) < 2 or not 0 <= head[1] <= pickle.HIGHEST_PROTOCOL):
        raise SnapshotFormatError(source, f"uses unknown pickle protocol {head[1] if len(head) > 1 else '(none given)'}")


def _unpickle_file(fh: BinaryIO, size: int, source: str) -> Any:
    """Decode a pickle of `size` bytes with the C unpickler; after a MemoryError, a small one again with
    Python's own, which reads a counted value before it allocates it (the C one allocates a BINBYTES value,
    or a memo table, at the size the file declares, so a few bytes can ask for gigabytes; read as declared,
    such a file is truncated). A large one that does not fit is refused with the memory it needs."""
    _check_protocol(fh.read(2), source)
    fh.seek(0)
    with _address_space_cap(size):  # the estimate's sample decode is capped too (a hostile memo index)
        _check_room(fh, size, source)
        try:
            return _load(_RestrictedUnpickler, fh, source, "the pickle ends before its STOP opcode")
        except MemoryError:
            pass
        if size > FALLBACK_MAX:
            raise SnapshotFormatError(source, f"needs more memory to decode than the "
                                              f"{format_bytes(memory_available())} available") from None
        fh.seek(0)
        try:
            return _load(_RestrictedPyUnpickler, fh, source, "a value is shorter than its declared size")
        except MemoryError:
            raise SnapshotFormatError(source, f"needs more memory to decode than the "
                                              f"{format_bytes(memory_available())} available") from None


def _check_room(fh: BinaryIO, size: int, source: str) -> None:
    """Refuse, before decoding, a pickle whose decoded form would not fit in the memory available."""
    available = memory_available()
    if size * SURE_FACTOR <= available:
        return
    need, sampled = estimated_memory(fh, size)
    fh.seek(0)
    if need > available:
        raise SnapshotFormatError(source, f"needs about {format_bytes(need)} of memory to decode "
                                          f"({need / size:.1f}x its {format_bytes(size)}, estimated from its "
                                          f"first {format_bytes(sampled)}) and {format_bytes(available)} is available")


def estimated_memory(fh: BinaryIO, size: int) -> tuple[int, int]:
    """What decoding the pickle in `fh` will take: its first SAMPLE_SIZE bytes decoded under tracemalloc (the
    unpickler stops where the sample ends, or where memory runs out), scaled from the bytes it read to the size:
    (the estimate, the bytes it is drawn from)."""
    sample = fh.read(SAMPLE_SIZE)
    if len(sample) >= size:
        return SURE_FACTOR * size, size
    stream = io.BytesIO(sample)
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        _RestrictedUnpickler(stream).load()
    except Exception:  # noqa: BLE001  the sample always ends early (EOFError, or MemoryError where it is short)
        pass
    peak = tracemalloc.get_traced_memory()[1]
    if not was_tracing:
        tracemalloc.stop()
    read = max(1, stream.tell())
    return int(peak / read * size), read


def _load(unpickler: type[pickle.Unpickler], fh: BinaryIO, source: str, truncated: str) -> Any:
    """One unpickler's load, every failure but MemoryError said as one line about the file."""
    try:
        return unpickler(fh).load()
    except pickle.UnpicklingError as exc:
        msg = cut(str(exc))
        if msg.startswith("refuses"):
            raise SnapshotFormatError(source, f"is not plain snapshot data: the pickle {msg}") from None
        raise SnapshotFormatError(source, f"is a corrupt pickle ({msg})") from None
    except EOFError:
        raise SnapshotFormatError(source, f"is truncated: {truncated}") from None
    except RecursionError:
        raise SnapshotFormatError(source, "is nested too deeply to be a snapshot") from None
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001  any other failure of the decoder on untrusted bytes is a bad file
        raise SnapshotFormatError(source, f"is a corrupt pickle ({type(exc).__name__}: {cut(str(exc))})") from None


def _parse_json(data: bytes, source: str) -> Any:
    try:
        return json.loads(data)
    except RecursionError:
        raise SnapshotFormatError(source, "is nested too deeply to be a snapshot") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of more digits than Python reads
        raise SnapshotFormatError(source, f"is not valid JSON ({cut(str(exc))})") from None


# Output a gzip stream may produce before its ratio is judged (a deflate block's worth of a legitimate file)
RATIO_SLACK = 1 << 20


class _Inflation:
    """How far a gzip file may inflate: max_inflate_ratio times the bytes read so far (from the first byte,
    member after member), and never past max_inflated_size."""

    def __init__(self, source: str, limits: Limits) -> None:
        self.source, self.limits = source, limits

    def check(self, produced: int, consumed: int) -> None:
        limits = self.limits
        if produced > limits.max_inflate_ratio * consumed + RATIO_SLACK:
            raise limits.refuse(self.source, "max_inflate_ratio", f"inflates past {limits.max_inflate_ratio}x "
                                                                  "its size: a decompression bomb, not a snapshot")
        if produced > limits.max_inflated_size:
            raise limits.refuse(self.source, "max_inflated_size", f"inflates past {limits.max_inflated_size:,} bytes")


def gunzip(data: bytes, source: str, limits: Limits) -> bytes:
    """Inflate a gzip file, every member of it, in bounded time and memory.

    The gzip format allows several members one after another (the content is theirs joined) and zero
    bytes after the last (padding); anything else after it is an error. The output is checked against
    the bytes read after every step (_Inflation), so a bomb is refused after a few megabytes of it.
    """
    budget = _Inflation(source, limits)
    out = bytearray()
    rest = memoryview(data)
    while rest:
        if bytes(rest[:2]) != GZIP_MAGIC:
            if not bytes(rest).strip(b"\0"):
                break  # zero padding after the last member, as gzip(1) allows
            raise SnapshotFormatError(source, f"has {len(rest):,} bytes after its gzip stream that are not "
                                              "another gzip member")
        rest = _inflate_member(rest, out, len(data) - len(rest), budget, source)
    _check_inflated_head(bytes(out[:64]), source)
    return bytes(out)


def _inflate_member(data: memoryview, out: bytearray, offset: int, budget: _Inflation, source: str) -> memoryview:
    """Inflate the gzip member at the start of `data` (byte `offset` of the file) onto `out`; the rest.

    Each step either consumes input or produces output (else the stream is truncated), so it ends.
    """
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = data
    try:
        while not inflater.eof:
            before = len(out)
            out += inflater.decompress(pending, _CHUNK)
            if before < 64 <= len(out):
                _check_inflated_head(bytes(out[:64]), source)  # refuse a non-snapshot before inflating it all
            tail = inflater.unconsumed_tail
            budget.check(len(out), offset + len(data) - len(tail))
            if not inflater.eof and len(out) == before and len(tail) >= len(pending):
                raise SnapshotFormatError(source, "is a truncated gzip stream")
            pending = tail
    except zlib.error as exc:
        raise SnapshotFormatError(source, f"is a corrupt or truncated gzip stream ({cut(str(exc))})") from None
    return memoryview(inflater.unused_data)


def _check_inflated_head(head: bytes, source: str) -> None:
    if not head or head[:1] == b"\x80" or head[:1] in _OLD_PROTOCOL_STARTS or head.lstrip()[:1] in (b"{", b"["):
        return
    raise SnapshotFormatError(source, f"is gzip-compressed but does not hold a snapshot: {_describe(head)}")


def _describe(data: bytes) -> str:
    for magic, what in _SIGNATURES:
        if data.lstrip()[: len(magic)] == magic:
            return f"the content is {what}"
    return f"unrecognised content starting with {bytes_text(data[:8])}"

