"""Gzip oddities: trailing bytes, more members, truncation, bad checksums, header flags, bombs, nesting.

Python's gzip module reads multi-member files and stops at trailing zero bytes, so a loader must say what
it does with each of these in bounded time: read them as the format says, or refuse them in one line.
"""
from __future__ import annotations

import functools
import gzip
import random
import struct
import zlib

from .case import Case
from .encode import to_json, to_pickle
from .hostile import snapshot_template

FTEXT, FHCRC, FEXTRA, FNAME, FCOMMENT = 1, 2, 4, 8, 16


def deflate_raw(data: bytes, level: int = 9) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


def member(data: bytes, flags: int = 0, extra: bytes = b"", fname: bytes = b"snap.pickle",
           comment: bytes = b"a comment", crc: int | None = None, isize: int | None = None, method: int = 8,
           hcrc: int | None = None) -> bytes:
    """One gzip member, header fields and trailer written by hand."""
    head = struct.pack("<BBBBIBB", 0x1F, 0x8B, method, flags, 0, 2, 255)
    if flags & FEXTRA:
        head += struct.pack("<H", len(extra)) + extra
    if flags & FNAME:
        head += fname + b"\0"
    if flags & FCOMMENT:
        head += comment + b"\0"
    if flags & FHCRC:
        head += struct.pack("<H", (zlib.crc32(head) & 0xFFFF) if hcrc is None else hcrc)
    trailer = struct.pack("<II", zlib.crc32(data) if crc is None else crc,
                          (len(data) & 0xFFFFFFFF) if isize is None else isize)
    return head + deflate_raw(data) + trailer


def string_pickle_head(size: int) -> bytes:
    """The start of a pickle of one `size`-byte string: what a bomb inflates to passes a head check."""
    if size < 1 << 32:
        return b"\x80\x04X" + struct.pack("<I", size)
    return b"\x80\x04\x8d" + struct.pack("<Q", size)


@functools.lru_cache(maxsize=None)
def bomb_member(size: int) -> bytes:
    """A valid member holding a pickle of one `size`-byte string of zeros: its head passes any head check.

    Each 4 MiB of zeros is compressed after a full flush, so its deflate bytes are the same every time:
    compressed once and repeated, a 1 GiB bomb takes a fraction of a second to build.
    """
    head = string_pickle_head(size)
    chunk_size = 1 << 22
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = bytearray(c.compress(head) + c.flush(zlib.Z_FULL_FLUSH))
    crc = zlib.crc32(head)
    zeros = bytes(chunk_size)
    chunks, rest = divmod(size, chunk_size)
    if chunks:
        packed = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
        body += packed * chunks
        for _ in range(chunks):
            crc = zlib.crc32(zeros, crc)
    tail = bytes(rest) + b"."
    crc = zlib.crc32(tail, crc)
    body += c.compress(tail) + c.flush()
    header = struct.pack("<BBBBIBB", 0x1F, 0x8B, 8, 0, 0, 2, 255)
    return header + bytes(body) + struct.pack("<II", crc, (len(head) + size + 1) & 0xFFFFFFFF)


def near_zero_member(size: int, gap: int = 700) -> bytes:
    """A valid member holding a pickle of one `size`-byte bytes value of zeros with a random byte every `gap`:
    it inflates ~190x, under max_inflate_ratio, so only the memory it would take can stop it. Each 1 MiB is
    compressed after a full flush and repeated, so a gigabyte takes a second to build."""
    rng = random.Random(size)
    block = b"".join(bytes(gap) + bytes([rng.randrange(256)]) for _ in range((1 << 20) // (gap + 1)))
    blocks, rest = divmod(size, len(block))
    head = b"\x80\x04\x8e" + struct.pack("<Q", size)  # BINBYTES8
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = bytearray(c.compress(head) + c.flush(zlib.Z_FULL_FLUSH))
    packed = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    crc = zlib.crc32(head)
    for _ in range(blocks):
        body += packed
        crc = zlib.crc32(block, crc)
    tail = block[:rest] + b"."
    body += c.compress(tail) + c.flush()
    crc = zlib.crc32(tail, crc)
    header = struct.pack("<BBBBIBB", 0x1F, 0x8B, 8, 0, 0, 2, 255)
    return header + bytes(body) + struct.pack("<II", crc, (len(head) + size + 1) & 0xFFFFFFFF)


def split_members(data: bytes, size: int) -> bytes:
    """`data` as one gzip member every `size` bytes."""
    return b"".join(gzip.compress(data[i:i + size], mtime=0) for i in range(0, len(data), size))


def cases(big: bool = True) -> list[Case]:
    """Every gzip oddity; `big` adds the GB-scale bombs (seconds to build)."""
    snap = snapshot_template()
    pick = to_pickle(snap, 4)
    other = snapshot_template()
    other["segments"][0]["address"] += 1 << 30
    for b in other["segments"][0]["blocks"]:
        b["address"] += 1 << 30
    for e in other["device_traces"][0]:
        e["addr"] += 1 << 30
    pick2 = to_pickle(other, 4)
    good = gzip.compress(pick)
    half = len(pick) // 2
    out = {
        "valid": good,
        "valid-mtime-and-name": gzip.compress(pick, mtime=12345),
        "trailing-zero-byte": good + b"\0",
        "trailing-zero-bytes-1k": good + bytes(1024),
        "trailing-garbage": good + b"garbage\xff\x00",
        "trailing-gzip-magic-only": good + b"\x1f\x8b",
        "trailing-gzip-header-only": good + member(b"")[:10],
        "second-member-another-pickle": good + gzip.compress(pick2),
        "second-member-same-pickle": good + good,
        "pickle-split-across-members": gzip.compress(pick[:half]) + gzip.compress(pick[half:]),
        "pickle-split-across-1000-members": b"".join(gzip.compress(pick[i:i + max(1, len(pick) // 1000)])
                                                      for i in range(0, len(pick), max(1, len(pick) // 1000))),
        "empty-member-after": good + gzip.compress(b""),
        "empty-member-before": gzip.compress(b"") + good,
        "only-empty-member": gzip.compress(b""),
        "10k-empty-members-then-pickle": gzip.compress(b"") * 10_000 + good,
        "pickle-then-10k-empty-members": good + gzip.compress(b"") * 10_000,
        "truncated-header": good[:5],
        "truncated-after-header": good[:10],
        "truncated-middle": good[: len(good) // 2],
        "truncated-before-trailer": good[:-8],
        "truncated-in-trailer": good[:-3],
        "bad-crc": member(pick, crc=0xDEADBEEF),
        "bad-isize": member(pick, isize=7),
        "bad-isize-huge": member(pick, isize=0xFFFFFFFF),
        "fextra": member(pick, FEXTRA, extra=b"AB\x04\x00data"),
        "fextra-longer-than-file": member(pick, FEXTRA, extra=b"")[:10] + b"\xff\xff" + b"x" * 10,
        "fname": member(pick, FNAME),
        "fname-unterminated": member(pick, FNAME)[:10] + b"name-without-end" * 100,
        "fcomment": member(pick, FCOMMENT),
        "fhcrc-right": member(pick, FHCRC),
        "fhcrc-wrong": member(pick, FHCRC, hcrc=0x1234),
        "all-flags": member(pick, FTEXT | FHCRC | FEXTRA | FNAME | FCOMMENT, extra=b"xy\x00\x00"),
        "reserved-flag-bits": member(pick, 0xE0),
        "method-not-deflate": member(pick, method=7),
        "magic-only": b"\x1f\x8b",
        "magic-and-method": b"\x1f\x8b\x08",
        "nested-gzip": gzip.compress(good),
        "nested-gzip-3-deep": gzip.compress(gzip.compress(good)),
        "zlib-stream": zlib.compress(pick),
        "raw-deflate": deflate_raw(pick),
        "gzip-of-json": gzip.compress(to_json(snap) or b"{}"),
        "gzip-of-png": gzip.compress(b"\x89PNG\r\n\x1a\n" + bytes(100)),
        "gzip-of-garbage": gzip.compress(bytes(range(256)) * 4),
        "bomb-1KB-to-1MB": bomb_member(1 << 20),
        "bomb-65KB-to-64MB": bomb_member(64 << 20),
        "bomb-65KB-to-64MB-then-trailing-byte": bomb_member(64 << 20) + b"\0",
        "bomb-nested-gzip-of-64MB": gzip.compress(bomb_member(64 << 20), 9),
        "200k-empty-members": gzip.compress(b"", mtime=0) * 200_000,
        "200k-empty-members-then-pickle": gzip.compress(b"", mtime=0) * 200_000 + good,
        "pickle-in-1-byte-members": split_members(pick, 1),
        "pickle-then-1MB-of-zero-padding": good + bytes(1 << 20),
        "pickle-then-1MB-of-zero-padding-then-a-byte": good + bytes(1 << 20) + b"\x01",
        "high-ratio-64MB": near_zero_member(64 << 20),
    }
    if big:
        one_gb = bomb_member(1 << 30)
        out["bomb-1MB-to-1GB"] = one_gb
        out["bomb-80-members-of-64MB-to-5GB"] = bomb_member(64 << 20) * 80
        out["bomb-nested-gzip-of-1GB"] = gzip.compress(one_gb, 9)
        out["bomb-valid-pickle-then-1GB-member"] = good + one_gb
        out["high-ratio-under-the-limit-to-1GB"] = near_zero_member(1 << 30)
        out["high-ratio-80-members-to-1GB"] = near_zero_member(12 << 20) * 80
        out["1M-empty-members"] = gzip.compress(b"", mtime=0) * 1_000_000
    return [Case(f"gzip/{name}", data, "gzip") for name, data in out.items()]
