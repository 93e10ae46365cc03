"""The simulation's results as records: a what-if per device (`DeviceWhatIf`, in `WhatIfResult`), follow mode's
scores per device (`DeviceFollow`, in `FollowResult`), and their parts. `as_dict()` gives the objects of
`fragviz simulate --json`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fragviz.allocator.config import AllocatorSettings
from fragviz.model.lod import Timeline

SIMULATED, CANNOT_ANSWER = "simulated", "cannot_answer"
# Outcomes of a simulated what-if; only the first three are claims about OOMs. GETS_PAST: the simulated run has no
# OOM, but the recording ends at its failure, so what the changed program does after that point was not simulated.
AVOIDS_OOM, STILL_OOMS, NO_OOM, UNKNOWN = "avoids_oom", "still_ooms", "no_oom", "unknown"
GETS_PAST = "gets_past_recorded_failure"


@dataclass(frozen=True)
class DeviceMemory:
    bytes: int | None
    source: str  # how the size is known: "given", "the first recorded OOM", or "unknown"

    def as_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "source": self.source}


@dataclass(frozen=True)
class OomAt:
    """One OOM of a run: the event, what it asked for, and the allocator's state then."""

    event: int
    requested_bytes: int
    reserved_bytes: int
    largest_free_block: int
    key: Any = field(default=None, compare=False)  # a free-run's: the failing request's lifetime (freerun.Op)

    def as_dict(self) -> dict[str, int]:
        return {"event": self.event, "requested_bytes": self.requested_bytes, "reserved_bytes": self.reserved_bytes,
                "largest_free_block": self.largest_free_block}


@dataclass(frozen=True)
class RunFigures:
    """A run's figures, recorded or simulated: peaks, the final fragmentation and the one at the reserved peak
    (None where unknown), the OOMs (at most a free-run's MAX_OOMS of them listed; `oom_count` counts them all)."""

    settings: AllocatorSettings
    device_memory_bytes: int | None
    peak_reserved_bytes: int
    peak_allocated_bytes: int
    peak_requested_bytes: int
    final_fragmentation: float
    ooms: tuple[OomAt, ...]
    oom_count: int
    peak_fragmentation: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"settings": {**self.settings.as_dict(), "device_memory_bytes": self.device_memory_bytes},
                "peak_reserved_bytes": self.peak_reserved_bytes, "peak_allocated_bytes": self.peak_allocated_bytes,
                "peak_requested_bytes": self.peak_requested_bytes, "final_fragmentation": self.final_fragmentation,
                "fragmentation_at_peak_reserved": self.peak_fragmentation, "ooms": [o.as_dict() for o in self.ooms]}


@dataclass(frozen=True)
class StartState:
    """What a simulation inherits at the start of the trace, and the notes on what that limits."""

    inherited: bool
    reserved_bytes: int
    allocated_bytes: int
    segments: int
    blocks: int
    consistent: bool
    notes: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"inherited": self.inherited, "reserved_bytes": self.reserved_bytes,
                "allocated_bytes": self.allocated_bytes, "segments": self.segments, "blocks": self.blocks,
                "consistent": self.consistent, "notes": list(self.notes)}


@dataclass(frozen=True)
class CertainOom:
    """The trace's largest single request, larger than the device: an OOM no setting can avoid."""

    event: int
    request_bytes: int
    device_memory_bytes: int

    def as_dict(self) -> dict[str, int]:
        return {"event": self.event, "request_bytes": self.request_bytes,
                "device_memory_bytes": self.device_memory_bytes}


@dataclass(frozen=True)
class DeviceWhatIf:
    """One device under one setting: refused with a reason, or simulated next to the recording. `series` holds the
    simulated run's figures to draw, where they were asked for (simulate_device's `series_points`)."""

    device: int
    label: str
    reason: str | None = None  # why it cannot answer; None when simulated
    given: RunFigures | None = None
    baseline: RunFigures | None = None  # the same workload under the recorded settings
    recorded: RunFigures | None = None
    start: StartState | None = None
    memory: DeviceMemory | None = None
    outcome: str | None = None
    claim: str | None = None
    certain_oom: CertainOom | None = None
    series: Timeline | None = field(default=None, compare=False, repr=False)
    changes: tuple[dict[str, Any], ...] = ()  # code what-ifs (simulate.reshape): each change and what it touched
    alloc_conf: str | None = None  # with changes: the settings part of the label (None: the recorded settings)
    changed_kinds: tuple[dict[str, Any], ...] = ()  # code what-ifs: each kind touched, before and after (Reshaper)
    change_notes: tuple[str, ...] = ()  # code what-ifs: what a scale covered beyond its target, and what it left

    @property
    def status(self) -> str:
        return CANNOT_ANSWER if self.reason is not None else SIMULATED

    @property
    def avoids_oom(self) -> bool | None:
        """True or False only where the simulation can say; None where it cannot (a run that gets past a failure
        the recording ends at may run out of memory later, where nothing was simulated)."""
        return {AVOIDS_OOM: True, STILL_OOMS: False}.get(self.outcome or "")

    def as_dict(self) -> dict[str, Any]:
        """The device's object in `fragviz simulate --alloc-conf CONF --json`."""
        head = {"device": self.device, "mode": "free-run", "status": self.status,
                "alloc_conf": self.alloc_conf if self.changes else self.label}
        if self.changes:
            head.update(changes=list(self.changes), changed_kinds=list(self.changed_kinds),
                        change_notes=list(self.change_notes))
        certain = {"certain_oom": self.certain_oom.as_dict() if self.certain_oom else None}
        if self.reason is not None:
            return {**head, "reason": self.reason, **certain}
        return {**head, **self.given.as_dict(), "recorded": self.recorded.as_dict(),
                "baseline": self.baseline.as_dict(), "device_memory": self.memory.as_dict(),
                "start": self.start.as_dict(), "outcome": self.outcome, "claim": self.claim, **certain}


@dataclass(frozen=True)
class WhatIfResult:
    """Every device free-run under one setting (`what_if`)."""

    devices: tuple[DeviceWhatIf, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"devices": [d.as_dict() for d in self.devices]}


@dataclass(frozen=True)
class Reservation:
    """An expandable segment's reservation, read from the trace: where it starts and how far it may grow."""

    base: int
    limit_bytes: int | None
    pool: str  # "small" or "large"
    stream: int

    def as_dict(self) -> dict[str, Any]:
        return {"base": self.base, "limit_bytes": self.limit_bytes, "pool": self.pool, "stream": self.stream}


@dataclass(frozen=True)
class Mismatch:
    """A recorded event the model predicted otherwise. `recorded` and `predicted` are the figures compared
    (addresses and sizes, by name), or a sentence where there was nothing to predict; the text shows them as read."""

    event: int
    action: str
    recorded: dict[str, int | None]
    predicted: dict[str, int | None] | str

    def as_dict(self) -> dict[str, Any]:
        return {"event": self.event, "action": self.action, "recorded": self.recorded, "predicted": self.predicted}


@dataclass(frozen=True)
class DeviceFollow:
    """Follow mode's scores on one device: how often the model predicted what the allocator did."""

    device: int
    alloc_events: int
    alloc_address_matches: int
    segment_allocs_recorded: int
    segment_allocs_predicted: int
    segment_allocs_matched: int
    final_state_matches: bool
    mismatches: tuple[Mismatch, ...]
    divergences: int  # recorded events the simulated state could not take as they came
    reservations: tuple[Reservation, ...]
    certain_oom: CertainOom | None = None

    def as_dict(self) -> dict[str, Any]:
        """The device's object in `fragviz simulate --json`."""
        return {"device": self.device, "mode": "follow", "alloc_events": self.alloc_events,
                "alloc_address_matches": self.alloc_address_matches,
                "segment_allocs_recorded": self.segment_allocs_recorded,
                "segment_allocs_predicted": self.segment_allocs_predicted,
                "segment_allocs_matched": self.segment_allocs_matched,
                "final_state_matches": self.final_state_matches, "mismatches": [m.as_dict() for m in self.mismatches],
                "reservations": [r.as_dict() for r in self.reservations],
                "certain_oom": self.certain_oom.as_dict() if self.certain_oom else None}


@dataclass(frozen=True)
class FollowResult:
    """Follow mode on every device (`follow`)."""

    devices: tuple[DeviceFollow, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"devices": [d.as_dict() for d in self.devices]}
