"""The server's spool: one folder per server process for the uploads it receives and their progress files.

The folder (`fragviz-spool-XXXXXXXX` in the temporary folder) is locked (flock) by the server that made it
for as long as that process lives. A server that ends in order removes it (`Spool.close`); one that is
killed cannot, so every server sweeps, when it starts, the spool folders of servers that are gone: a folder
whose lock it can take. The lock dies with its process, whatever killed it, so a folder is never taken for
abandoned while its server lives, whatever became of its process id.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
from contextlib import suppress

try:
    import fcntl
except ImportError:  # not a POSIX system: no locks, so no sweeping either (Spool.close still removes its own)
    fcntl = None  # type: ignore[assignment]

PREFIX = "fragviz-spool-"
_MAKING = ".fragviz-spool-making-"  # a folder not locked yet: never swept under this name


class Spool:
    """This server's spool folder, made (and the abandoned ones swept) on first use, in `parent` (default: the
    temporary folder)."""

    def __init__(self, parent: str | None = None) -> None:
        self.parent = parent
        self._path: str | None = None
        self._fd: int | None = None
        self._lock = threading.Lock()

    @property
    def path(self) -> str:
        with self._lock:
            if self._path is None or not os.path.isdir(self._path):
                self._make()
            assert self._path is not None
            return self._path

    def mkstemp(self, prefix: str, suffix: str) -> tuple[int, str]:
        """A new file in the spool: (its descriptor, its path)."""
        return tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=self.path)

    def sweep(self) -> list[str]:
        """Remove the spool folders of servers that are gone; the folders removed."""
        return sweep(self.parent or tempfile.gettempdir())

    def close(self) -> None:
        """Remove the spool and all in it (the server is stopping)."""
        with self._lock:
            if self._path is not None:
                shutil.rmtree(self._path, ignore_errors=True)
            if self._fd is not None:
                os.close(self._fd)
            self._path = self._fd = None

    def _make(self) -> None:
        parent = self.parent or tempfile.gettempdir()
        making = tempfile.mkdtemp(prefix=_MAKING, dir=parent)
        fd = os.open(making, os.O_RDONLY)
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a folder just made: no one else holds it
        path = os.path.join(parent, PREFIX + os.path.basename(making)[len(_MAKING):])
        os.rename(making, path)  # locked before a sweep can see it
        if self._fd is not None:
            os.close(self._fd)
        self._path, self._fd = path, fd


def sweep(parent: str) -> list[str]:
    """Remove the spool folders in `parent` of servers that are gone (their lock is free); the folders removed."""
    if fcntl is None:
        return []
    removed = []
    with suppress(OSError):
        for entry in os.scandir(parent):
            if entry.name.startswith(PREFIX) and entry.is_dir(follow_symlinks=False) and _abandoned(entry.path):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
    return removed


def _abandoned(path: str) -> bool:
    """Whether no living process holds the spool folder at `path` (this user's own folders only)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        if os.fstat(fd).st_uid != os.getuid():
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False  # held: its server lives
    finally:
        os.close(fd)
