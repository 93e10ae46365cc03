"""Plain data to pickle or JSON bytes, written opcode by opcode.

The standard pickler recurses (so it cannot write a list nested a million deep) and picks its own
opcodes; the fuzzer needs both: any depth, every protocol 0-5, shared references kept as memo
references (BINPUT/BINGET), cycles, and raw opcode fragments spliced into an otherwise real snapshot.
Two sentinels carry that through a plain-data tree: `Nest` (a value wrapped `depth` lists or dicts deep,
written with EMPTY_LIST/APPEND) and `Raw` (opcode bytes that push exactly one object).
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Nest:
    """`leaf` wrapped `depth` times in a one-element list (kind "list") or a one-key dict (kind "dict")."""

    depth: int
    leaf: Any = 0
    kind: str = "list"


@dataclass(frozen=True)
class Raw:
    """Pickle opcodes that push one object (a hostile fragment); JSON writes `json` in its place."""

    ops: bytes
    json: str = '"raw"'


def _uleb(n: int, size: int) -> bytes:
    return n.to_bytes(size, "little")


def encode_long(x: int) -> bytes:
    """Two's complement little-endian, as pickle's LONG1/LONG4 want it."""
    if x == 0:
        return b""
    n = (x.bit_length() >> 3) + 1
    out = x.to_bytes(n, "little", signed=True)
    if x < 0 and n > 1 and out[-1] == 0xFF and (out[-2] & 0x80):
        out = out[:-1]
    return out


class PickleWriter:
    """An iterative plain-data pickler for protocols 0-5 (no FRAME opcodes: they are optional)."""

    def __init__(self, protocol: int = 4) -> None:
        self.p = protocol
        self.memo: dict[int, int] = {}
        self.out = bytearray()
        self.keep: list[Any] = []  # objects whose id() is a memo key stay alive

    def dumps(self, obj: Any) -> bytes:
        self.shared = _shared_ids(obj)
        if self.p >= 2:
            self.out += b"\x80" + bytes([self.p])
        self._write(obj)
        self.out += b"."
        return bytes(self.out)

    # memo ---------------------------------------------------------------------------------------
    def _put(self, obj: Any) -> None:
        if id(obj) not in self.shared:
            return
        idx = len(self.memo)
        self.memo[id(obj)] = idx
        self.keep.append(obj)
        if self.p >= 4:
            self.out += b"\x94"
        elif self.p >= 1:
            self.out += b"q" + bytes([idx]) if idx < 256 else b"r" + struct.pack("<I", idx)
        else:
            self.out += b"p%d\n" % idx

    def _get(self, idx: int) -> bytes:
        if self.p >= 1:
            return b"h" + bytes([idx]) if idx < 256 else b"j" + struct.pack("<I", idx)
        return b"g%d\n" % idx

    # writing ------------------------------------------------------------------------------------
    def _write(self, root: Any) -> None:
        stack: list[tuple[bool, Any]] = [(False, root)]
        while stack:
            is_raw, item = stack.pop()
            if is_raw:
                if isinstance(item, _DeferredPut):
                    self._put(item.obj)
                else:
                    self.out += item
            elif isinstance(item, Raw):
                self.out += item.ops
            elif id(item) in self.memo and isinstance(item, (list, dict, tuple, str, bytes, Nest)):
                self.out += self._get(self.memo[id(item)])
            elif isinstance(item, list):
                self._open_list(item, stack)
            elif isinstance(item, dict):
                self._open_dict(item, stack)
            elif isinstance(item, tuple):
                self._open_tuple(item, stack)
            elif isinstance(item, Nest):
                self._open_nest(item, stack)
            else:
                self._scalar(item)

    def _open_list(self, item: list, stack: list) -> None:
        self.out += b"]" if self.p >= 1 else b"(l"
        self._put(item)
        if self.p >= 1:
            for start in reversed(range(0, len(item), 1000)):
                stack.append((True, b"e"))
                stack.extend((False, v) for v in reversed(item[start:start + 1000]))
                stack.append((True, b"("))
        else:
            for v in reversed(item):
                stack.append((True, b"a"))
                stack.append((False, v))

    def _open_dict(self, item: dict, stack: list) -> None:
        self.out += b"}" if self.p >= 1 else b"(d"
        self._put(item)
        pairs = list(item.items())
        if self.p >= 1:
            for start in reversed(range(0, len(pairs), 1000)):
                stack.append((True, b"u"))
                for k, v in reversed(pairs[start:start + 1000]):
                    stack.append((False, v))
                    stack.append((False, k))
                stack.append((True, b"("))
        else:
            for k, v in reversed(pairs):
                stack.append((True, b"s"))
                stack.append((False, v))
                stack.append((False, k))

    def _open_tuple(self, item: tuple, stack: list) -> None:
        n = len(item)
        if self.p >= 2 and n <= 3:
            closer = b")" if n == 0 else bytes([0x84 + n])
            opener = b""
        else:
            closer, opener = b"t", b"("
        stack.append((True, _DeferredPut(item)))
        stack.append((True, closer))
        stack.extend((False, v) for v in reversed(item))
        if opener:
            stack.append((True, opener))

    def _open_nest(self, item: Nest, stack: list) -> None:
        d = item.depth
        if item.kind == "dict":
            key = self._scalar_bytes("k")
            opener = (b"}" if self.p >= 1 else b"(d") + key
            self.out += opener * d
            stack.append((True, b"s" * d))
        else:
            self.out += (b"]" if self.p >= 1 else b"(l") * d
            stack.append((True, b"a" * d))
        stack.append((True, _DeferredPut(item)))
        stack[-1], stack[-2] = stack[-2], stack[-1]
        stack.append((False, item.leaf))

    def _scalar(self, x: Any) -> None:
        self.out += self._scalar_bytes(x)
        if isinstance(x, (str, bytes)) and id(x) in self.shared and id(x) not in self.memo:
            self._put(x)

    def _scalar_bytes(self, x: Any) -> bytes:
        p = self.p
        if x is None:
            return b"N"
        if x is True or x is False:
            if p >= 2:
                return b"\x88" if x else b"\x89"
            return b"I01\n" if x else b"I00\n"
        if isinstance(x, int):
            return self._int(x)
        if isinstance(x, float):
            return b"G" + struct.pack(">d", x) if p >= 1 else b"F" + repr(x).encode() + b"\n"
        if isinstance(x, str):
            return self._str(x)
        if isinstance(x, bytes):
            return self._bytes(x)
        raise TypeError(f"cannot encode {type(x).__name__}")

    def _int(self, x: int) -> bytes:
        if self.p >= 1:
            if 0 <= x < 256:
                return b"K" + bytes([x])
            if 0 <= x < 65536:
                return b"M" + struct.pack("<H", x)
            if -(2 ** 31) <= x < 2 ** 31:
                return b"J" + struct.pack("<i", x)
        if self.p >= 2:
            enc = encode_long(x)
            if len(enc) < 256:
                return b"\x8a" + bytes([len(enc)]) + enc
            return b"\x8b" + struct.pack("<i", len(enc)) + enc
        if -(2 ** 31) <= x < 2 ** 31:
            return b"I%d\n" % x
        return b"L%dL\n" % x

    def _str(self, x: str) -> bytes:
        if self.p >= 1:
            enc = x.encode("utf-8", "surrogatepass")
            if self.p >= 4 and len(enc) < 256:
                return b"\x8c" + bytes([len(enc)]) + enc
            return b"X" + struct.pack("<I", len(enc)) + enc
        esc = (x.replace("\\", "\\u005c").replace("\0", "\\u0000").replace("\n", "\\u000a")
               .replace("\r", "\\u000d").replace("\x1a", "\\u001a"))
        return b"V" + esc.encode("raw-unicode-escape") + b"\n"

    def _bytes(self, x: bytes) -> bytes:
        if self.p >= 3:
            return (b"C" + bytes([len(x)]) if len(x) < 256 else b"B" + struct.pack("<I", len(x))) + x
        if self.p >= 1:  # a Python 2 str: unpickled as ASCII text by default
            return (b"U" + bytes([len(x)]) if len(x) < 256 else b"T" + struct.pack("<I", len(x))) + x
        return b"S" + repr(x)[1:].encode() + b"\n"


class _DeferredPut:
    """The PUT of a tuple, written once its items and closer are out (a tuple is memoised after it is built)."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj


def _shared_ids(root: Any) -> set[int]:
    """ids of containers, strings and sentinels reached more than once (they get a memo slot)."""
    seen: set[int] = set()
    shared: set[int] = set()
    stack = [root]
    while stack:
        x = stack.pop()
        if not isinstance(x, (list, dict, tuple, str, bytes, Nest)):
            continue
        if isinstance(x, (str, bytes)) and len(x) < 64:
            continue
        if id(x) in seen:
            shared.add(id(x))
            continue
        seen.add(id(x))
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, Nest):
            stack.append(x.leaf)
    return shared


def expanded_size(root: Any, cap: int = 2_000_000) -> int:
    """How many nodes the tree has once shared references are copied out (stops counting at `cap`).

    A cycle counts as `cap`: such data has no finite expansion.
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        x, done = stack.pop()
        if not isinstance(x, (list, dict, tuple, Nest)):
            continue
        key = id(x)
        if done:
            on_path.discard(key)
            kids = _children(x)
            total = 1 + sum(sizes.get(id(k), 1) for k in kids)
            if isinstance(x, Nest):
                total += x.depth
            sizes[key] = min(total, cap)
            continue
        if key in sizes:
            continue
        if key in on_path:
            return cap
        on_path.add(key)
        stack.append((x, True))
        stack.extend((k, False) for k in _children(x))
    return sizes.get(id(root), 1)


def _children(x: Any) -> list:
    if isinstance(x, (list, tuple)):
        return list(x)
    if isinstance(x, dict):
        return list(x.keys()) + list(x.values())
    if isinstance(x, Nest):
        return [x.leaf]
    return []


def to_pickle(obj: Any, protocol: int = 4) -> bytes:
    return PickleWriter(protocol).dumps(obj)


JSON_NODES = 200_000


def to_json(obj: Any) -> bytes | None:
    """JSON bytes of the tree (sentinels spliced in as text), or None where JSON cannot say it (cycles, bombs).

    Trees over `JSON_NODES` nodes once shared references are copied out stay pickles: JSON has no memo.
    """
    if expanded_size(obj, JSON_NODES) >= JSON_NODES:
        return None
    splices: dict[str, str] = {}

    def default(x: Any) -> Any:
        if isinstance(x, bytes):
            return x.decode("latin-1")
        if isinstance(x, (Nest, Raw)):
            mark = f"@@splice{len(splices)}@@"
            if isinstance(x, Raw):
                splices[mark] = x.json
            else:
                leaf = json.dumps(x.leaf, default=default)
                opener, closer = ("[", "]") if x.kind == "list" else ('{"k":', "}")
                splices[mark] = opener * x.depth + leaf + closer * x.depth
            return mark
        raise TypeError(type(x).__name__)

    try:
        text = json.dumps(obj, default=default, check_circular=True)
    except (ValueError, TypeError, RecursionError):
        return None
    for mark, body in splices.items():
        text = text.replace(json.dumps(mark), body, 1)
    return text.encode("utf-8", "surrogatepass")
