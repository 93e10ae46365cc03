"""What a gate compares: a snapshot file, a stored snapshot's id, or a memory summary (JSON) that a gate wrote.

A snapshot (file or id) is replayed and summarised; with a device size to check, its trace is also simulated. Two
sides are read in two processes where the machine has the cores (each replay is single-threaded numpy and Python).
"""
from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from fragviz.base.errors import FragvizError, UsageError
from fragviz.base.settings import db_path
from fragviz.gate.budgets import Budgets
from fragviz.gate.figures import MemorySummary, is_summary_file, read_summary, summarize
from fragviz.gate.judge import DeviceFit, device_fits
from fragviz.replay.analysis import Analysis


@dataclass(frozen=True)
class Side:
    """One side of a gate: its figures, and where it is a snapshot, its device-memory simulations."""

    summary: MemorySummary
    fits: dict[int, DeviceFit] | None


def read_side(target: str, db: str | None, budgets: Budgets | None = None, workers: int | None = None) -> Side:
    """`target` read as a summary, a snapshot file or a store id; `budgets.device_memory` simulates its trace. A
    file's devices are replayed in up to `workers` processes (default: one per CPU)."""
    if os.path.isfile(target) and is_summary_file(target):
        return Side(read_summary(target), None)
    analysis = _analysis(target, db, workers)
    fits = None
    if budgets is not None and budgets.device_memory is not None:
        fits = device_fits(analysis, budgets.device_memory, budgets.alloc_conf)
    return Side(summarize(analysis, target), fits)


def read_sides(candidate: str, baseline: str | None, db: str | None, budgets: Budgets) -> tuple[Side, Side | None]:
    """Both sides, the baseline in a second process when there are two snapshots to replay and two cores."""
    if baseline is None:
        return read_side(candidate, db, budgets), None
    if _is_snapshot(candidate) and _is_snapshot(baseline) and (os.cpu_count() or 1) > 1 and _can_fork():
        import multiprocessing

        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
            other = pool.submit(_read_side_or_why, baseline, db)  # each side on a core of its own
            ours = read_side(candidate, db, budgets, workers=1)
            theirs = other.result()
        if isinstance(theirs, str):
            raise FragvizError(theirs)
        return ours, theirs
    return read_side(candidate, db, budgets), read_side(baseline, db)


def _read_side_or_why(target: str, db: str | None) -> Side | str:
    """read_side in the second process; an error comes back as its message, since not every FragvizError survives
    the pickling back (SnapshotFormatError's two-argument constructor broke the pool: an internal error, exit 1)."""
    try:
        return read_side(target, db, workers=1)
    except FragvizError as exc:
        return str(exc)


def _analysis(target: str, db: str | None, workers: int | None) -> Analysis:
    if os.path.exists(target):
        from fragviz.replay.files import analyze_file

        return analyze_file(target, workers=workers)
    if target.isdigit():
        from fragviz.library import Library

        return Library.open(db_path(db)).load_analysis(int(target))
    raise UsageError(f"{target}: no such file, and not a snapshot id")


def _is_snapshot(target: str) -> bool:
    if os.path.isfile(target):
        return not is_summary_file(target)
    if target.isdigit():
        return True
    raise UsageError(f"{target}: no such file, and not a snapshot id")


def _can_fork() -> bool:
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods()
