"""Gzip inflated as it is read, in time linear in the file and memory bounded by the output.

The gzip format allows several members one after another (the content is theirs joined) and zero bytes
after the last (padding); anything else after it is an error. The file is read IN_STEP bytes at a time and
never held whole; the inflater is fed a window into that piece that starts small at each member and doubles,
so what zlib copies back (`unused_data` where a member ends, `unconsumed_tail` where an output step ends) is
never more than about twice what the member has consumed: a file of a million empty members inflates in
time linear in its size. The output is checked after every OUT_STEP of it: against the bytes read so far
(max_inflate_ratio, from the first byte, member after member), against max_inflated_size, and against the
memory the caller's `watch` allows, so a bomb is refused after a few megabytes of it.
"""
from __future__ import annotations

import io
import zlib
from typing import BinaryIO, Callable

from fragviz.base.errors import SnapshotFormatError
from fragviz.base.limits import Limits
from fragviz.snapshot.sniff import GZIP_MAGIC, check_inflated_head
from fragviz.base.units import cut

# Output a gzip stream may produce before its ratio is judged (a deflate block's worth of a legitimate file)
RATIO_SLACK = 1 << 20
IN_STEP = 1 << 20  # bytes of the file read at a time
OUT_STEP = 1 << 20  # bytes of output between two checks
FIRST_WINDOW = 64  # bytes of input a member is first fed; doubled at every step up to MAX_WINDOW
MAX_WINDOW = 64 << 10
HEAD = 64  # inflated bytes enough to tell a snapshot from anything else

Watch = Callable[[io.BytesIO], None]


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


class _Input:
    """The file, read a piece at a time: `view[pos:]` is what is read and not yet consumed."""

    def __init__(self, fh: BinaryIO, source: str) -> None:
        self.fh, self.source, self.view, self.pos, self.before = fh, source, memoryview(b""), 0, 0

    @property
    def consumed(self) -> int:
        """Bytes of the file consumed so far."""
        return self.before + self.pos

    def left(self) -> int:
        return len(self.view) - self.pos

    def fill(self, need: int = 1) -> bool:
        """At least `need` unconsumed bytes at hand (False at the end of the file, with what there is)."""
        while self.left() < need:
            more = self._read()
            if not more:
                return False
            rest = bytes(self.view[self.pos:])  # under `need` bytes: the one copy is of the new piece
            self.before += self.pos
            self.view, self.pos = memoryview(rest + more if rest else more), 0
        return True

    def _read(self) -> bytes:
        try:
            return self.fh.read(IN_STEP)
        except OSError as exc:
            raise SnapshotFormatError(self.source, f"cannot be read ({exc.strerror or exc})") from None

    def take(self, window: int) -> memoryview:
        return self.view[self.pos:self.pos + window]


def inflate(fh: BinaryIO, size: int, source: str, limits: Limits, watch: Watch | None = None) -> bytes:
    """Inflate the gzip file read from `fh` (`size` bytes), every member of it; the content, joined.
    `watch` sees the output (at its end) after every step and may refuse it (the memory it would take)."""
    budget = _Inflation(source, limits)
    out = io.BytesIO()
    data = _Input(fh, source)
    while data.fill(2) or data.left():
        if bytes(data.take(2)) != GZIP_MAGIC:
            _check_padding(data, size, source)
            break
        _inflate_member(data, out, budget, watch or (lambda _: None), source)
    check_inflated_head(head_of(out), source)
    return out.getvalue()  # the buffer itself, not a copy


def head_of(out: io.BytesIO, size: int = HEAD) -> bytes:
    """The first `size` bytes of the output, its position left at its end."""
    out.seek(0)
    head = out.read(size)
    out.seek(0, io.SEEK_END)
    return head


def _check_padding(data: _Input, size: int, source: str) -> None:
    """Zero bytes after the last member are padding, as gzip(1) allows; anything else is refused."""
    start = data.consumed
    while data.fill():
        piece = data.take(data.left())
        if bytes(piece).count(0) != len(piece):
            rest = max(size - start, data.consumed + len(piece) - start)
            raise SnapshotFormatError(source, f"has {rest:,} bytes after its gzip stream that are not another "
                                              "gzip member")
        data.pos += len(piece)


def _inflate_member(data: _Input, out: io.BytesIO, budget: _Inflation, watch: Watch, source: str) -> None:
    """Inflate the gzip member at the input's position onto `out`, leaving the input after it.

    Each step either consumes input or produces output (else the stream is truncated), so it ends.
    """
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    window = FIRST_WINDOW
    try:
        while not inflater.eof:
            more = data.fill()
            piece = data.take(window)
            before = out.tell()
            out.write(inflater.decompress(piece, OUT_STEP))
            used = len(piece) - len(inflater.unconsumed_tail) - len(inflater.unused_data)
            data.pos += used
            _checked(out, before, data.consumed, budget, watch, source)
            if not inflater.eof and not used and out.tell() == before and not more:
                raise SnapshotFormatError(source, "is a truncated gzip stream")
            window = min(2 * window, MAX_WINDOW)
    except zlib.error as exc:
        raise SnapshotFormatError(source, f"is a corrupt or truncated gzip stream ({cut(str(exc))})") from None


def _checked(out: io.BytesIO, before: int, consumed: int, budget: _Inflation, watch: Watch, source: str) -> None:
    produced = out.tell()
    if before < HEAD <= produced:
        check_inflated_head(head_of(out), source)  # refuse a non-snapshot before inflating the rest
    if produced != before:
        budget.check(produced, consumed)
        watch(out)
