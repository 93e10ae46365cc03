"""Moving allocator state in and out of the simulator: model segments in, PyTorch-format snapshots out."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from fragviz.allocator.blocks import Block, BlockPool, ExpandableSegment
from fragviz.allocator.reservations import Reservation, ReservationPlan, page_size
from fragviz.allocator.sim import DeviceAllocator
from fragviz.model import PROVENANCE_KEY, BlockState, Frame, Segment

_STATE_NAMES = {True: "active_allocated", False: "inactive"}
PAUSE_EVERY = 256


def load_segments(alloc: DeviceAllocator, segments: list[Segment]) -> None:
    """Put these segments (blocks and free gaps) into the allocator, as the state it starts from.

    Expandable segments go into the reservations of `alloc.reservations` (see `ReservationPlan`); where it
    knows none for them, into reservations read from these segments alone.
    """
    for seg in segments:
        if not seg.is_expandable:
            _load_chain(alloc, seg, _pool(alloc, seg), None)
    expandable = [s for s in segments if s.is_expandable]
    inferred = ReservationPlan.infer(None, segments)
    for reservation, group in _by_reservation(alloc.reservations, inferred, expandable):
        _load_expandable(alloc, group, reservation)
    for seg in segments:
        if not seg.is_expandable:
            alloc.claim(seg.address, seg.total_size)


def _by_reservation(plan: ReservationPlan, inferred: ReservationPlan,
                    segments: list[Segment]) -> list[tuple[Reservation, list[Segment]]]:
    groups: dict[Reservation, list[Segment]] = {}
    for seg in sorted(segments, key=lambda s: s.address):
        small = seg.pool == "small"
        r = plan.find(seg.address, small, seg.stream) or inferred.find(seg.address, small, seg.stream)
        groups.setdefault(r, []).append(seg)  # type: ignore[arg-type]
    return list(groups.items())


def _pool(alloc: DeviceAllocator, seg: Segment) -> BlockPool:
    small = seg.pool == "small"
    if seg.pool_id and seg.pool_id != (0, 0):
        pair = alloc.private.setdefault(seg.pool_id, (BlockPool(True, seg.pool_id), BlockPool(False, seg.pool_id)))
        return pair[0] if small else pair[1]
    return alloc.small if small else alloc.large


def _load_chain(alloc: DeviceAllocator, seg: Segment, pool: BlockPool, es: ExpandableSegment | None,
                prev: Block | None = None) -> Block | None:
    alloc.reserved += seg.total_size
    free: list[Block] = []
    for b in seg.blocks:
        block = Block(b.address, b.size, seg.stream, pool, True, es)
        block.splice(prev, None)
        if b.state is BlockState.INACTIVE:
            free.append(block)
        else:
            block.allocated = b.state is BlockState.ACTIVE_ALLOCATED
            block.pending = not block.allocated
            block.requested = b.requested_size
            block.stack = b.stack
            alloc.active[block.addr] = block
            alloc.active_bytes += block.size
            alloc.requested += block.requested
        prev = block
    for block in free:  # into the free set once linked: what releasing could not give back depends on the links
        pool.insert(block)
    alloc.bump_peaks()
    return prev


def _load_expandable(alloc: DeviceAllocator, group: list[Segment], reservation: Reservation) -> None:
    page = page_size(reservation.small)
    base = reservation.base
    pages = max(reservation.pages(alloc.reservation_default(reservation.small)), -(-(group[-1].end - base) // page))
    pool = _pool(alloc, group[0])
    es = alloc.new_expandable(reservation.small, reservation.stream, base, pages)
    prev: Block | None = None
    cursor = base
    for seg in group:
        if seg.address > cursor:
            prev = _unmapped(pool, es, cursor, seg.address - cursor, reservation.stream, prev)
        begin, end = es.pages_to_map(seg.address, seg.total_size)
        es.mapped.update(range(begin, end))
        prev = _load_chain(alloc, seg, pool, es, prev)
        cursor = seg.end
    if es.base + es.size > cursor:
        _unmapped(pool, es, cursor, es.base + es.size - cursor, reservation.stream, prev)


def _unmapped(pool: BlockPool, es: ExpandableSegment, addr: int, size: int, stream: int,
              prev: Block | None) -> Block:
    block = Block(addr, size, stream, pool, mapped=False, es=es)
    block.splice(prev, None)
    pool.insert_unmapped(block)
    return block


def allocator_segments(alloc: DeviceAllocator) -> list[dict[str, Any]]:
    """The allocator's segments as PyTorch snapshot dicts (frames left empty: see `snapshot_dict`)."""
    out = []
    for head in alloc.segment_heads():
        blocks, b = [], head
        while b is not None and b.mapped:
            state = ("active_pending_free" if b.pending else _STATE_NAMES[b.allocated])
            blocks.append({"address": b.addr, "size": b.size, "requested_size": b.requested if state != "inactive"
                           else 0, "state": state, "stack": b.stack if state != "inactive" else -1})
            b = b.next
        pool = head.pool
        total = sum(x["size"] for x in blocks)
        active = [x for x in blocks if x["state"] != "inactive"]
        out.append({
            "device": alloc.device, "address": head.addr, "total_size": total,
            "allocated_size": sum(x["size"] for x in blocks if x["state"] == "active_allocated"),
            "active_size": sum(x["size"] for x in active), "requested_size": sum(x["requested_size"] for x in active),
            "stream": head.stream, "segment_type": "small" if pool.small else "large",
            "segment_pool_id": pool.pool_id or (0, 0), "is_expandable": head.es is not None, "blocks": blocks})
    return out


@dataclass(frozen=True)
class CopiedState:
    """What a snapshot needs of live allocators, copied in O(segments + blocks) (the trace list is copied, not
    its entries, which are never changed once recorded), so the lock that guards them is held that long only."""
    segments: list[dict[str, Any]]
    traces: list[tuple[int, list[dict[str, Any]]]]  # (device, entries); empty without the trace
    settings: dict[str, Any]


def copy_state(allocators: list[DeviceAllocator], trace: bool = True) -> CopiedState:
    """The part of `snapshot_dict` to take under the allocators' lock."""
    segments = [seg for alloc in allocators for seg in allocator_segments(alloc)]
    traces = [(alloc.device, list(alloc.trace) if trace else []) for alloc in allocators]
    return CopiedState(segments, traces, allocators[0].settings.as_dict() if allocators else {})


def build_snapshot(state: CopiedState, frames: tuple[Frame, ...], stacks: tuple[tuple[int, ...], ...],
                   provenance: dict[str, Any], pause: Callable[[], None] | None = None,
                   frame_lists: dict[int, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """A snapshot in PyTorch's own format from a copied state (no lock needed: nothing here is shared). Each
    stack's frame list is built once and shared by every block and entry with that stack (as PyTorch shares a
    free's frames with its completion): the pickle holds it once, and a loader reads it once. `pause` is called
    every PAUSE_EVERY trace entries (a live agent lets the job's thread run there). `frame_lists`: the frame
    lists built so far, by stack id (kept by a caller that builds many snapshots of one run)."""
    built: dict[int, list[dict[str, Any]]] = {} if frame_lists is None else frame_lists

    def frame_list(stack: int) -> list[dict[str, Any]]:
        if stack < 0 or stack >= len(stacks):
            return []
        out = built.get(stack)
        if out is None:
            out = built[stack] = [{"filename": frames[i].filename, "line": frames[i].line, "name": frames[i].name}
                                  for i in stacks[stack]]
        return out

    for seg in state.segments:
        for b in seg["blocks"]:
            b["frames"] = frame_list(b.pop("stack"))
        seg["frames"] = []
    traces: list[list[dict[str, Any]]] = []
    for device, entries in state.traces:
        while len(traces) <= device:
            traces.append([])
        for n, entry in enumerate(entries):
            if pause is not None and n % PAUSE_EVERY == 0:
                pause()
            e = entry.copy()  # a C-level copy, then two keys out: twice as fast as filtering the items
            fl = frame_list(e.pop("stack"))
            e.pop("event", None)
            if fl:
                e["frames"] = fl
            traces[device].append(e)
    return {"segments": state.segments, "device_traces": traces, "allocator_settings": state.settings,
            PROVENANCE_KEY: provenance}


def snapshot_dict(allocators: list[DeviceAllocator], frames: tuple[Frame, ...], stacks: tuple[tuple[int, ...], ...],
                  provenance: dict[str, Any]) -> dict[str, Any]:
    """A snapshot in PyTorch's own format of these allocators: segments, blocks and each device's trace."""
    return build_snapshot(copy_state(allocators), frames, stacks, provenance)
