"""Private pools and pending frees, for the doctor: where they matter to an OOM, say so in numbers.

A private pool (a CUDA graph's, or a torch.cuda.MemPool's such as vLLM's KV cache) serves only requests
made inside that graph or pool, so its free memory is no room for a general request. A pending free
(active_pending_free) is a block the program freed that waits for work on other streams; it stays
allocated until that work completes.
"""
from __future__ import annotations

from fragviz.replay.analysis import Analysis
from fragviz.model.metrics import GENERAL_POOL, PoolFigures, pending_frees, pool_figures, pool_of
from fragviz.model import Segment
from fragviz.base.units import format_bytes as fb


def pool_notes(segments: list[Segment]) -> list[str]:
    """Notes on the private pools and pending frees of a device's state; none when it has neither."""
    return _private_note(pool_figures(segments)) + _pending_note(segments)


def oom_notes(analysis: Analysis, device: int | None, event: int | None) -> list[str]:
    """`pool_notes` of the state an OOM diagnosis of `device` read: before its `oom` `event`, else (None) the
    snapshot's end."""
    segments = state_of(analysis, device, event)
    return pool_notes(segments) if segments is not None else []


def request_pool_at(analysis: Analysis, device: int, event: int | None,
                    pool: tuple[int, int] = GENERAL_POOL) -> PoolFigures | None:
    """The figures that count for a request made in `pool` (the general pool for a normal request): its
    cached free memory (`free_bytes`) and largest free block, in the state after `event` events (the
    snapshot's end state when None). None when the device has no state."""
    segments = state_of(analysis, device, event)
    return pool_of(segments, pool) if segments is not None else None


def state_of(analysis: Analysis, device: int | None, event: int | None) -> list[Segment] | None:
    replay = analysis.replays.get(device) if device is not None else None
    if replay is None:
        return None
    if event is None or event >= len(replay.trace):
        return analysis.snapshot.segments_of(device)
    return replay.segments_at(event)


def _private_note(pools: list[PoolFigures]) -> list[str]:
    private = [p for p in pools if p.is_private]
    if not private:
        return []
    general = next((p for p in pools if not p.is_private), pool_of([]))
    held = sum(p.reserved_bytes for p in private)
    listed = "; ".join(_pool_phrase(p) for p in private)
    return [f"Private pools hold {fb(held)} of the {fb(held + general.reserved_bytes)} reserved ({listed}). Only "
            "requests made inside their CUDA graph or torch.cuda.MemPool can use that memory: a general request "
            f"has the general pool's {fb(general.free_bytes)} cached free (largest free block "
            f"{fb(general.largest_free_block)}) and what the device has free. To give general requests more "
            "room, make the private pools smaller (for vLLM's KV cache, a lower gpu_memory_utilization)."]


def _pool_phrase(p: PoolFigures) -> str:
    name = f"pool ({p.pool[0]}, {p.pool[1]}) {fb(p.reserved_bytes)}"
    if p.free_bytes == 0:
        return f"{name}, fully allocated"
    return f"{name} with {fb(p.free_bytes)} free, largest free block {fb(p.largest_free_block)}"


def _pending_note(segments: list[Segment]) -> list[str]:
    pending = pending_frees(segments)
    if not pending.blocks:
        return []
    one = pending.blocks == 1
    return [f"{pending.blocks} block{'' if one else 's'} ({fb(pending.bytes)}) {'was' if one else 'were'} freed by "
            f"the program but {'waits' if one else 'wait'} for work on other streams (active_pending_free, from "
            "record_stream or a free during graph capture): they count as allocated "
            "until that work completes. Outside a graph capture the allocator waits for it and returns them to "
            "the cache before it reports an OOM."]
