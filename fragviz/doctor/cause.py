"""The cause of one OOM from its figures, in the order of what PyTorch's allocator did before it gave up.

The caching allocator (CUDACachingAllocator.cpp, reference C.4 and C.9) first looks for a cached free block;
then, where a per-process memory fraction is set, refuses outright a new segment that would take its reserved
memory past the cap; then asks the device (cudaMalloc), frees its whole free cached segments and asks again;
only then raises, and reads the device's free memory for the message. So, in order:

  exhaustion       the request alone is larger than the device
  capacity_cap     a memory fraction caps PyTorch below the device and reserved + request passes it
  outside_pytorch  the device had the request free when the message was printed, and other processes hold most
                   of it (a co-tenant that allocates and frees while the job runs: their use changed between the
                   refusal and the message)
  capacity_cap     the device still had the room (free >= request + slack), and nothing else explains the refusal
  fragmentation    cached free memory alone covers the request with DEFRAG_MARGIN to spare: no free block was
                   large enough, whatever else holds the device
  outside_pytorch  memory outside PyTorch's allocator is a tenth of the device and more than its cached free
                   memory, and with it the request would have fitted
  fragmentation    cached free + device free exceed the request by more than DEFRAG_MARGIN
  exhaustion       what the figures say is all there was
  undetermined     the figures a test needs could not be read (a cut or figure-less message)

Each test uses only figures that were read: a missing one skips the test, never counts as zero.
"""
from __future__ import annotations

from typing import Callable

from fragviz.doctor.facts import DEFRAG_MARGIN, OomFacts
from fragviz.doctor.message import close

EXHAUSTION, FRAGMENTATION, OUTSIDE, CAP, UNDETERMINED = (
    "exhaustion", "fragmentation", "outside_pytorch", "capacity_cap", "undetermined")
VERDICTS = (EXHAUSTION, FRAGMENTATION, OUTSIDE, CAP, UNDETERMINED)
OUTSIDE_SHARE = 0.1  # memory outside PyTorch that counts as a cause: a tenth of the device
CO_TENANT_SHARE = 0.5  # other processes holding most of the device


def verdict_of(f: OomFacts) -> str:
    """The cause (see the module's doc for the order)."""
    if f.requested is None:
        return OUTSIDE if f.era == "driver" else UNDETERMINED
    for rule in _RULES:
        verdict = rule(f)
        if verdict is not None:
            return verdict
    return UNDETERMINED


def co_tenant(f: OomFacts) -> bool:
    """Other processes hold most of the device."""
    others = f.others_bytes
    return others is not None and f.total is not None and others >= CO_TENANT_SHARE * f.total


def device_had_room(f: OomFacts) -> bool:
    return f.requested is not None and f.free is not None and f.free >= f.requested + f.slack


def _too_large(f: OomFacts) -> str | None:
    return EXHAUSTION if f.total is not None and f.requested > f.total else None


def _capped(f: OomFacts) -> str | None:
    cap = f.cap
    if cap is None:
        return None
    used = f.reserved if f.reserved is not None else (f.allocated if f.era == "async" else None)
    if f.requested > cap or (used is not None and (used + f.requested > cap or close(used + f.requested, cap))):
        return CAP
    return None


def _co_tenant_raced(f: OomFacts) -> str | None:
    return OUTSIDE if f.free is not None and f.free >= f.requested and co_tenant(f) else None


def _room_on_device(f: OomFacts) -> str | None:
    return CAP if device_had_room(f) else None


def _cache_covers(f: OomFacts) -> str | None:
    cached = f.cached_free
    if cached is None or cached < f.requested:
        return None
    return FRAGMENTATION if cached + (f.free or 0) - f.requested > DEFRAG_MARGIN else None


def _outside(f: OomFacts) -> str | None:
    outside, cached = f.outside, f.cached_free
    if outside is None or cached is None:
        return None
    if outside >= OUTSIDE_SHARE * f.total and outside > cached and outside + f.free + cached >= f.requested:
        return OUTSIDE
    return None


def _defragmented_room(f: OomFacts) -> str | None:
    if f.cached_free is None or f.free is None:
        return None
    return FRAGMENTATION if f.defrag_room > DEFRAG_MARGIN else None


def _exhausted(f: OomFacts) -> str | None:
    if f.cached_free is not None and f.free is not None:
        return EXHAUSTION
    if f.era == "async" and None not in (f.total, f.allocated):
        # cudaMallocAsync prints no cache figure; if all that live tensors leave could not hold the request, no
        # pool could have
        return EXHAUSTION if f.total - f.allocated - f.requested <= DEFRAG_MARGIN else None
    return None


_RULES: tuple[Callable[[OomFacts], str | None], ...] = (
    _too_large, _capped, _co_tenant_raced, _room_on_device, _cache_covers, _outside, _defragmented_room, _exhausted)
