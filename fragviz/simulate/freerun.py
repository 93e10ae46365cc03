"""Free-run mode: replay a trace's workload (its requests and frees) under any settings and device size.

The workload is what the program asked for: every `alloc` (size, stream, stack), every free, deferred
frees (a `free_completed` that comes later than its `free_requested`), `empty_cache()` calls (releases
that no malloc needed) and the requests that ran out of memory (`oom`). The simulator places everything
itself, from the state rebuilt at the start of the trace.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from fragviz.allocator.blocks import Block
from fragviz.allocator.config import AllocatorSettings
from fragviz.allocator.groups import NEW_MEMORY, RELEASES, malloc_groups
from fragviz.allocator.reservations import ReservationPlan
from fragviz.allocator.sim import DeviceAllocator
from fragviz.allocator.state import load_segments
from fragviz.model.metrics import fragmentation
from fragviz.model import (ALLOC, FREE_COMPLETED, FREE_REQUESTED, OOM, SEGMENT_ALLOC, Segment, Trace)
from fragviz.simulate.records import OomAt, RunFigures
from fragviz.simulate.series import RunSeries

MAX_OOMS = 1000


@dataclass(frozen=True)
class Op:
    kind: str  # "alloc", "free", "complete", "empty_cache", "oom_request"
    event: int
    key: Any = None  # the lifetime (alloc, free, complete)
    size: int = 0
    stream: int = 0
    stack: int = -1
    pending: bool = False


@dataclass(frozen=True)
class PeakState:
    """A run's state of most reserved bytes (at its fullest): after `state` - 1 events, its bytes and fragmentation
    (non-releasable / reserved bytes, fragviz.model.metrics)."""

    state: int
    reserved_bytes: int
    allocated_bytes: int
    fragmentation: float


@dataclass
class FreeRunResult:
    device: int
    settings: AllocatorSettings
    capacity: int | None
    allocator: DeviceAllocator
    ooms: list[OomAt] = field(default_factory=list)  # the first MAX_OOMS
    oom_count: int = 0
    series: RunSeries | None = None  # with free_run(series_points=...): what a what-if draws
    peak: PeakState | None = None  # the state of most reserved bytes, at its fullest

    def figures(self) -> RunFigures:
        """The run's peaks, final fragmentation and OOMs."""
        a = self.allocator
        return RunFigures(self.settings, self.capacity, a.peaks.reserved, a.peaks.active, a.peaks.requested,
                          fragmentation(a.non_releasable_bytes(), a.reserved), tuple(self.ooms), self.oom_count,
                          self.peak.fragmentation if self.peak is not None else None)


def workload(trace: Trace, reserved: list[int] | None = None, capacity: int | None = None) -> Iterator[Op]:
    """The program's requests in a recorded trace, in order, with lifetimes keyed by (address, version).

    `reserved` (bytes reserved after K events, from the replay) and the device `capacity` tell an
    empty_cache() call from a malloc's own release-and-retry: see `_is_empty_cache`.
    """
    act, addr, size = trace.action.tolist(), trace.addr.tolist(), trace.size.tolist()
    stream, stack = trace.stream.tolist(), trace.stack.tolist()
    version: dict[int, int] = {}
    deferred: set[tuple[int, int]] = set()
    n = len(act)
    for i, x in enumerate(act):
        if x == ALLOC:
            yield Op("alloc", i, (addr[i], version.get(addr[i], 0)), size[i], stream[i], stack[i])
        elif x == FREE_REQUESTED:
            key = (addr[i], version.get(addr[i], 0))
            later = not (i + 1 < n and act[i + 1] == FREE_COMPLETED and addr[i + 1] == addr[i])
            if later:
                deferred.add(key)
            yield Op("free", i, key, pending=later)
        elif x == FREE_COMPLETED:
            key = (addr[i], version.get(addr[i], 0))
            version[addr[i]] = key[1] + 1
            if key in deferred:
                deferred.discard(key)
                yield Op("complete", i, key)
        elif x in RELEASES and (i == 0 or act[i - 1] not in RELEASES) and _is_empty_cache(act, size, i, reserved, capacity):
            yield Op("empty_cache", i)
        elif x == OOM:
            yield Op("oom_request", i, size=size[i], stream=stream[i], stack=stack[i])


def _is_empty_cache(act: list[int], size: list[int], i: int, reserved: list[int] | None,
                    capacity: int | None) -> bool:
    """Whether the releases starting at event i were an empty_cache() rather than a malloc's retry.

    A malloc releases cached memory only after a device allocation failed, which needs a full device. If
    no malloc follows, or the device had room for the memory the malloc then took (`capacity` unknown is
    taken as room enough, as the simulation itself assumes), the releases were the program's own.
    """
    j = i
    while j < len(act) and act[j] in RELEASES:
        j += 1
    new = 0
    while j < len(act) and act[j] in NEW_MEMORY:
        new += size[j]
        j += 1
    if j == len(act) or act[j] != ALLOC or capacity is None or reserved is None:
        return True
    return reserved[i] + new <= capacity


def recorded_device_allocations(trace: Trace) -> dict[int, list[tuple[int, int]]]:
    """(size, address) of the cudaMallocs just before each alloc event, by the alloc's index."""
    act, addr, size = trace.action.tolist(), trace.addr.tolist(), trace.size.tolist()
    hints: dict[int, list[tuple[int, int]]] = {}
    for a, g in malloc_groups(act).items():
        found = [(size[j], addr[j]) for j in range(g, a) if act[j] == SEGMENT_ALLOC]
        if found:
            hints[a] = found
    return hints


def free_run(trace: Trace, start: list[Segment], settings: AllocatorSettings, capacity: int | None,
             reserved: list[int] | None = None, record: bool = False,
             progress: Callable[[int, int], None] | None = None, series_points: int | None = None,
             reshape: Callable[[Iterator[Op]], Iterable[Op]] | None = None) -> FreeRunResult:
    """Replay the workload of `trace` from the `start` state under `settings` on a device of `capacity` bytes.

    `reserved` is the recorded reserved bytes after each event (the replay's series), used to read the trace.
    With `series_points`, the result's `series` holds reserved bytes and fragmentation after every event, in at
    most that many buckets. `reshape` changes the workload before it runs (a code what-if, simulate.reshape); the
    recorded driver's addresses are then no guide and are not used.
    """
    ops = workload(trace, reserved, capacity)
    hints = recorded_device_allocations(trace) if reshape is None else {}
    return run_workload(reshape(ops) if reshape is not None else ops, len(trace), start, settings, capacity,
                        trace.device, ReservationPlan.infer(trace, start), hints, record, progress, series_points)


def run_workload(ops: Iterable[Op], events: int, start: list[Segment], settings: AllocatorSettings,
                 capacity: int | None, device: int = 0, reservations: ReservationPlan | None = None,
                 hints: dict[int, list[tuple[int, int]]] | None = None, record: bool = False,
                 progress: Callable[[int, int], None] | None = None,
                 series_points: int | None = None) -> FreeRunResult:
    """Run a workload (`workload`'s ops, or a predicted one: fragviz.predict) of `events` events from `start`."""
    alloc = DeviceAllocator(settings, capacity, device, record=record)
    if reservations is not None:
        alloc.reservations = reservations  # where the recorded driver put them
    load_segments(alloc, start)
    alloc.address_hints = hints or {}
    result = FreeRunResult(device, settings, capacity, alloc)
    live: dict[Any, Block] = {(b.addr, 0): b for b in alloc.active.values()}
    peak = _PeakWatch(alloc)
    if series_points:
        result.series = RunSeries(events, series_points)
        result.series.observe(0, alloc)
    for count, op in enumerate(ops):
        alloc.event = op.event
        if progress is not None and count % 5000 == 0:
            progress(op.event, events)
        if op.kind == "alloc":
            block = alloc.malloc(op.size, op.stream, op.stack)
            if block is None:
                _note_oom(result, op)
            else:
                live[op.key] = block
                peak.observe(op.event + 1)
        elif op.kind == "free":
            block = live.get(op.key)
            if block is not None and block.allocated:
                alloc.free(block, pending=op.pending)
                if not op.pending:
                    del live[op.key]
        elif op.kind == "complete":
            block = live.pop(op.key, None)
            if block is not None:
                alloc.complete(block)
        elif op.kind == "empty_cache":
            alloc.empty_cache()
        elif op.kind == "oom_request":
            _retry_recorded_oom(alloc, result, op)
        if result.series is not None:
            result.series.observe(op.event + 1, alloc)
    result.peak = peak.state()
    return result


class _PeakWatch:
    """The state of most reserved bytes at its fullest (the first with the most allocated bytes among those with
    the most reserved), as fragviz.gate.figures reads a recorded run's peak, and its fragmentation."""

    def __init__(self, alloc: DeviceAllocator) -> None:
        self.alloc = alloc
        self.reserved, self.allocated, self.at = alloc.reserved, alloc.active_bytes, 0
        self.fragmentation = fragmentation(alloc.non_releasable_bytes(), alloc.reserved)

    def observe(self, state: int) -> None:
        a = self.alloc
        if a.reserved > self.reserved or (a.reserved == self.reserved and a.active_bytes > self.allocated):
            self.reserved, self.allocated, self.at = a.reserved, a.active_bytes, state
            self.fragmentation = fragmentation(a.non_releasable_bytes(), a.reserved)

    def state(self) -> PeakState:
        return PeakState(self.at, self.reserved, self.allocated, self.fragmentation)


def _retry_recorded_oom(alloc: DeviceAllocator, result: FreeRunResult, op: Op) -> None:
    # The recorded run failed this request; the program never got it, so a success is freed at once.
    block = alloc.malloc(op.size, op.stream, op.stack)
    if block is None:
        _note_oom(result, op)
    else:
        alloc.free(block)


def _note_oom(result: FreeRunResult, op: Op) -> None:
    result.oom_count += 1
    if len(result.ooms) < MAX_OOMS:
        a = result.allocator
        result.ooms.append(OomAt(op.event, op.size, a.reserved, a.largest_free_block(), op.key))
