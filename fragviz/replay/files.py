"""A snapshot file analysed without a store: the loader, the parser and the replay, as ingest runs them (so a report
on a file is as fast as an ingest and takes no more memory), without importing the store."""
from __future__ import annotations

import gc
import os
from contextlib import contextmanager
from typing import Iterator

from fragviz.base.limits import Limits
from fragviz.replay.analysis import Analysis, analyze
from fragviz.snapshot.loader import read_raw
from fragviz.snapshot.parse import parse_snapshot


def analyze_file(path: str, name: str | None = None, workers: int | None = None) -> Analysis:
    """A snapshot file analysed (`fragviz report FILE`, the doctor and the gate on a file); its devices replayed in
    up to `workers` processes (default: one per CPU)."""
    limits = Limits.current()
    with gc_paused():
        raw = read_raw(path, name, limits)
        snapshot = parse_snapshot(raw, limits, consume=True)
        del raw
        return analyze(snapshot, workers=workers or os.cpu_count() or 1)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while millions of acyclic containers are built.

    Unpickling a snapshot allocates a container per trace entry and frame list; each allocation burst
    triggers collections that walk everything built so far. Snapshot data has no cycles, so pausing the
    collector loses nothing and makes the load several times faster.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
