"""A predicted program free-run through the allocator model: its peaks, and where it runs out of memory."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fragviz.allocator.config import AllocatorSettings
from fragviz.simulate.freerun import run_workload

if TYPE_CHECKING:
    from fragviz.predict.forecast import Plan


@dataclass(frozen=True)
class OomWhere:
    """Where a predicted run runs out of memory: the request, its site, and the allocator then."""

    event: int  # in the template recording
    site: str
    requested_bytes: int
    reserved_bytes: int
    largest_free_block: int
    device_memory_bytes: int

    def as_dict(self) -> dict[str, Any]:
        return {"event": self.event, "site": self.site, "requested_bytes": self.requested_bytes,
                "reserved_bytes": self.reserved_bytes, "largest_free_block": self.largest_free_block,
                "device_memory_bytes": self.device_memory_bytes}


@dataclass(frozen=True)
class PredictedRun:
    """The predicted workload free-run under one setting on a device of `device_memory_bytes` (None: unlimited)."""

    alloc_conf: str | None  # None: the settings recorded with the run predicted from
    device_memory_bytes: int | None
    peak_requested_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    fragmentation: float  # at the reserved peak, at its fullest
    oom: OomWhere | None
    oom_count: int
    # [low, high] under every law the recordings allow (fragviz.predict.doubt); None until it is worked out
    peak_requested_range: tuple[int, int] | None = None
    peak_reserved_range: tuple[int, int] | None = None

    @property
    def fits(self) -> bool | None:
        """Whether it fits the device; None where the device's size is unknown."""
        return None if self.device_memory_bytes is None else self.oom is None

    def as_dict(self) -> dict[str, Any]:
        oom: Any = None if self.device_memory_bytes is None else (self.oom.as_dict() if self.oom else False)
        return {"alloc_conf": self.alloc_conf, "device_memory_bytes": self.device_memory_bytes,
                "peak_requested_bytes": self.peak_requested_bytes, "peak_allocated_bytes": self.peak_allocated_bytes,
                "peak_reserved_bytes": self.peak_reserved_bytes, "fragmentation": self.fragmentation, "oom": oom,
                "oom_count": self.oom_count, **ranges_dict(self)}


def ranges_dict(run: PredictedRun) -> dict[str, Any]:
    if run.peak_requested_range is None or run.peak_reserved_range is None:
        return {}
    return {"peak_requested_range": list(run.peak_requested_range),
            "peak_reserved_range": list(run.peak_reserved_range)}


def run_at(p: Plan, target: float, conf: str | None, settings: AllocatorSettings, capacity: int | None,
           sizes: np.ndarray | None = None) -> PredictedRun:
    """The program at knob `target`, free-run under `settings` on a device of `capacity` bytes; `sizes`: every
    template allocation's bytes (default: under the chosen laws)."""
    base = p.base
    result = run_workload(p.ops_at(target, sizes), base.events, [], settings, capacity, base.device)
    a, peak = result.allocator, result.peak
    oom = None
    if result.ooms:
        first = result.ooms[0]
        oom = OomWhere(first.event, p.site_of(first.key), first.requested_bytes, first.reserved_bytes,
                       first.largest_free_block, capacity or 0)
    return PredictedRun(conf, capacity, a.peaks.requested, a.peaks.active, a.peaks.reserved,
                        peak.fragmentation if peak else 0.0, oom, result.oom_count)


def settings_text(conf: str | None) -> str:
    return "the recorded settings" if conf is None else (conf or "the default settings")


def as_number(x: float) -> float | int:
    return int(x) if float(x).is_integer() else float(x)
