"""Pickle bytes to plain data, safely, in bounded memory.

A snapshot is plain data (dicts, lists, strings, numbers, one kind of tuple), so the unpicklers here refuse
every global: a file that names `os.system`, `builtins.eval` or any class is rejected before a single object
is built from it. Every decode runs under the address-space cap (fragviz.snapshot.memory), and a pickle
whose decoded form would not fit in the memory available is refused before it is decoded.
"""
from __future__ import annotations

import io
import pickle
import tracemalloc
from typing import Any, BinaryIO

from fragviz.base.errors import SnapshotFormatError
from fragviz.snapshot.memory import Room, address_space_cap
from fragviz.base.units import cut, format_bytes

# After the C unpickler runs out of memory, a pickle up to this size is read again by Python's own, which
# allocates a counted value only as the file holds it (hostile files are small); a larger one needs the memory.
FALLBACK_MAX = 64 << 20
# A pickle this many times its size fits in the memory available whatever it holds (real snapshots decode to
# 3-13x); a larger one has its first SAMPLE_SIZE bytes decoded under tracemalloc to estimate what it needs.
SURE_FACTOR = 16
SAMPLE_SIZE = 16 << 20


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


class _Clamped:
    """A file whose reads ask for no more than what is left of it: a buffered file allocates the size asked
    for before it reads, and Python's unpickler asks for the size a value declares."""

    def __init__(self, fh: BinaryIO, size: int) -> None:
        self.fh, self.size = fh, size

    def read(self, n: int = -1) -> bytes:
        left = max(0, self.size - self.fh.tell())
        return self.fh.read(left if n is None or n < 0 else min(n, left))

    def readline(self, limit: int = -1) -> bytes:
        return self.fh.readline(limit)


class _OutOfMemory:
    """What a decode that ran out of its allowance returns (the message is built once the cap is lifted)."""


OUT_OF_MEMORY = _OutOfMemory()


def check_protocol(head: bytes, source: str) -> None:
    if head[:1] == b"\x80" and (len(head) < 2 or not 0 <= head[1] <= pickle.HIGHEST_PROTOCOL):
        raise SnapshotFormatError(source, f"uses unknown pickle protocol {head[1] if len(head) > 1 else '(none given)'}")


def unpickle_file(fh: BinaryIO, size: int, source: str, room: Room, held: int = 0) -> Any:
    """Decode a pickle of `size` bytes with the C unpickler; after a MemoryError, a small one again with
    Python's own, which reads a counted value before it allocates it (the C one allocates a BINBYTES value,
    or a memo table, at the size the file declares, so a few bytes can ask for gigabytes; read as declared,
    such a file is truncated). A large one that does not fit is refused with the memory it needs. `held` is
    what the caller already holds of what `room` measured (an inflated payload)."""
    check_protocol(fh.read(2), source)
    fh.seek(0)
    check_room(fh, size, source, room, held)
    with address_space_cap(size, room):
        value = _attempt(_RestrictedUnpickler, fh, source, "the pickle ends before its STOP opcode")
        if value is OUT_OF_MEMORY and size <= FALLBACK_MAX:
            fh.seek(0)
            value = _attempt(_RestrictedPyUnpickler, _Clamped(fh, size), source,  # type: ignore[arg-type]
                             "a value is shorter than its declared size")
    if value is OUT_OF_MEMORY:
        raise SnapshotFormatError(source, room.too_little(size))
    return value


def _attempt(unpickler: type[pickle.Unpickler], fh: BinaryIO, source: str, truncated: str) -> Any:
    try:
        return _load(unpickler, fh, source, truncated)
    except MemoryError:
        return OUT_OF_MEMORY


def check_room(fh: BinaryIO, size: int, source: str, room: Room, held: int = 0) -> None:
    """Refuse, before decoding, a pickle whose decoded form would not fit in the memory available."""
    available = room.available - held
    if size * SURE_FACTOR <= available:
        return
    if room.factor is None:
        with address_space_cap(min(size, SAMPLE_SIZE), room):  # the sample decode is capped too (a memo index)
            need, room.sampled = estimated_memory(fh, size)
        room.factor = need / max(1, size)
        fh.seek(0)
    need = int(room.factor * size)
    if need > available:
        raise SnapshotFormatError(source, f"needs about {format_bytes(need)} of memory to decode "
                                          f"({need / size:.1f}x its {format_bytes(size)}, estimated from its "
                                          f"first {format_bytes(room.sampled)}) and {format_bytes(available)} is available")


def estimated_memory(fh: BinaryIO, size: int) -> tuple[int, int]:
    """What decoding the pickle in `fh` will take: its first SAMPLE_SIZE bytes decoded under tracemalloc (the
    unpickler stops where the sample ends, or where memory runs out), scaled from the bytes it read to the size:
    (the estimate, the bytes it is drawn from)."""
    sample = fh.read(SAMPLE_SIZE)
    if len(sample) >= size:
        return SURE_FACTOR * size, size
    factor, read = sample_factor(sample)
    return int(factor * size), read


def sample_factor(sample: bytes) -> tuple[float, int]:
    """Bytes of memory per byte of pickle that the start of a pickle decodes to, and the bytes measured."""
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
    return peak / read, read


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
