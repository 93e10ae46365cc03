"""Other processes as /proc shows them (Linux): their state, whether they still run, and their children."""
from __future__ import annotations

import os


def proc_state(pid: int) -> str | None:
    """A process's state letter (R, S, T stopped, Z ended but not reaped), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def running(pid: int) -> bool:
    return proc_state(pid) not in (None, "Z", "X")


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    out = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as fh:
                if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return out


def command_line(pid: int) -> bytes:
    """A process's command line (NUL-separated), b"" once it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""
