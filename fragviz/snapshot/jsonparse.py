"""JSON bytes to plain data in bounded memory.

Python's json builds every list and object the text names: a real snapshot takes 4-6 times its size once
parsed (the text decoded to a str, then dicts, lists and numbers), but `[{},{},...]` takes 3 bytes a dict
and ~27 times its size. So the memory a JSON needs is estimated before it is parsed, from the containers
and separators it holds (counted in C, at memory speed), with costs that sit above what Python takes for
every shape measured; a file past what the memory allows is refused up front, and the parse itself runs
under the address-space cap (fragviz.snapshot.memory), so a wrong estimate ends in one line too.
"""
from __future__ import annotations

import json
from typing import Any

from fragviz.base.errors import SnapshotFormatError
from fragviz.snapshot.memory import Room, address_space_cap
from fragviz.base.units import cut, format_bytes

# Bytes of memory per list or object (its header, its table or items, the pointer that holds it) and per
# other value (a pointer and a number, or a short string), above CPython 3.11's on 64 bits. The text is held
# twice besides: the bytes and the str decoded from them, which takes up to 4 bytes a character where the
# text is not ASCII.
CONTAINER_COST = 96
VALUE_COST = 64
TEXT_COPIES = 2
TEXT_COPIES_NOT_ASCII = 5


def json_estimate(data: bytes | bytearray) -> tuple[int, int]:
    """(bytes of memory that parsing `data` takes, the lists and objects it names): above what CPython
    takes for real snapshots and for every hostile shape measured, where the cap is what decides."""
    containers = data.count(b"{") + data.count(b"[")
    values = data.count(b",") + data.count(b":") + 1
    text = (TEXT_COPIES if data.isascii() else TEXT_COPIES_NOT_ASCII) * len(data)
    return text + CONTAINER_COST * containers + VALUE_COST * values, containers


def check_json_room(data: bytes | bytearray, source: str, room: Room) -> None:
    """Refuse a JSON whose parse would take more memory than is available to it: the memory available
    (measured before its text was read), and never more than its text plus what the cap allows."""
    need, containers = json_estimate(data)
    _check(need, len(data), source, room, f": {containers:,} lists and objects")


def check_json_size(size: int, source: str, room: Room) -> None:
    """Refuse, before its text is read, a JSON whose text alone would not fit."""
    _check(TEXT_COPIES * size, size, source, room, ", at least")


def _check(need: int, size: int, source: str, room: Room, what: str) -> None:
    available = min(room.available, size + room.allowance(size))
    if need > available:
        raise SnapshotFormatError(source, f"needs about {format_bytes(need)} of memory to parse as JSON "
                                          f"({need / max(1, size):.0f}x its {format_bytes(size)}{what}) and "
                                          f"{format_bytes(available)} is available to it")


def parse_json(data: bytes | bytearray, source: str, room: Room) -> Any:
    """Parse JSON bytes, refused up front when they would not fit (check_json_room), under the cap."""
    check_json_room(data, source, room)
    with address_space_cap(len(data), room):
        value = _parse(data, source)
    if value is _OUT_OF_MEMORY:
        raise SnapshotFormatError(source, room.too_little(len(data), "parse"))
    return value


_OUT_OF_MEMORY = object()


def _parse(data: bytes | bytearray, source: str) -> Any:
    try:
        return json.loads(data)
    except MemoryError:
        return _OUT_OF_MEMORY
    except RecursionError:
        raise SnapshotFormatError(source, "is nested too deeply to be a snapshot") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of more digits than Python reads
        raise SnapshotFormatError(source, f"is not valid JSON ({cut(str(exc))})") from None
