"""Where a snapshot's bytes come from: a regular file is read where it lies; a pipe (`fragviz ingest
<(zcat x.pickle.gz)`, a FIFO, a socket) can be read only once, so it is copied as it is read, in chunks and
never past max_file_size, into an anonymous spool file that the hash and the decode both read; anything
else (a character device such as /dev/zero, a tty, a block device) is refused unread.
"""
from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator

from fragviz.base.errors import SnapshotFormatError
from fragviz.base.limits import Limits

CHUNK = 1 << 20


@dataclass
class _Spool:
    fh: BinaryIO
    size: int
    digest: str


# The pipe file_digest spooled, kept for the decode_file that follows it (a pipe cannot be read twice);
# at most one, so a digest whose file is never decoded (already in the store) leaves one spool behind.
_pending: dict[tuple[str, int, int], _Spool] = {}


@contextmanager
def opened(path: str, source: str) -> Iterator[BinaryIO]:
    """The file at `path` opened for reading, a failure said as one line."""
    try:
        fh = open(path, "rb")
    except IsADirectoryError:
        raise SnapshotFormatError(source, "is a directory, not a snapshot file") from None
    except OSError as exc:
        raise SnapshotFormatError(source, f"cannot be read ({exc.strerror or exc})") from None
    with fh:
        yield fh


def check_size(size: int, source: str, limits: Limits) -> None:
    if size > limits.max_file_size:
        raise limits.refuse(source, "max_file_size", f"is {size:,} bytes")


def pipe_digest(path: str, fh: BinaryIO, source: str, limits: Limits) -> str:
    """The SHA-256 of a pipe's content, which is spooled for the decode that follows."""
    spool = _spool(fh, source, limits)
    for old in _pending.values():
        old.fh.close()
    _pending.clear()
    key = _pipe_key(path)
    if key is not None:
        _pending[key] = spool
    return spool.digest


@contextmanager
def seekable(path: str, source: str, limits: Limits) -> Iterator[tuple[BinaryIO, int]]:
    """The content of the file at `path` as a seekable file, and its size: a regular file itself, a pipe's
    spool (the one pipe_digest left, or one made now); anything else is refused."""
    key = _pipe_key(path)
    spool = _pending.pop(key, None) if key is not None else None
    if spool is not None:
        with spool.fh:
            yield spool.fh, spool.size
        return
    with opened(path, source) as fh:
        if is_regular(fh):
            size = os.fstat(fh.fileno()).st_size
            check_size(size, source, limits)
            yield fh, size
            return
        spool = _spool(fh, source, limits)
    with spool.fh:
        yield spool.fh, spool.size


def is_regular(fh: BinaryIO) -> bool:
    return stat.S_ISREG(os.fstat(fh.fileno()).st_mode)


def _pipe_key(path: str) -> tuple[str, int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (path, st.st_dev, st.st_ino) if _is_pipe(st.st_mode) else None


def _is_pipe(mode: int) -> bool:
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _spool(fh: BinaryIO, source: str, limits: Limits) -> _Spool:
    """Copy a pipe into an anonymous temporary file, in chunks, hashing it and refusing it as soon as it
    passes max_file_size; a file that is not a pipe is refused unread."""
    mode = os.fstat(fh.fileno()).st_mode
    if not _is_pipe(mode):
        raise SnapshotFormatError(source, f"is {_kind(mode)}, not a snapshot file (fragviz reads regular files "
                                          "and pipes)")
    h = hashlib.sha256()
    try:
        out = tempfile.TemporaryFile()
    except OSError as exc:
        raise SnapshotFormatError(source, f"is a pipe and cannot be spooled ({exc.strerror or exc})") from None
    try:
        size = _copy(fh, out, h, source, limits)
        out.seek(0)
    except BaseException:
        out.close()
        raise
    return _Spool(out, size, h.hexdigest())


def _copy(fh: BinaryIO, out: BinaryIO, h: Any, source: str, limits: Limits) -> int:
    size = 0
    while chunk := _read(fh, source):
        size += len(chunk)
        if size > limits.max_file_size:
            raise limits.refuse(source, "max_file_size", f"is over {limits.max_file_size:,} bytes")
        h.update(chunk)
        try:
            out.write(chunk)
        except OSError as exc:
            raise SnapshotFormatError(source, f"is a pipe and cannot be spooled ({exc.strerror or exc})") from None
    return size


def _read(fh: BinaryIO, source: str) -> bytes:
    try:
        return fh.read(CHUNK)
    except OSError as exc:
        raise SnapshotFormatError(source, f"cannot be read ({exc.strerror or exc})") from None


def _kind(mode: int) -> str:
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "a special file"
