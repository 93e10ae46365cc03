"""The doctor's results as records: one `Diagnosis` per OOM, with the what-ifs of the settings its advice
suggests (`WhatIfEntry`). `as_dict()` gives the `fragviz doctor --json` objects."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fragviz.base.transition import KeyedForTransition
from fragviz.doctor.message import ProcessUse
from fragviz.simulate.records import CANNOT_ANSWER

# The keys of one OOM in `fragviz doctor --json` (Diagnosis.as_dict), in their order.
PUBLIC_KEYS = ("verdict", "device", "requested_bytes", "reserved_bytes", "allocated_bytes", "device_total_bytes",
               "device_free_bytes", "allowed_bytes", "largest_free_block", "non_releasable_bytes", "fragmentation",
               "processes", "advice", "what_if", "warnings", "notes")


@dataclass(frozen=True)
class RecordedPeaks(KeyedForTransition):
    """The recording's figures beside a doctor's what-if."""

    peak_reserved_bytes: int
    peak_requested_bytes: int
    ooms: int

    def as_dict(self) -> dict[str, int]:
        return {"peak_reserved_bytes": self.peak_reserved_bytes, "peak_requested_bytes": self.peak_requested_bytes,
                "ooms": self.ooms}


@dataclass(frozen=True)
class BaselinePeaks(KeyedForTransition):
    """The same workload simulated under the recorded settings."""

    peak_reserved_bytes: int
    ooms: int

    def as_dict(self) -> dict[str, int]:
        return {"peak_reserved_bytes": self.peak_reserved_bytes, "ooms": self.ooms}


@dataclass(frozen=True)
class WhatIfEntry(KeyedForTransition):
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
class Diagnosis(KeyedForTransition):
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
