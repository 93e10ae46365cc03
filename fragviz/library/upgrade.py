"""Stored figures brought up to date after a schema step that changed what they mean.

Schema version 5 made fragmentation the non-releasable share of reserved memory (fragviz.model.metrics) and added the
non-releasable bytes to the series. A store migrated from an older version lists every snapshot it held in
`stale_figures`; here each one's series is replayed again from its stored start state and trace (the same
block sizes, so the same states), its level-of-detail tables and summary are rebuilt, and all of it is written
in one transaction per snapshot. The store itself (a leaf) cannot replay; the library calls this when it opens.
"""
from __future__ import annotations

from typing import Callable

from fragviz.base.errors import StoreError
from fragviz.base.progress import ProgressBar
from fragviz.replay import DeviceReplay, restore_layout
from fragviz.replay.engine import run_forward
from fragviz.library.stored import load_analysis, series_blobs
from fragviz.store.reader import StoreReader
from fragviz.store.writer import replace_figures
from fragviz.library.summaries import summary_of


def refresh_stale(records: StoreReader, progress: Callable[[int, int], None] | None = None) -> int:
    """Recompute the figures of every stale snapshot of the store; the number refreshed. Without `progress`, a
    bar on the terminal (where standard error is one) follows the work."""
    stale = records.stale_snapshots()
    if not stale:
        return 0
    bar = ProgressBar("updating stored figures") if progress is None else None
    progress = bar.update if bar is not None else progress
    for done, sid in enumerate(stale):
        progress(done, len(stale))
        refresh_snapshot(records, sid)
    progress(len(stale), len(stale))
    if bar is not None:
        bar.close()
    return len(stale)


def refresh_snapshot(records: StoreReader, sid: int) -> None:
    analysis = load_analysis(records, sid)
    for replay in analysis.replays.values():
        replay.series = replayed_series(replay)
    blobs = [(device, *series_blobs(replay)) for device, replay in analysis.replays.items()]
    replace_figures(records.store, sid, blobs, summary_of(analysis))


def replayed_series(replay: DeviceReplay) -> dict:
    """The series after every event, replayed from the stored start state with the stored block sizes."""
    if 0 not in replay.checkpoints:
        raise StoreError(f"device {replay.device} of a stored snapshot has no start state to replay its figures from")
    layout = restore_layout(replay.checkpoints, replay.trace, replay.block_size, 0, replay.sizer)
    return run_forward(layout, replay.trace, replay.block_size.copy()).series
