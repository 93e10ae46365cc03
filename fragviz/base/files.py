"""Files written whole or not at all: a reader never sees half a snapshot, summary or report."""
from __future__ import annotations

import os


def write_atomically(path: str, data: bytes | str) -> None:
    """Write `data` (text as UTF-8) to `path` through a temporary file beside it, renamed into place."""
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data.encode("utf-8") if isinstance(data, str) else data)
    os.replace(tmp, path)
