"""Follow mode: at each recorded event, predict what PyTorch's allocator did, then continue from the truth.

The simulator starts from the state rebuilt at the start of the trace. Before each malloc (an `alloc` and
the segment events just before it: its cudaMalloc, expandable maps, or releases on a retry) it predicts,
without changing its state, which address the request gets and whether (and how much) new device memory
it needs. Then it applies the recorded events as they happened, so one wrong guess never snowballs.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from fragviz.allocator.blocks import Block, BlockPool
from fragviz.allocator.config import AllocatorSettings
from fragviz.allocator.reservations import ReservationPlan, page_size, segment_is_small
from fragviz.allocator.rules import allocation_size, round_size, should_split
from fragviz.allocator.sim import DeviceAllocator
from fragviz.allocator.state import allocator_segments, load_segments
from fragviz.replay.analysis import Analysis
from fragviz.allocator.groups import NEW_MEMORY, RELEASES, malloc_groups
from fragviz.model import (ALLOC, FREE_COMPLETED, FREE_REQUESTED, SEGMENT_ALLOC, SEGMENT_FREE, SEGMENT_MAP,
                           SEGMENT_UNMAP, Segment, Trace)
from fragviz.simulate.records import DeviceFollow, FollowResult, Mismatch, Reservation
from fragviz.simulate.whatif import certain_oom

MAX_MISMATCHES = 20


@dataclass(frozen=True)
class Prediction:
    alloc_addr: int | None  # None: the front of memory not mapped yet, whose address cannot be known
    new_bytes: int  # device memory the malloc needs (0: served from the cache)
    new_addr: int | None = None  # where that memory starts, where it can be known


@dataclass
class _Score:
    """Follow mode's counts on one device while it runs (DeviceFollow when done)."""

    device: int
    alloc_events: int = 0
    alloc_address_matches: int = 0
    segment_allocs_recorded: int = 0
    segment_allocs_predicted: int = 0
    segment_allocs_matched: int = 0
    final_state_matches: bool = True
    mismatches: list[Mismatch] = field(default_factory=list)
    divergences: int = 0  # recorded events the simulated state could not take as they came
    reservations: tuple[Reservation, ...] = ()  # expandable ones, read from the trace

    def note(self, event: int, action: str, recorded: dict[str, int | None],
             predicted: dict[str, int | None] | str) -> None:
        if len(self.mismatches) < MAX_MISMATCHES:
            self.mismatches.append(Mismatch(event, action, recorded, predicted))

    def record(self) -> DeviceFollow:
        return DeviceFollow(self.device, self.alloc_events, self.alloc_address_matches, self.segment_allocs_recorded,
                            self.segment_allocs_predicted, self.segment_allocs_matched, self.final_state_matches,
                            tuple(self.mismatches), self.divergences, self.reservations)


def predict(alloc: DeviceAllocator, orig_size: int, stream: int) -> Prediction:
    """What malloc(orig_size) would do now, computed without changing the allocator."""
    size = round_size(orig_size, alloc.settings)
    pool = alloc.pool_for(size)
    block = alloc.get_free_block(pool, size, stream, remove=False)
    if block is not None:
        return Prediction(block.addr, 0)
    if not alloc.settings.expandable_segments:
        return Prediction(None, allocation_size(size))
    page = page_size(pool.small)
    candidate = alloc.find_expandable_block(pool, size, stream, create=False)
    if candidate is None:
        return Prediction(None, _pages(size, page))
    first_new = candidate.addr if not candidate.mapped else candidate.next.addr
    return Prediction(candidate.addr, _expandable_growth(candidate, size, page), first_new)


def _expandable_growth(candidate: Block, size: int, page: int) -> int:
    """Bytes try_allocate_expandable_block maps for `size` bytes from `candidate` (a free block followed by
    unmapped ones, or an unmapped block), walked as it does: map what the next unmapped block lacks, in
    whole pages but no more than that block, and take in a free block right after it as it merges."""
    mapped = 0
    have = candidate.size if candidate.mapped else 0
    block = candidate if not candidate.mapped else candidate.next
    while have < size and block is not None and not block.mapped:
        grown = min(_pages(size - have, page), block.size)
        mapped += grown
        have += grown
        after = block.next
        if grown == block.size and after is not None and after.mapped and not after.allocated and not after.pending:
            have += after.size
            block = after.next
        else:
            break
    return mapped


def _pages(n: int, page: int) -> int:
    return -(-n // page) * page


class _Follower:
    def __init__(self, trace: Trace, start: list[Segment], settings: AllocatorSettings,
                 device_total: int | None = None) -> None:
        self.alloc = DeviceAllocator(settings, None, trace.device, record=False)
        self.alloc.reservations = ReservationPlan.infer(trace, start, device_total)
        load_segments(self.alloc, start)
        self.act = trace.action.tolist()
        self.addr = trace.addr.tolist()
        self.size = trace.size.tolist()
        self.stream = trace.stream.tolist()
        self.stack = trace.stack.tolist()
        self.result = _Score(trace.device)
        self.result.reservations = tuple(Reservation(r.base, r.limit, "small" if r.small else "large", r.stream)
                                         for r in self.alloc.reservations.reservations)

    def run(self, final: list[Segment]) -> DeviceFollow:
        act, n = self.act, len(self.act)
        self.groups = malloc_groups(act)
        starts = {g: a for a, g in self.groups.items()}
        later: dict[int, int] = {}
        predictions: dict[int, Prediction] = {}
        for i in range(n):
            a = starts.get(i, later.get(i))
            if a is not None:
                predictions[a] = predict(self.alloc, self.size[a], self.stream[a])
                retry = _after_releases(act, i, a)
                if retry is not None:
                    # Releases inside a malloc: an empty_cache() before it began, or the allocator's own
                    # release of every cached page once the device had no room (maps it had made before
                    # that failed are released too). Either way what the malloc then got is decided by the
                    # state after them: predict again there.
                    later[retry] = a
            if act[i] == ALLOC:
                self._score(i, predictions.pop(i))
            self._apply(i)
        self._count_stray_segment_allocs()
        self.result.final_state_matches = _same_segments(allocator_segments(self.alloc), final)
        return self.result.record()

    # -- scoring -------------------------------------------------------------------------------------
    def _score(self, a: int, pred: Prediction) -> None:
        r = self.result
        g = self.groups[a]
        retry = _after_releases(self.act, g, a)
        new = [(self.addr[j], self.size[j]) for j in range(retry or g, a) if self.act[j] in NEW_MEMORY]
        new_bytes = sum(s for _, s in new)
        r.alloc_events += 1
        if new:
            r.segment_allocs_recorded += 1
        if pred.new_bytes:
            r.segment_allocs_predicted += 1
        memory_ok = new_bytes == pred.new_bytes and (not new or pred.new_addr is None or new[0][0] == pred.new_addr)
        if new and pred.new_bytes and memory_ok:
            r.segment_allocs_matched += 1
        if pred.alloc_addr is not None:
            addr_ok = memory_ok and self.addr[a] == pred.alloc_addr
        else:
            addr_ok = memory_ok and bool(new) and self.addr[a] == new[0][0]
        if addr_ok:
            r.alloc_address_matches += 1
            return
        recorded = {"addr": self.addr[a], "size": self.size[a], "new_memory_bytes": new_bytes}
        predicted = {"addr": pred.alloc_addr, "new_memory_bytes": pred.new_bytes}
        r.note(a, "alloc", recorded, predicted)

    def _count_stray_segment_allocs(self) -> None:
        grouped = set()
        for a, g in self.groups.items():
            grouped.update(range(g, a))
        for j, act in enumerate(self.act):
            if act in NEW_MEMORY and j not in grouped:
                self.result.segment_allocs_recorded += 1
                self.result.note(j, "segment_alloc", {"addr": self.addr[j], "size": self.size[j]},
                                 "no malloc follows this device allocation in the trace")

    # -- applying the recorded truth -----------------------------------------------------------------
    def _apply(self, i: int) -> None:
        act, addr, size, stream = self.act[i], self.addr[i], self.size[i], self.stream[i]
        if act == ALLOC:
            self._alloc(i, addr, size, stream)
        elif act == FREE_REQUESTED:
            block = self.alloc.active.get(addr)
            if block is not None and block.allocated:
                block.allocated, block.pending = False, True  # free until free_completed says otherwise
            else:
                self.result.divergences += 1
        elif act == FREE_COMPLETED:
            block = self.alloc.active.get(addr)
            if block is not None:
                block.allocated = block.pending = False
                self.alloc.free_block(block)
            else:
                self.result.divergences += 1
        elif act == SEGMENT_ALLOC:
            block = self.alloc.new_segment(addr, size, stream, self._pool_for_segment(i, size))
            block.pool.insert(block)
        elif act == SEGMENT_FREE:
            block = _free_at(self.alloc, addr)
            if block is not None and not block.is_split and block.es is None:
                self.alloc.release_block(block)
            else:
                self.result.divergences += 1
        elif act == SEGMENT_MAP:
            self._map(i, addr, size, stream)
        elif act == SEGMENT_UNMAP:
            block = _free_containing(self.alloc, addr, size)
            if block is None or block.es is None or not self.alloc.unmap_block(block, addr, addr + size):
                self.result.divergences += 1

    def _pool_for_segment(self, i: int, size: int) -> BlockPool:
        small = segment_is_small(self.act, self.size, i)
        return self.alloc.small if small else self.alloc.large

    def _alloc(self, i: int, addr: int, orig: int, stream: int) -> None:
        alloc = self.alloc
        rounded = round_size(orig, alloc.settings)
        block = _free_at(alloc, addr) or _free_containing(alloc, addr, rounded)
        if block is None:
            self.result.divergences += 1
            return
        pool = block.pool
        pool.remove(block)
        if block.addr < addr:  # the recorded allocator had a boundary here that the rebuilt state lacks
            self.result.divergences += 1
            block = _split_off_front(block, addr - block.addr)
        split = block.size > rounded and should_split(block.size, rounded, pool.small, alloc.settings)
        alloc.alloc_found_block(block, min(rounded, block.size) if split else block.size, orig, split, self.stack[i])

    def _map(self, i: int, addr: int, size: int, stream: int) -> None:
        alloc = self.alloc
        pool = self._pool_for_segment(i, size)
        block = _unmapped_containing(pool, addr, stream)
        if block is None:
            block = self._open_reservation(pool, addr, stream)
            if block is None:
                self.result.divergences += 1
                return
        if block.addr < addr:
            pool.remove_unmapped(block)
            head = Block(block.addr, addr - block.addr, block.stream, pool, mapped=False, es=block.es)
            head.splice(block.prev, block)
            block.addr, block.size = addr, block.size - head.size
            pool.insert_unmapped(head)
            pool.insert_unmapped(block)
        if not alloc.map_block(block, min(size, block.size)):
            self.result.divergences += 1

    def _open_reservation(self, pool: BlockPool, addr: int, stream: int) -> Block | None:
        """The first map into a reservation not made yet: make it where the plan read from the trace puts it."""
        alloc = self.alloc
        r = alloc.reservations.find(addr, pool.small, stream)
        if r is None or any(es.base == r.base for es in alloc.expandable):
            return None  # mapping memory that is mapped already: the recorded state and ours differ
        return alloc.reserve(pool, stream, r.base, r.pages(alloc.reservation_default(pool.small)))


def _free_at(alloc: DeviceAllocator, addr: int) -> Block | None:
    for pool in alloc.all_pools():
        block = pool.by_addr.get(addr)
        if block is not None:
            return block
    return None


def _free_containing(alloc: DeviceAllocator, addr: int, size: int) -> Block | None:
    for pool in alloc.all_pools():
        for block in pool.by_addr.values():
            if block.addr <= addr and addr + size <= block.addr + block.size:
                return block
    return None


def _unmapped_containing(pool: BlockPool, addr: int, stream: int) -> Block | None:
    for block in pool.unmapped.values():
        if block.stream == stream and block.addr <= addr < block.addr + block.size:
            return block
    return None


def _after_releases(act: list[int], g: int, a: int) -> int | None:
    """The index after the last release among a malloc's events [g, a), if it has releases."""
    last = None
    for j in range(g, a):
        if act[j] in RELEASES:
            last = j
    return None if last is None else last + 1


def _split_off_front(block: Block, front: int) -> Block:
    """Cut `front` bytes off a free block (out of its pool) into a free block of their own; return the rest."""
    head = Block(block.addr, front, block.stream, block.pool, block.mapped, block.es)
    head.splice(block.prev, block)
    block.addr += front
    block.size -= front
    block.pool.insert(head)
    return block


def _same_segments(simulated: list[dict[str, Any]], final: list[Segment]) -> bool:
    def shape_sim(s: dict[str, Any]) -> tuple:
        return (s["address"], s["total_size"], tuple((b["address"], b["size"], b["state"]) for b in s["blocks"]))

    def shape_final(s: Segment) -> tuple:
        return (s.address, s.total_size, tuple((b.address, b.size, b.state.value) for b in s.blocks))

    return sorted(map(shape_sim, simulated)) == sorted(map(shape_final, final))


def follow_device(trace: Trace, start: list[Segment], final: list[Segment], settings: AllocatorSettings,
                  device_total: int | None = None) -> DeviceFollow:
    """Follow `trace` from the `start` state; score predictions; check the end against `final`.

    `device_total` (bytes), where known, bounds expandable reservations (see `ReservationPlan`)."""
    return _Follower(trace, start, settings, device_total).run(final)


def follow(analysis: Analysis, device_total: int | None = None) -> FollowResult:
    """Follow mode on every device (`fragviz simulate FILE`). `device_total`: each device's memory in bytes, where
    the user knows it (it bounds expandable reservations, and a request larger than it makes an OOM certain)."""
    devices = []
    for device, replay in analysis.replays.items():
        result = follow_device(replay.trace, replay.segments_at(0), analysis.snapshot.segments_of(device),
                               analysis.settings, device_total)
        devices.append(replace(result, certain_oom=certain_oom(analysis, device, device_total)))
    return FollowResult(tuple(devices))
