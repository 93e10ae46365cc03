"""What the pages show, read through the store's reader (no SQL and no files here)."""
from __future__ import annotations

from collections import defaultdict
from functools import lru_cache
from typing import Any

from fragviz.doctor import Diagnosis, diagnose
from fragviz.model.metrics import StateFigures
from fragviz.model import BlockState, Frame, Segment
from fragviz.library import Library
from fragviz.ui.data.usage import UsageViews
from fragviz.usage.sites import top_sites


class Views:
    """Read helpers for one store, with small caches for what does not change (stored snapshots are immutable)."""

    def __init__(self, reader: Library) -> None:
        self.reader = reader
        self._frames = lru_cache(maxsize=20000)(self._frames_uncached)
        self.analysis = lru_cache(maxsize=4)(reader.load_analysis)
        self.doctor = lru_cache(maxsize=16)(self._doctor)
        self.markers = lru_cache(maxsize=32)(reader.markers)
        self.usage = UsageViews(reader)  # what holds memory: allocation bands, memory by kind and by site
        self.annotation_spans = lru_cache(maxsize=32)(reader.annotation_spans)

    def _frames_uncached(self, sid: int, stack: int) -> tuple[Frame, ...]:
        return tuple(self.reader.stack_frames(sid, stack))

    def frames(self, sid: int, stack: int) -> tuple[Frame, ...]:
        return self._frames(sid, stack) if stack >= 0 else ()

    def state(self, sid: int, device: int, event: int | None) -> tuple[list[Segment], StateFigures, int]:
        return self.reader.device_state(sid, device, event)

    def top_sites(self, sid: int, segments: list[Segment], limit: int = 12) -> list[dict[str, Any]]:
        """{site, bytes, blocks} of the sites holding the most live bytes (usage.sites.top_sites)."""
        return [t.as_dict() for t in top_sites(segments, lambda stack: self.frames(sid, stack), limit)]

    def stack_weights(self, sid: int, segments: list[Segment], limit: int = 200) -> dict[tuple[Frame, ...], int]:
        by_stack: dict[int, int] = defaultdict(int)
        for seg in segments:
            for b in seg.blocks:
                if b.state is not BlockState.INACTIVE and b.stack >= 0:
                    by_stack[b.stack] += b.size
        top = sorted(by_stack.items(), key=lambda kv: -kv[1])[:limit]
        return {self.frames(sid, s): size for s, size in top}

    def _doctor(self, sid: int) -> list[Diagnosis]:
        if not self.reader.snapshot_row(sid).summary.ooms:
            return []  # nothing to diagnose: no need to load the traces
        return diagnose(self.analysis(sid))

    def peak_event(self, sid: int, device: int) -> int:
        tl = self.reader.timeline(sid, device, max_points=10**9 if self.reader.trace_length(sid, device) < 200000
                                  else 4000)
        values = tl.maxs["allocated"]
        i = int(values.argmax()) if len(values) else 0
        if tl.bucket == 1:
            return int(tl.start[i])
        lo = int(tl.start[i])
        fine = self.reader.timeline(sid, device, lo, lo + tl.bucket, max_points=tl.bucket + 1)
        return int(fine.start[int(fine.maxs["allocated"].argmax())])
