"""The snapshot data model: what a PyTorch memory snapshot says, independent of how it was stored.

No I/O here. Segments and blocks are small frozen records; a device's trace is columnar (one numpy
array per field), because traces run to millions of events and are read by index, not one by one.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class BlockState(str, enum.Enum):
    ACTIVE_ALLOCATED = "active_allocated"
    ACTIVE_PENDING_FREE = "active_pending_free"
    INACTIVE = "inactive"

    @property
    def is_active(self) -> bool:
        return self is not BlockState.INACTIVE


# Trace actions in PyTorch's own spelling. A trace stores each action as its index in ACTIONS; an action
# name this list does not know is appended to the snapshot's own vocabulary (Trace.action_names).
ACTIONS: tuple[str, ...] = (
    "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
    "segment_map", "segment_unmap", "snapshot", "oom", "user_defined", "annotate",
)
ALLOC, FREE_REQUESTED, FREE_COMPLETED, SEGMENT_ALLOC, SEGMENT_FREE = 0, 1, 2, 3, 4
SEGMENT_MAP, SEGMENT_UNMAP, SNAPSHOT, OOM = 5, 6, 7, 8

# A top-level key fragviz adds to snapshots it makes itself (synthetic or simulated), saying how they were
# made; PyTorch never writes it. Its "origin" is "synthetic" or "simulated".
PROVENANCE_KEY = "fragviz_provenance"

NO_STACK = -1
NO_TIME = -1
NO_STRING = -1


@dataclass(frozen=True)
class Frame:
    filename: str
    line: int
    name: str


@dataclass(frozen=True)
class Block:
    address: int
    size: int
    requested_size: int
    state: BlockState
    stack: int = NO_STACK  # index into Snapshot.stacks, NO_STACK when no frames were recorded


@dataclass(frozen=True)
class Segment:
    device: int
    address: int
    total_size: int
    stream: int
    pool: str  # "small" or "large"
    blocks: tuple[Block, ...]
    pool_id: tuple[int, int] | None = None
    is_expandable: bool | None = None
    stack: int = NO_STACK

    @property
    def end(self) -> int:
        return self.address + self.total_size


@dataclass(frozen=True)
class Trace:
    """One device's trace, oldest event first, as parallel columns.

    `addr` holds `device_free` for `oom` events (they have no addr). `stack` indexes Snapshot.stacks.
    `compile_context` and `user_metadata` index Snapshot.strings. Missing values are the NO_* constants.
    """

    device: int
    action: np.ndarray  # uint8 codes into action_names
    addr: np.ndarray  # int64
    size: np.ndarray  # int64
    stream: np.ndarray  # int64
    time_us: np.ndarray  # int64, NO_TIME where absent
    stack: np.ndarray  # int32
    compile_context: np.ndarray  # int32
    user_metadata: np.ndarray  # int32
    action_names: tuple[str, ...] = ACTIONS

    def __len__(self) -> int:
        return int(self.action.shape[0])

    @property
    def has_time(self) -> bool:
        return len(self) > 0 and bool((self.time_us != NO_TIME).any())

    def action_counts(self) -> dict[str, int]:
        counts = np.bincount(self.action, minlength=len(self.action_names))
        return {self.action_names[i]: int(c) for i, c in enumerate(counts) if c}


def empty_trace(device: int) -> Trace:
    i64, i32 = np.zeros(0, np.int64), np.zeros(0, np.int32)
    return Trace(device, np.zeros(0, np.uint8), i64, i64, i64, i64, i32, i32, i32)


@dataclass(frozen=True)
class FormatInfo:
    """How the file was stored and which generation of the snapshot format it is."""

    encoding: str  # "pickle" or "json"
    compression: str | None  # "gzip" or None
    pickle_protocol: int | None
    generation: str  # e.g. "2.0", "2.1", "segments-list"
    torch_estimate: str  # a human estimate of the PyTorch release that wrote it
    features: tuple[str, ...] = ()  # format markers seen: "block_history", "time_us", ...

    def as_dict(self) -> dict[str, Any]:
        return {
            "encoding": self.encoding, "compression": self.compression,
            "pickle_protocol": self.pickle_protocol, "generation": self.generation,
            "torch_estimate": self.torch_estimate, "features": list(self.features),
        }


@dataclass
class Snapshot:
    """A parsed snapshot: final segments of every device, each device's trace, and what came with them."""

    source: str
    format: FormatInfo
    segments: tuple[Segment, ...]
    traces: dict[int, Trace]
    frames: tuple[Frame, ...]
    stacks: tuple[tuple[int, ...], ...]  # each a tuple of indices into frames, innermost call first
    strings: tuple[str, ...] = ()
    allocator_settings: dict[str, Any] | None = None
    external_annotations: list[dict[str, Any]] | None = None
    warnings: list[str] = field(default_factory=list)
    provenance: dict[str, Any] | None = None  # PROVENANCE_KEY of snapshots fragviz made, else None

    def devices(self) -> list[int]:
        """Devices with a segment or a non-empty trace, ascending."""
        seen = {s.device for s in self.segments}
        seen.update(d for d, t in self.traces.items() if len(t))
        return sorted(seen)

    def segments_of(self, device: int) -> list[Segment]:
        return [s for s in self.segments if s.device == device]

    def trace_of(self, device: int) -> Trace:
        return self.traces.get(device) or empty_trace(device)

    def stack_frames(self, stack: int) -> list[Frame]:
        if stack == NO_STACK:
            return []
        return [self.frames[i] for i in self.stacks[stack]]
