"""The doctor's results as records: one `Diagnosis` per OOM, with the what-ifs of the settings its advice
suggests (`WhatIfEntry`), and the `Report` of a snapshot (a `DeviceReport` per device). `as_dict()` gives the
`fragviz doctor --json` and `fragviz report --json` objects."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fragviz.doctor.message import ProcessUse
from fragviz.model import FormatInfo
from fragviz.model.metrics import PoolFigures
from fragviz.replay.analysis import PeakFigures
from fragviz.simulate.records import CANNOT_ANSWER

# The keys of one OOM in `fragviz doctor --json` (Diagnosis.as_dict), in their order.
PUBLIC_KEYS = ("verdict", "device", "requested_bytes", "reserved_bytes", "allocated_bytes", "device_total_bytes",
               "device_free_bytes", "allowed_bytes", "largest_free_block", "non_releasable_bytes", "fragmentation",
               "processes", "advice", "what_if", "warnings", "notes")


@dataclass(frozen=True)
class RecordedPeaks:
    """The recording's figures beside a doctor's what-if."""

    peak_reserved_bytes: int
    peak_requested_bytes: int
    ooms: int

    def as_dict(self) -> dict[str, int]:
        return {"peak_reserved_bytes": self.peak_reserved_bytes, "peak_requested_bytes": self.peak_requested_bytes,
                "ooms": self.ooms}


@dataclass(frozen=True)
class BaselinePeaks:
    """The same workload simulated under the recorded settings."""

    peak_reserved_bytes: int
    ooms: int

    def as_dict(self) -> dict[str, int]:
        return {"peak_reserved_bytes": self.peak_reserved_bytes, "ooms": self.ooms}


@dataclass(frozen=True)
class WhatIfEntry:
    """One suggested setting simulated on the trace (`status` "simulated"), or why it cannot be ("cannot_answer",
    with `reason`; the figures are then None)."""

    alloc_conf: str
    status: str
    outcome: str
    avoids_oom: bool | None
    summary: str
    reason: str | None = None
    claim: str | None = None
    device_memory_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    ooms: int | None = None  # the simulated run's OOM count
    recorded: RecordedPeaks | None = None
    baseline: BaselinePeaks | None = None
    start_notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        head = {"alloc_conf": self.alloc_conf, "status": self.status, "outcome": self.outcome,
                "avoids_oom": self.avoids_oom}
        if self.status == CANNOT_ANSWER:
            return {**head, "reason": self.reason, "summary": self.summary}
        return {**head, "claim": self.claim, "device_memory_bytes": self.device_memory_bytes,
                "peak_reserved_bytes": self.peak_reserved_bytes, "ooms": self.ooms,
                "recorded": self.recorded.as_dict(), "baseline": self.baseline.as_dict(),
                "start_notes": list(self.start_notes), "summary": self.summary}


@dataclass(frozen=True)
class Diagnosis:
    """One OOM's verdict, figures (None where not read) and advice; `warnings` say what limits the diagnosis,
    `notes` what the state read holds besides. `event` is the snapshot's `oom` entry, None for a message."""

    verdict: str
    device: int | None
    requested_bytes: int
    reserved_bytes: int | None
    allocated_bytes: int | None
    device_total_bytes: int | None
    device_free_bytes: int | None
    allowed_bytes: int | None
    largest_free_block: int | None
    non_releasable_bytes: int | None
    fragmentation: float | None
    processes: tuple[ProcessUse, ...]
    advice: tuple[str, ...]
    what_if: tuple[WhatIfEntry, ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    event: int | None

    def as_dict(self) -> dict[str, Any]:
        """The OOM's object in `fragviz doctor --json` (PUBLIC_KEYS, in that order)."""
        return {"verdict": self.verdict, "device": self.device, "requested_bytes": self.requested_bytes,
                "reserved_bytes": self.reserved_bytes, "allocated_bytes": self.allocated_bytes,
                "device_total_bytes": self.device_total_bytes, "device_free_bytes": self.device_free_bytes,
                "allowed_bytes": self.allowed_bytes, "largest_free_block": self.largest_free_block,
                "non_releasable_bytes": self.non_releasable_bytes, "fragmentation": self.fragmentation,
                "processes": [p.as_dict() for p in self.processes], "advice": list(self.advice),
                "what_if": [w.as_dict() for w in self.what_if], "warnings": list(self.warnings),
                "notes": list(self.notes)}


@dataclass(frozen=True)
class DeviceReport:
    """One device's figures in the report: its state (final, or after the events asked for), the trace's peaks,
    its pools, pending frees and memory by kind. `trace_actions` counts the trace's entries by action; `kinds`
    and `kinds_at_peak` give bytes by kind of allocation, `kind_notes` what a kind's figure rests on."""

    device: int
    reserved_bytes: int
    allocated_bytes: int
    requested_bytes: int
    free_bytes: int
    free_blocks: int
    largest_free_block: int
    non_releasable_bytes: int
    fragmentation: float
    free_scatter: float
    at_peak: PeakFigures | None  # the first state of most reserved bytes, where the replay has a series
    segments: int
    blocks: int
    allocations: int
    trace_events: int
    trace_actions: dict[str, int]
    start_requested_bytes: int
    peak_requested_bytes: int
    start_reserved_bytes: int
    peak_reserved_bytes: int
    pools: tuple[PoolFigures, ...]
    pending_free_bytes: int
    pending_free_blocks: int
    kinds: dict[str, int]
    kinds_at_peak: dict[str, int]
    kind_notes: dict[str, str]
    peak_requested_state: int

    def as_dict(self) -> dict[str, Any]:
        """The device's object in `fragviz report --json`."""
        return {
            "device": self.device, "reserved_bytes": self.reserved_bytes, "allocated_bytes": self.allocated_bytes,
            "requested_bytes": self.requested_bytes, "free_bytes": self.free_bytes, "free_blocks": self.free_blocks,
            "largest_free_block": self.largest_free_block, "non_releasable_bytes": self.non_releasable_bytes,
            "fragmentation": self.fragmentation, "free_scatter": self.free_scatter,
            "at_peak": self.at_peak.as_dict() if self.at_peak else None,
            "segments": self.segments, "blocks": self.blocks, "allocations": self.allocations,
            "trace_events": self.trace_events, "trace_actions": self.trace_actions,
            "start_requested_bytes": self.start_requested_bytes, "peak_requested_bytes": self.peak_requested_bytes,
            "start_reserved_bytes": self.start_reserved_bytes, "peak_reserved_bytes": self.peak_reserved_bytes,
            "pools": [pool_dict(p) for p in self.pools],
            "pending_free_bytes": self.pending_free_bytes, "pending_free_blocks": self.pending_free_blocks,
            "kinds": self.kinds, "kinds_at_peak": self.kinds_at_peak, "kind_notes": self.kind_notes,
            "peak_requested_state": self.peak_requested_state,
        }


def pool_dict(p: PoolFigures) -> dict[str, Any]:
    """A pool's object in `fragviz report --json`."""
    return {"pool": list(p.pool), "reserved_bytes": p.reserved_bytes, "allocated_bytes": p.allocated_bytes,
            "free_bytes": p.free_bytes, "largest_free_block": p.largest_free_block,
            "non_releasable_bytes": p.non_releasable_bytes, "fragmentation": p.fragmentation,
            "free_scatter": p.free_scatter}


@dataclass(frozen=True)
class Report:
    """The report of a snapshot: where it came from, its format, what limits it, and its devices."""

    source: str
    format: FormatInfo
    warnings: tuple[str, ...]
    devices: tuple[DeviceReport, ...]

    def as_dict(self) -> dict[str, Any]:
        """The `fragviz report --json` object (and the HTTP API's report)."""
        return {"source": self.source, "format": self.format.as_dict(), "warnings": list(self.warnings),
                "devices": [d.as_dict() for d in self.devices]}
