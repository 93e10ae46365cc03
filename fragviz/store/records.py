"""What the store keeps about a snapshot besides its data: a versioned summary, and jobs of ranks.

The summary is the store's own record (not a report): the figures the library, the job page and the what-if
page list without opening a trace. `SUMMARY_VERSION` counts its shapes; a stored summary of an older shape is
read with its missing figures as None, so that a page can say they were not recorded.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Iterable

from fragviz.model import Frame, Segment

SUMMARY_VERSION = 2  # 2: fragmentation is non-releasable / reserved (fragviz.model.metrics); 1 and 0 meant free scatter


@dataclass(frozen=True)
class DeviceSummary:
    """One device of an ingested snapshot: its final state, its peaks over the trace, and its OOMs.

    `fragmentation` is non-releasable / reserved bytes (fragviz.model.metrics) and `free_scatter` the secondary
    1 - largest free block / free bytes. `peak_state` is the state (events applied) of the first peak of
    reserved bytes in the trace window, with the non-releasable bytes and fragmentation there (None where the
    trace has no states to look at, or the summary was stored before they were kept). `verdicts` are the
    doctor's, one per recorded OOM, in order.
    """
    device: int
    trace_events: int
    trace_actions: dict[str, int]
    reserved_bytes: int
    allocated_bytes: int
    requested_bytes: int
    free_bytes: int
    largest_free_block: int
    fragmentation: float | None
    segments: int
    blocks: int
    peak_reserved_bytes: int
    peak_requested_bytes: int
    peak_state: int | None = None
    fragmentation_at_peak: float | None = None
    verdicts: tuple[str, ...] | None = None
    non_releasable_bytes: int | None = None
    free_scatter: float | None = None
    non_releasable_at_peak: int | None = None

    @property
    def ooms(self) -> int:
        return int(self.trace_actions.get("oom", 0))

    @property
    def allocs(self) -> int:
        return int(self.trace_actions.get("alloc", 0))


@dataclass(frozen=True)
class Summary:
    devices: tuple[DeviceSummary, ...] = ()
    version: int = SUMMARY_VERSION

    def device(self, device: int) -> DeviceSummary | None:
        return next((d for d in self.devices if d.device == device), None)

    @property
    def ooms(self) -> int:
        return sum(d.ooms for d in self.devices)

    def to_json(self) -> str:
        return json.dumps({"version": self.version, "devices": [asdict(d) for d in self.devices]})

    @classmethod
    def from_json(cls, text: str) -> "Summary":
        data = json.loads(text)
        if "version" not in data:  # stored before version 4 of the schema: a report object
            return cls.from_report(data)
        version = int(data["version"])
        return cls(tuple(_device(d, version) for d in data["devices"]), version)

    @classmethod
    def from_report(cls, report: dict[str, Any]) -> "Summary":
        """The figures a report object (`fragviz report --json`, what older stores kept) gives; no peak state,
        fragmentation at the peak or verdicts."""
        return cls(tuple(_device(d, 0) for d in report.get("devices", [])), 0)


_DEVICE_FIELDS = {f.name for f in fields(DeviceSummary)}


def _device(d: dict[str, Any], version: int) -> DeviceSummary:
    values = {k: v for k, v in d.items() if k in _DEVICE_FIELDS}
    if version < 2:  # its "fragmentation" was the free scatter; the figure now so named was not kept
        values["free_scatter"] = values.get("fragmentation")
        values["fragmentation"] = values["fragmentation_at_peak"] = None
    if values.get("verdicts") is not None:
        values["verdicts"] = tuple(values["verdicts"])
    values["trace_actions"] = dict(values.get("trace_actions") or {})
    return DeviceSummary(**values)


@dataclass(frozen=True)
class JobRank:
    rank: int
    snapshot_id: int
    name: str


@dataclass(frozen=True)
class Job:
    id: int
    name: str
    created_at: str
    ranks: tuple[JobRank, ...] = field(default=())


@dataclass(frozen=True)
class DeviceInfo:
    """The devices row of a stored snapshot."""
    device: int
    trace_events: int
    action_names: tuple[str, ...]
    pre_trace_blocks: int
    pre_trace_segments: int
    warnings: list[str]


@dataclass(frozen=True)
class DeviceRecord:
    """What the store keeps of one device of a snapshot. The blobs are columnar (fragviz.model.columns), made by the
    replay (fragviz.library.stored), and may come lazily: each iterable is read once, as it is written."""
    info: DeviceInfo  # the devices row
    segments: tuple[Segment, ...]  # the final state as recorded
    trace_chunks: Iterable[bytes]  # CHUNK_EVENTS events each
    series_chunks: Iterable[bytes]  # CHUNK_EVENTS states each
    series_lod: Iterable[tuple[int, bytes]]  # (bucket, min/max per bucket)
    checkpoints: Iterable[tuple[int, bytes]]  # (event, layout after it)
    allocations: Callable[[], bytes]

    @property
    def device(self) -> int:
        return self.info.device


@dataclass(frozen=True)
class SnapshotRecord:
    """A whole snapshot for the writer: written in one transaction, or not at all."""
    name: str
    content_hash: str
    file_size: int
    format: dict[str, Any]
    warnings: list[str]
    allocator_settings: Any
    external_annotations: Any
    strings: tuple[str, ...]
    provenance: Any
    summary: Summary
    frames: tuple[Frame, ...]
    stacks: tuple[tuple[int, ...], ...]  # frame indices, innermost first
    devices: tuple[DeviceRecord, ...]

