"""Where the driver put expandable segments' address reservations, read back from the addresses a trace uses.

With expandable segments PyTorch reserves virtual addresses once per (pool, stream): total GPU memory
× 1.125, a whole number of pages (2 MiB pages for the small pool, 20 MiB for the large one), placed by
`cuMemAddressReserve` wherever the driver likes, then maps pages into it as the pool grows (reference C.12).
A snapshot never names the reservations, only the mapped ranges (segments) and the `segment_map` and
`segment_unmap` events. On real runs the driver lays reservations one after another: a device's small-pool
reservation began 89.06 GiB (its large-pool reservation's size on an 80 GB device) above the large pool's.

`ReservationPlan.infer` reads them back. Every address a device's memory uses is tagged with who uses it:
an expandable (pool kind, stream), or a cudaMalloc. Sorted by address, each run of one expandable owner is
one reservation: it begins at the run's lowest address and may reach up to the next address someone else
uses (and no further than the device's reservation size, where the device's size is known). A map outside
every known reservation of its owner therefore starts a new one, and no reservation overlaps another.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from fragviz.allocator.rules import LARGE_BUFFER, SMALL_BUFFER, SMALL_SIZE
from fragviz.allocator.groups import SEGMENT_ACTIONS
from fragviz.model import ALLOC, OOM, SEGMENT_ALLOC, SEGMENT_MAP, Segment, Trace

_MALLOC = None  # the owner of cudaMalloc'd segments: not an expandable reservation

Owner = tuple[bool, int]  # (small pool, stream) of an expandable reservation


def page_size(small: bool) -> int:
    """The page an expandable segment maps at a time: kSmallBuffer for the small pool, kLargeBuffer else."""
    return SMALL_BUFFER if small else LARGE_BUFFER


def reservation_bytes(device_total: int, small: bool) -> int:
    """What PyTorch reserves per expandable segment on a device of `device_total` bytes: 1.125 × it, in pages."""
    page = page_size(small)
    return -(-(device_total + device_total // 8) // page) * page


@dataclass(frozen=True)
class Reservation:
    base: int
    limit: int | None  # bytes it may span from base; None: nothing known above it
    small: bool
    stream: int

    def holds(self, addr: int) -> bool:
        return self.base <= addr and (self.limit is None or addr < self.base + self.limit)

    def pages(self, default_bytes: int) -> int:
        """Its size in pages: its limit where known, else `default_bytes` (at least one page)."""
        span = self.limit if self.limit is not None else default_bytes
        return max(1, span // page_size(self.small))


class ReservationPlan:
    """The reservations of one device, in address order."""

    def __init__(self, reservations: list[Reservation]) -> None:
        self.reservations = sorted(reservations, key=lambda r: r.base)
        self._bases = [r.base for r in self.reservations]

    def __len__(self) -> int:
        return len(self.reservations)

    def find(self, addr: int, small: bool, stream: int) -> Reservation | None:
        """The reservation of this owner that holds `addr`, if one does."""
        i = bisect_right(self._bases, addr) - 1
        if i >= 0:
            r = self.reservations[i]
            if r.holds(addr) and (r.small, r.stream) == (small, stream):
                return r
        return None

    def of(self, small: bool, stream: int) -> list[Reservation]:
        return [r for r in self.reservations if (r.small, r.stream) == (small, stream)]

    @classmethod
    def infer(cls, trace: Trace | None, start: list[Segment], device_total: int | None = None) -> "ReservationPlan":
        """The reservations behind `trace` (one device's; None: none) and its start state `start`."""
        uses = _uses(trace, start)
        uses.sort(key=lambda u: u[0])
        reservations: list[Reservation] = []
        run: list[tuple[int, int, Owner | None]] = []
        for use in uses + [(1 << 64, 1 << 64, _MALLOC)]:
            if run and use[2] != run[0][2]:
                if run[0][2] is not _MALLOC:
                    reservations.extend(_reservations_of(run, use[0], device_total))
                run = []
            run.append(use)
        return cls(reservations)


def _reservations_of(run: list[tuple[int, int, Owner | None]], next_use: int,
                     device_total: int | None) -> list[Reservation]:
    small, stream = run[0][2]  # type: ignore[misc]
    cap = reservation_bytes(device_total, small) if device_total else None
    out: list[Reservation] = []
    base = run[0][0]
    for addr, _, _ in run:  # a run longer than one reservation can hold is several, back to back
        if cap is not None and addr >= base + cap:
            out.append(Reservation(base, cap, small, stream))
            base = addr
    limit = None if next_use >= 1 << 64 else next_use - base
    if cap is not None:
        limit = cap if limit is None else min(limit, cap)
    out.append(Reservation(base, limit, small, stream))
    return out


def _uses(trace: Trace | None, start: list[Segment]) -> list[tuple[int, int, Owner | None]]:
    """(address, end, owner) of every range the start state and the trace's new memory take. Releases are left
    out: they give back memory the start state or an earlier event took."""
    uses: list[tuple[int, int, Owner | None]] = []
    for seg in start:
        owner = (seg.pool == "small", seg.stream) if seg.is_expandable else _MALLOC
        uses.append((seg.address, seg.end, owner))
    if trace is None:
        return uses
    act = trace.action.tolist()
    addr, size, stream = trace.addr.tolist(), trace.size.tolist(), trace.stream.tolist()
    for i, a in enumerate(act):
        if a == SEGMENT_MAP:
            uses.append((addr[i], addr[i] + size[i], (segment_is_small(act, size, i), stream[i])))
        elif a == SEGMENT_ALLOC:
            uses.append((addr[i], addr[i] + size[i], _MALLOC))
    return uses


def segment_is_small(act: list[int], size: list[int], i: int) -> bool:
    """Whether the segment event at i serves the small pool: the request it was made for says so (the next
    alloc or oom after the malloc's segment events); without one, a small pool's page is 2 MiB."""
    j = i + 1
    while j < len(act) and act[j] in SEGMENT_ACTIONS:
        j += 1
    if j < len(act) and act[j] in (ALLOC, OOM):
        return size[j] <= SMALL_SIZE
    return size[i] == SMALL_BUFFER
