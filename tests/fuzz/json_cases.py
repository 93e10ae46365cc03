"""JSON bombs and oddities: what costs a parser far more than its size, or breaks it.

Python's json builds every list and object the text names (`[{},{},...]` takes ~27 times its size), recurses
once per level of nesting, reads integers of a bounded number of digits and holds every string whole. Each
case must be read or refused in one line, in bounded time and memory, as a file and inside gzip.
"""
from __future__ import annotations

import gzip
import json

from .case import Case
from .hostile import snapshot_template

MB = 1_000_000


def repeated(item: bytes, size: int, opener: bytes = b"[", closer: bytes = b"]") -> bytes:
    """`item` repeated, comma-separated, inside `opener`/`closer`, about `size` bytes in all."""
    count = max(1, size // (len(item) + 1))
    return opener + (item + b",") * (count - 1) + item + closer


def in_snapshot(where: str, raw: bytes) -> bytes:
    """The snapshot template as JSON with the value at `where` given as raw JSON text."""
    snap = snapshot_template()
    mark = "@@RAW@@"
    if where == "user-metadata":
        snap["device_traces"][0][4]["user_metadata"] = mark
    elif where == "frame-name":
        snap["device_traces"][0][2]["frames"][0]["name"] = mark
    elif where == "settings":
        snap["allocator_settings"]["extra"] = mark
    else:
        snap[where] = mark
    return json.dumps(snap).encode().replace(json.dumps(mark).encode(), raw, 1)


def cases(big: bool = True) -> list[Case]:
    """Every JSON oddity; `big` adds the tens-of-megabytes bombs (a second or two each)."""
    deep = 200_000
    out = {
        "empty-objects-1MB": repeated(b"{}", MB),
        "empty-lists-1MB": repeated(b"[]", MB),
        "nested-pairs-1MB": repeated(b"[[]]", MB),
        "objects-of-empty-objects-1MB": repeated(b'{"a":{}}', MB),
        "deep-lists": b"[" * deep + b"]" * deep,
        "deep-objects": b'{"a":' * deep + b"0" + b"}" * deep,
        "deep-unclosed": b"[" * deep,
        "deep-in-user-metadata": in_snapshot("user-metadata", b"[" * deep + b"]" * deep),
        "deep-in-frame-name": in_snapshot("frame-name", b'{"k":' * deep + b"1" + b"}" * deep),
        "long-string-16MB": in_snapshot("user-metadata", b'"' + b"a" * (16 * MB) + b'"'),
        "long-string-in-frame-name-4MB": in_snapshot("frame-name", b'"' + b"x" * (4 * MB) + b'"'),
        "long-key-4MB": in_snapshot("settings", b'{"' + b"k" * (4 * MB) + b'":1}'),
        "many-escapes-4MB": in_snapshot("user-metadata", b'"' + b"\\u00e9" * (MB // 2) + b'"'),
        "astral-strings-2MB": repeated('"\U0001F600"'.encode(), 2 * MB),
        "integer-4300-digits": in_snapshot("user-metadata", b"9" * 4300),
        "integer-4301-digits": in_snapshot("user-metadata", b"9" * 4301),
        "integer-1M-digits": in_snapshot("user-metadata", b"1" * MB),
        "integers-of-4300-digits-4MB": repeated(b"7" * 4300, 4 * MB),
        "float-1e999": in_snapshot("user-metadata", b"1e999"),
        "float-long-mantissa-1MB": in_snapshot("user-metadata", b"0." + b"1" * MB),
        "nan-and-infinity": in_snapshot("settings", b"[NaN, Infinity, -Infinity]"),
        "many-keys-4MB": b"{" + b",".join(b'"%d":0' % i for i in range(4 * MB // 10)) + b"}",
        "duplicate-keys-4MB": repeated(b'"segments":[]', 4 * MB, b"{", b"}"),
        "numbers-4MB": repeated(b"0", 4 * MB),
        "utf8-bom": b"\xef\xbb\xbf" + json.dumps(snapshot_template()).encode(),
        "truncated": json.dumps(snapshot_template()).encode()[:-10],
        "trailing-garbage": json.dumps(snapshot_template()).encode() + b"garbage",
        "lone-surrogate-escape": in_snapshot("frame-name", b'"\\ud800"'),
        "invalid-utf8": in_snapshot("frame-name", b'"\xff\xfe"'),
    }
    if big:
        out["empty-objects-40MB"] = repeated(b"{}", 40 * MB)
        out["empty-lists-40MB"] = repeated(b"[]", 40 * MB)
        out["nested-pairs-40MB"] = repeated(b"[[]]", 40 * MB)
        out["empty-objects-in-trace-20MB"] = in_snapshot("user-metadata", repeated(b"{}", 20 * MB))
        out["gzip-of-empty-objects-100MB"] = gzip.compress(repeated(b"{}", 100 * MB), 9)
    return [Case(f"json/{name}", data, "json") for name, data in out.items()]
