"""Plain snapshot data to the model, for every format generation, with warnings for what does not add up.

Generations (see the format reference, A.3-A.11): a bare list of segments (`memory_snapshot()`, and
everything up to 1.13); 2.0, whose blocks carry `history` and no `address`; 2.1+, whose blocks carry
`address` and `frames`; and later additions (`time_us`, `allocator_settings`, `external_annotations`,
`compile_context`, `user_metadata`) that are all optional.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from fragviz.base.limits import Limits
from fragviz.base.units import SMALL_BUFFER
from fragviz.model import (NO_STACK, PROVENANCE_KEY, Block, BlockState, FormatInfo,
                           Segment, Snapshot, Trace)
from fragviz.snapshot.loader import RawSnapshot
from fragviz.snapshot.values import INT64_MAX, INT64_MIN, describe
from fragviz.snapshot.context import ParseContext
from fragviz.snapshot.traces import TraceReader
from fragviz.base.units import bytes_text, cut

_STATES = {s.value: s for s in BlockState}
_STATES["active_awaiting_free"] = BlockState.ACTIVE_PENDING_FREE  # the name in _snapshot's docstring
MAX_DEVICES = 128  # c10::DeviceIndex is an int8_t
# A trace event, segment or block is a dict of at least three fields: even with every key memoized it takes
# more than this many bytes of pickle. Records that take fewer are shared references to one object.
MIN_RECORD_BYTES = 8


# Told, once every trace's actions and sizes are read and before the rest: the final segments, and per device
# its action codes and sizes (fragviz.replay.preview draws the first picture from them).
EarlyTotals = Callable[[tuple[Segment, ...], dict[int, tuple[np.ndarray, np.ndarray]]], None]


def parse_snapshot(raw: RawSnapshot, limits: Limits | None = None, consume: bool = False,
                   early: EarlyTotals | None = None) -> Snapshot:
    """Check raw data against the snapshot format and build the model; raise SnapshotFormatError if it is none.

    With `consume`, trace entries are dropped from `raw.data` as they are read (ingest's memory stays near
    the decoded data's); the caller must not use `raw.data` afterwards. `early` hears the totals' inputs
    (EarlyTotals) after a first pass over the traces."""
    ctx = ParseContext(raw.source, limits or Limits.current(), raw.payload_size or raw.file_size)
    segments_data, traces_data, settings, annotations = _top_level(raw.data, ctx)
    provenance = _provenance(raw.data, ctx)
    _check_counts(segments_data, traces_data, ctx)
    segments = tuple(_parse_segment(d, i, ctx) for i, d in enumerate(segments_data))
    readers = [TraceReader(dev, entries, ctx) for dev, entries in enumerate(traces_data)]
    for reader in readers:
        reader.read_totals()
    if early is not None:
        early(segments, {r.device: (r.cols.action, r.cols.size) for r in readers})
    traces = {r.device: r.read_rest(consume) for r in readers}
    _check_devices(segments, traces, ctx)
    _check_totals(segments, traces, ctx)
    fmt = _format_info(raw, ctx, segments_data, traces)
    return Snapshot(
        source=raw.source, format=fmt, segments=segments, traces=traces,
        frames=tuple(ctx.interner.frames), stacks=tuple(ctx.interner.stacks), strings=tuple(ctx.strings),
        allocator_settings=settings, external_annotations=annotations, warnings=ctx.warnings,
        provenance=provenance)


# what a simulated recording counted (fragviz.allocator.recorder's placement), as its warning says it
_PLACEMENTS = {"cuda tensors": ": the tensors the code placed on CUDA, run on a CPU",
               "every tensor": ": every tensor of a CPU run (the code placed none on CUDA)"}


def _provenance(data: Any, ctx: ParseContext) -> dict | None:
    value = data.get(PROVENANCE_KEY) if isinstance(data, dict) else None
    if not isinstance(value, dict):
        return None
    value = ctx.values.plain(value, PROVENANCE_KEY)
    origin = value.get("origin")
    if origin == "synthetic":
        ctx.warn("this snapshot was made by fragviz's synthetic workload generator, not recorded by PyTorch")
    elif origin == "simulated":
        ctx.warn("this snapshot was simulated by fragviz's allocator model, not recorded on a GPU"
                 + _PLACEMENTS.get(value.get("placement"), ""))
    return value


def _key_text(key: Any) -> str:
    return f"{bytes_text(key)} (bytes)" if isinstance(key, bytes) else cut(str(key), 40)


def _top_level(data: Any, ctx: ParseContext) -> tuple[list, list, dict | None, list | None]:
    if isinstance(data, list):
        if data and not isinstance(data[0], dict):  # torch.cuda.memory_snapshot() is a list of segment dicts
            raise ctx.fail(f"is not a PyTorch memory snapshot: a list of {len(data):,} items whose first is "
                           f"{describe(data[0])}, not a segment")
        ctx.features.add("segments_list")
        return data, [], None, None
    if not isinstance(data, dict):
        raise ctx.fail(f"is not a PyTorch memory snapshot: the top level is a {type(data).__name__}, "
                       "not a dict or a list of segments")
    if "segments" not in data and "device_traces" not in data:
        keys = ", ".join(sorted(map(_key_text, data))[:6]) or "none"
        raise ctx.fail(f"is not a PyTorch memory snapshot: no 'segments' or 'device_traces' key (keys: {keys})")
    segments = data.get("segments", [])
    traces = data.get("device_traces", data.get("traces", []))
    if not isinstance(segments, list):
        raise ctx.fail("is not a PyTorch memory snapshot: 'segments' is not a list")
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise ctx.fail("is not a PyTorch memory snapshot: 'device_traces' is not a list of lists")
    if len(traces) > MAX_DEVICES:
        raise ctx.fail(f"has {len(traces):,} device traces; PyTorch has at most {MAX_DEVICES} devices")
    settings = data.get("allocator_settings")
    annotations = data.get("external_annotations")
    if settings is not None and not isinstance(settings, dict):
        ctx.warn("allocator_settings is not a dict; ignored")
        settings = None
    if annotations is not None and not isinstance(annotations, list):
        ctx.warn("external_annotations is not a list; ignored")
        annotations = None
    settings = _allocator_settings(settings, ctx) if settings is not None else None
    annotations = ctx.values.plain(annotations, "external_annotations") if annotations is not None else None
    for key, feature in (("allocator_settings", "allocator_settings"), ("external_annotations",
                                                                         "external_annotations")):
        if key in data:
            ctx.features.add(feature)
    return segments, traces, settings, annotations


# Known allocator_settings keys and the types PyTorch writes them with (format reference A.9)
_SETTING_TYPES: dict[str, tuple[type, ...]] = {
    "PYTORCH_CUDA_ALLOC_CONF": (str,), "max_split_size": (int,), "max_non_split_rounding_size": (int,),
    "garbage_collection_threshold": (int, float), "expandable_segments": (bool, int),
    "release_lock_on_cudamalloc": (bool, int), "pinned_use_host_register": (bool, int),
    "pinned_num_register_threads": (int,), "roundup_power2_divisions": (dict, list),
    "per_process_memory_fraction": (int, float, type(None)),
}


def _allocator_settings(settings: dict, ctx: ParseContext) -> dict:
    settings = ctx.values.plain(settings, "allocator_settings")
    for key, types in _SETTING_TYPES.items():
        if key in settings and (not isinstance(settings[key], types)
                                or isinstance(settings[key], bool) and bool not in types):
            raise ctx.fail(f"allocator_settings has '{key}' = {describe(settings[key])}, not "
                           f"{' or '.join(t.__name__ for t in types if t is not type(None))}")
    for key in ("max_split_size", "max_non_split_rounding_size", "pinned_num_register_threads"):
        if key in settings:
            ctx.values.integer(settings[key], f"allocator_settings '{key}'", -1, INT64_MAX)
    threshold = settings.get("garbage_collection_threshold", 0)
    if not 0 <= threshold <= 1:
        raise ctx.fail(f"allocator_settings has 'garbage_collection_threshold' = {describe(threshold)}, "
                       "not a fraction in [0, 1]")
    divisions = settings.get("roundup_power2_divisions")
    values = divisions.values() if isinstance(divisions, dict) else divisions or ()
    for v in values:
        ctx.values.integer(v, "allocator_settings 'roundup_power2_divisions'", 0, INT64_MAX)
    return settings


def _check_counts(segments_data: list, traces_data: list, ctx: ParseContext) -> None:
    """Refuse, before anything walks them, records past the limits or too many for the bytes they came in."""
    limits = ctx.limits
    events = sum(map(len, traces_data))
    if len(segments_data) > limits.max_segments:
        raise limits.refuse(ctx.source, "max_segments", f"has {len(segments_data):,} segments")
    if events > limits.max_events:
        raise limits.refuse(ctx.source, "max_events", f"has {events:,} trace events")
    records = events + len(segments_data)
    if ctx.payload_size and records * MIN_RECORD_BYTES > ctx.payload_size:  # 0: data made in memory, no file
        raise ctx.fail(f"holds {records:,} trace events and segments in {ctx.payload_size:,} bytes: fewer than "
                       f"{MIN_RECORD_BYTES} bytes each, so they are shared references to a few objects, which no "
                       "snapshot holds")


def _int_field(d: dict, key: str, where: str, ctx: ParseContext, default: int | None = None,
               low: int = 0, high: int = INT64_MAX) -> int:
    v = d.get(key, default)
    if v is None:
        raise ctx.fail(f"{where} has no '{key}'")
    return ctx.values.integer(v, f"{where} '{key}'", low, high)


def _parse_segment(d: Any, index: int, ctx: ParseContext) -> Segment:
    where = f"segment {index}"
    if not isinstance(d, dict):
        raise ctx.fail(f"is not a PyTorch memory snapshot: {where} is a {type(d).__name__}, not a dict")
    address = _int_field(d, "address", where, ctx)
    total = _int_field(d, "total_size", where, ctx)
    blocks_data = d.get("blocks", [])
    if not isinstance(blocks_data, list):
        raise ctx.fail(f"{where} has 'blocks' that is not a list")
    _count_blocks(len(blocks_data), ctx)
    blocks = _parse_blocks(blocks_data, address, where, ctx)
    covered = sum(b.size for b in blocks)
    if blocks and covered != total:
        ctx.warn(f"{where} at {address:#x}: its blocks cover {covered} bytes of its total_size {total}")
    pool = d.get("segment_type")
    if pool not in ("small", "large"):
        pool = "small" if total == SMALL_BUFFER else "large"
    if "is_expandable" in d:
        ctx.features.add("is_expandable")
    frames = d.get("frames")
    if frames:
        ctx.features.add("segment_frames")
    return Segment(
        device=_int_field(d, "device", where, ctx, 0, 0, MAX_DEVICES - 1), address=address, total_size=total,
        stream=_int_field(d, "stream", where, ctx, 0, INT64_MIN), pool=pool, blocks=blocks,
        pool_id=_pool_id(d.get("segment_pool_id"), where, ctx), is_expandable=_opt_bool(d.get("is_expandable")),
        stack=ctx.interner.intern(frames, where) if frames is not None else NO_STACK)


def _count_blocks(n: int, ctx: ParseContext) -> None:
    ctx.blocks += n
    if ctx.blocks > ctx.limits.max_blocks:
        raise ctx.limits.refuse(ctx.source, "max_blocks", f"has over {ctx.limits.max_blocks:,} blocks")
    if ctx.payload_size and ctx.blocks * MIN_RECORD_BYTES > ctx.payload_size:
        raise ctx.fail(f"holds {ctx.blocks:,} blocks in {ctx.payload_size:,} bytes: fewer than {MIN_RECORD_BYTES} "
                       "bytes each, so they are shared references to a few objects, which no snapshot holds")


def _parse_blocks(blocks_data: list, seg_address: int, seg_where: str, ctx: ParseContext) -> tuple[Block, ...]:
    blocks = []
    running = seg_address
    for j, b in enumerate(blocks_data):
        where = f"{seg_where} block {j}"
        if not isinstance(b, dict):
            raise ctx.fail(f"{where} is a {type(b).__name__}, not a dict")
        size = _int_field(b, "size", where, ctx)
        if "address" in b:
            address = _int_field(b, "address", where, ctx)
            if address != running:
                ctx.warn(f"{seg_where}: block {j} at {address:#x} does not follow the block before it")
        else:
            address = running  # 2.0 blocks: the segment address plus the sizes of the blocks before
            if address > INT64_MAX:
                raise ctx.fail(f"{where}: the sizes of the blocks before it run past the 64-bit address range")
        running = address + size
        blocks.append(_block(b, address, size, where, ctx))
    return tuple(blocks)


def _block(b: dict, address: int, size: int, where: str, ctx: ParseContext) -> Block:
    raw_state = b.get("state")
    state = _STATES.get(raw_state) if isinstance(raw_state, str) else None
    if state is None:
        raise ctx.fail(f"{where} has an unknown state {describe(raw_state)}")
    history = b.get("history")
    frames = b.get("frames")
    requested = b.get("requested_size")
    if isinstance(history, list):
        ctx.features.add("block_history")
        if history and isinstance(history[0], dict):
            frames = frames or history[0].get("frames")
            if requested is None:
                requested = history[0].get("real_size")
    if isinstance(requested, bool) or not isinstance(requested, int) or not 0 <= requested <= INT64_MAX:
        requested = size
    stack = ctx.interner.intern(frames, where) if frames is not None else NO_STACK
    return Block(address, size, requested, state, stack)


def _pool_id(v: Any, where: str, ctx: ParseContext) -> tuple[int, int] | None:
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, int) for x in v):
        return (ctx.values.integer(v[0], f"{where} 'segment_pool_id'", 0, INT64_MAX),
                ctx.values.integer(v[1], f"{where} 'segment_pool_id'", INT64_MIN, INT64_MAX))
    return None


def _opt_bool(v: Any) -> bool | None:
    return None if v is None else bool(v)


# Every figure fragviz derives (allocated, requested, reserved at any event; a block's end) is at most the sum
# of the sizes in the file, or an address plus a size: bounding those keeps every figure inside int64.
MAX_TOTAL_BYTES = 1 << 62


def _check_totals(segments: tuple[Segment, ...], traces: dict[int, Trace], ctx: ParseContext) -> None:
    total = float(sum(s.total_size + sum(b.size + b.requested_size for b in s.blocks) for s in segments))
    for dev, t in traces.items():
        total += float(t.size.astype(np.float64).sum())
        ends = t.addr.astype(np.float64) + t.size.astype(np.float64)
        if len(t) and ends.max() >= 2.0**63:
            i = int(np.argmax(ends >= 2.0**63))
            raise ctx.fail(f"device {dev}'s trace entry {i} ends past the 64-bit address range "
                           f"(addr {int(t.addr[i]):#x} + size {int(t.size[i]):,})")
    for i, s in enumerate(segments):
        if s.end > INT64_MAX or any(b.address + b.size > INT64_MAX for b in s.blocks):
            raise ctx.fail(f"segment {i} ends past the 64-bit address range")
    if total >= MAX_TOTAL_BYTES:
        raise ctx.fail("its sizes add up to more than 2**62 bytes: no device holds that, so it is not a "
                       "real snapshot")


def _check_devices(segments: tuple[Segment, ...], traces: dict[int, Trace], ctx: ParseContext) -> None:
    by_device: dict[int, list[Segment]] = {}
    for s in segments:
        by_device.setdefault(s.device, []).append(s)
    for dev, segs in by_device.items():
        segs.sort(key=lambda s: s.address)
        for a, b in zip(segs, segs[1:]):
            if b.address < a.end:
                ctx.warn(f"device {dev}: segments at {a.address:#x} and {b.address:#x} overlap")


_GENERATIONS: tuple[tuple[str, str, str], ...] = (
    # (feature marker, generation, estimate): the newest marker present decides.
    ("user_metadata", "2.10+", "PyTorch 2.10 or a later nightly"),
    ("compile_context", "2.8+", "PyTorch 2.8-2.9"),
    ("external_annotations", "2.5+", "PyTorch 2.5-2.8"),
    ("allocator_settings", "2.4+", "PyTorch 2.3-2.5"),
    ("time_us", "2.2+", "PyTorch 2.2-2.4"),
)


def _format_info(raw: RawSnapshot, ctx: ParseContext, segments_data: list, traces: dict[int, Trace]) -> FormatInfo:
    features = ctx.features
    if "segments_list" in features:
        generation, estimate = "segments-list", "torch.cuda.memory_snapshot() (any release; the only form before 2.0)"
    elif "block_history" in features or (segments_data and _blocks_lack_address(segments_data)):
        generation, estimate = "2.0", "PyTorch 2.0 (block history, no block addresses)"
    else:
        generation, estimate = "2.1", "PyTorch 2.1"
        for marker, gen, est in _GENERATIONS:
            if marker in features:
                generation, estimate = gen, est
                break
    return FormatInfo(raw.encoding, raw.compression, raw.pickle_protocol, generation, estimate,
                      tuple(sorted(features)))


def _blocks_lack_address(segments_data: list) -> bool:
    for s in segments_data:
        blocks = s.get("blocks") if isinstance(s, dict) else None
        if blocks:
            return isinstance(blocks[0], dict) and "address" not in blocks[0]
    return False


