"""The files fragviz writes where a user asks (reports, summaries, baselines, snapshots, exports), and the small
files it reads back (summaries, baselines).

An output honours what its path is (`write_output`):

- `-` is standard output;
- `/dev/stdout`, `/dev/stderr`, `/dev/fd/N` and `/proc/self/fd/N` are this process's own descriptor, written
  where it stands (a shell's `>` or `>>` behind it is kept);
- an existing FIFO or character device is opened for writing (never created, never truncated) and written in
  place: a reader at the other end of the FIFO gets the bytes, `/dev/null` swallows them;
- a symbolic link is followed, and its target is handled as if it had been named;
- a regular file, or a new name in an existing folder, is written whole to a temporary file beside it, then
  renamed into place: a reader never sees half a file, and a file replaced keeps its permissions;
- a directory, a missing folder, a block device or a socket is refused with one line (OutputError, exit 2).

A small input (`read_small`) is a regular file, read under a limit: a FIFO is refused without waiting for a
writer, a device (`/dev/zero`) or a directory unread, a file past the limit before it is read.
"""
from __future__ import annotations

import os
import re
import secrets
import stat
import sys

from fragviz.base.errors import InputError, OutputError

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_OWN = re.compile(r"/dev/(stdin|stdout|stderr)|/dev/fd/(\d+)|/proc/(?:self|thread-self|(\d+))/fd/(\d+)")
_STANDARD = {"stdin": 0, "stdout": 1, "stderr": 2}
_MAX_LINKS = 40
STDOUT = "-"


def write_output(path: str, data: bytes | str, label: str | None = None) -> str:
    """Write `data` (text as UTF-8) where `path` says (the module's rules); where it went, in words. A path that
    cannot be written raises OutputError, one line naming `label` (the option) and the path."""
    blob = data.encode("utf-8") if isinstance(data, str) else data
    kind, target, mode = _destination(path, label)
    if kind == "stdout":
        _write_descriptor(1, blob, path, label)
        return "standard output"
    if kind == "descriptor":
        _write_descriptor(mode, blob, path, label)
    elif kind == "in place":
        _write_in_place(target, blob, path, label)
    else:
        _replace(target, blob, mode, path, label)
    return path


def check_output(path: str, label: str | None = None) -> None:
    """Refuse, before any work, a path that write_output would refuse (a directory, a missing folder, ...)."""
    _destination(path, label)


def append_text(path: str, text: str, label: str | None = None) -> None:
    """Append `text` to the file at `path` (a CI's summary file: $GITHUB_STEP_SUMMARY); a failure is one line."""
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise OutputError(f"{_named(path, label)}: cannot be appended to ({_why(exc)})") from None


def read_small(path: str, limit: int, what: str) -> bytes:
    """The bytes of the regular file at `path` (a link followed), at most `limit` of them; anything else is
    refused with one line (InputError) naming the file and what it is, without waiting on it or reading it."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise InputError(path, f"cannot be read ({_why(exc)})") from None
    _check_input(st, path, limit, what)
    try:
        fd = os.open(path, os.O_RDONLY | _O_NONBLOCK | _O_CLOEXEC | _O_NOCTTY)
    except OSError as exc:
        raise InputError(path, f"cannot be read ({_why(exc)})") from None
    with os.fdopen(fd, "rb") as fh:
        _check_input(os.fstat(fd), path, limit, what)  # what was opened, should the path have changed since
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise InputError(path, f"cannot be read ({_why(exc)})") from None
    if len(data) > limit:  # a file that grew while read
        raise InputError(path, f"is over {limit:,} bytes: too large for a {what}")
    return data


def _check_input(st: os.stat_result, path: str, limit: int, what: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise InputError(path, f"is a directory, not a {what}")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(path, f"is {kind_of(st.st_mode)}, not a {what} (fragviz reads it from a regular file)")
    if st.st_size > limit:
        raise InputError(path, f"{st.st_size:,} bytes is too large for a {what} (at most {limit:,})")


# -- where an output goes -------------------------------------------------------------------------------------

def _destination(path: str, label: str | None) -> tuple[str, str, int]:
    """(kind, the path to write, a mode or descriptor): "stdout", "descriptor" (the mode is the descriptor),
    "in place" (a FIFO or character device) or "replace" (the mode is the file's, -1 for a new file)."""
    if path == STDOUT:
        return "stdout", path, 1
    target = _follow(path, label)
    own = own_descriptor(target)
    if own is not None:
        return "descriptor", target, own
    try:
        st = os.stat(target)
    except FileNotFoundError:
        _check_folder(target, path, label)
        return "replace", target, -1
    except OSError as exc:
        raise OutputError(f"{_named(path, label)}: cannot be written ({_why(exc)})") from None
    if stat.S_ISREG(st.st_mode):
        return "replace", target, stat.S_IMODE(st.st_mode)
    if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode):
        return "in place", target, 0
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{_named(path, label)}: is a directory: give a file name")
    raise OutputError(f"{_named(path, label)}: is {kind_of(st.st_mode)}: fragviz writes regular files, FIFOs and "
                      "character devices")


def own_descriptor(path: str) -> int | None:
    """The descriptor that `path` names in this process (/dev/stdout: 1, /dev/fd/3: 3), None for any other path."""
    m = _OWN.fullmatch(os.path.normpath(os.path.abspath(path)))
    if m is None or (m.group(3) is not None and int(m.group(3)) != os.getpid()):
        return None
    if m.group(1):
        return _STANDARD[m.group(1)]
    return int(m.group(2) or m.group(4))


def _follow(path: str, label: str | None) -> str:
    """`path` with its symbolic links followed (its folders' links are left to the system); this process's own
    descriptors are not followed (their links name pipes and terminals that cannot be opened by name)."""
    target = path
    for _ in range(_MAX_LINKS):
        if own_descriptor(target) is not None or not os.path.islink(target):
            return target
        try:
            link = os.readlink(target)
        except OSError as exc:
            raise OutputError(f"{_named(path, label)}: cannot be written ({_why(exc)})") from None
        target = os.path.join(os.path.dirname(target), link)
    raise OutputError(f"{_named(path, label)}: cannot be written (too many levels of symbolic links)")


def _check_folder(target: str, path: str, label: str | None) -> None:
    folder = os.path.dirname(target) or "."
    if not os.path.isdir(folder):
        shown = folder if target == path else f"{folder} (where the link points)"
        raise OutputError(f"{_named(path, label)}: the folder {shown} does not exist: create it first")


# -- writing ------------------------------------------------------------------------------------------------------

def _write_descriptor(fd: int, blob: bytes, path: str, label: str | None) -> None:
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    try:
        _write_all(fd, blob)
    except OSError as exc:
        if isinstance(exc, BrokenPipeError) and path == STDOUT:
            raise  # a reader that stopped reading (| head): the command line ends quietly
        raise OutputError(f"{_named(path, label)}: cannot be written ({_why(exc)})") from None


def _write_in_place(target: str, blob: bytes, path: str, label: str | None) -> None:
    try:
        fd = os.open(target, os.O_WRONLY | _O_CLOEXEC | _O_NOCTTY)
        try:
            _write_all(fd, blob)
        finally:
            os.close(fd)
    except OSError as exc:
        raise OutputError(f"{_named(path, label)}: cannot be written ({_why(exc)})") from None


def _replace(target: str, blob: bytes, mode: int, path: str, label: str | None) -> None:
    """Write a temporary file beside `target`, then rename it over `target` (mode -1: a new file, made as the
    umask says; else the replaced file's mode)."""
    folder, name = os.path.split(target)
    tmp = os.path.join(folder, f".{name[:200]}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o666)
    except OSError as exc:
        raise OutputError(f"{_named(path, label)}: cannot be written ({_why(exc)})") from None
    try:
        try:
            if mode >= 0:
                os.fchmod(fd, mode)
            _write_all(fd, blob)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except OSError as exc:
        _remove(tmp)
        raise OutputError(f"{_named(path, label)}: cannot be written ({_why(exc)})") from None
    except BaseException:
        _remove(tmp)
        raise


def _write_all(fd: int, blob: bytes) -> None:
    view = memoryview(blob)
    while view:
        view = view[os.write(fd, view[:1 << 20]):]


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def kind_of(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    for test, words in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return words
    return "a special file"


def _named(path: str, label: str | None) -> str:
    return path if label is None else f"{label} {path}"


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)
