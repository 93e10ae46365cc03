"""Plain snapshot data to the model, for every format generation, with warnings for what does not add up.

Generations (see the format reference, A.3-A.11): a bare list of segments (`memory_snapshot()`, and
everything up to 1.13); 2.0, whose blocks carry `history` and no `address`; 2.1+, whose blocks carry
`address` and `frames`; and later additions (`time_us`, `allocator_settings`, `external_annotations`,
`compile_context`, `user_metadata`) that are all optional.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fragviz.errors import SnapshotFormatError
from fragviz.model import (ACTIONS, NO_STACK, NO_STRING, NO_TIME, PROVENANCE_KEY, Block, BlockState, FormatInfo,
                           Segment, Snapshot, Trace)
from fragviz.snapshot.frames import StackInterner
from fragviz.snapshot.loader import RawSnapshot

_STATES = {s.value: s for s in BlockState}
_STATES["active_awaiting_free"] = BlockState.ACTIVE_PENDING_FREE  # the name in _snapshot's docstring
SMALL_SEGMENT = 2 * 1024 * 1024


class _Context:
    """What one parse accumulates: interned stacks and strings, warnings, format markers."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.interner = StackInterner()
        self.strings: list[str] = []
        self._string_ids: dict[str, int] = {}
        self.warnings: list[str] = []
        self.features: set[str] = set()

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def fail(self, problem: str) -> SnapshotFormatError:
        return SnapshotFormatError(self.source, problem)

    def string_id(self, value: Any) -> int:
        if value is None:
            return NO_STRING
        value = str(value)
        sid = self._string_ids.get(value)
        if sid is None:
            sid = self._string_ids[value] = len(self.strings)
            self.strings.append(value)
        return sid


def parse_snapshot(raw: RawSnapshot) -> Snapshot:
    """Check raw data against the snapshot format and build the model; raise SnapshotFormatError if it is none."""
    ctx = _Context(raw.source)
    segments_data, traces_data, settings, annotations = _top_level(raw.data, ctx)
    provenance = _provenance(raw.data, ctx)
    segments = tuple(_parse_segment(d, i, ctx) for i, d in enumerate(segments_data))
    traces = {dev: _parse_trace(dev, entries, ctx) for dev, entries in enumerate(traces_data)}
    _check_devices(segments, traces, ctx)
    fmt = _format_info(raw, ctx, segments_data, traces)
    return Snapshot(
        source=raw.source, format=fmt, segments=segments, traces=traces,
        frames=tuple(ctx.interner.frames), stacks=tuple(ctx.interner.stacks), strings=tuple(ctx.strings),
        allocator_settings=settings, external_annotations=annotations, warnings=ctx.warnings,
        provenance=provenance)


def _provenance(data: Any, ctx: _Context) -> dict | None:
    value = data.get(PROVENANCE_KEY) if isinstance(data, dict) else None
    if not isinstance(value, dict):
        return None
    origin = value.get("origin")
    if origin == "synthetic":
        ctx.warn("this snapshot was made by fragviz's synthetic workload generator, not recorded by PyTorch")
    elif origin == "simulated":
        ctx.warn("this snapshot was simulated by fragviz's allocator model, not recorded on a GPU")
    return value


def _top_level(data: Any, ctx: _Context) -> tuple[list, list, dict | None, list | None]:
    if isinstance(data, list):
        ctx.features.add("segments_list")
        return data, [], None, None
    if not isinstance(data, dict):
        raise ctx.fail(f"is not a PyTorch memory snapshot: the top level is a {type(data).__name__}, "
                       "not a dict or a list of segments")
    if "segments" not in data and "device_traces" not in data:
        keys = ", ".join(sorted(map(str, data))[:6]) or "none"
        raise ctx.fail(f"is not a PyTorch memory snapshot: no 'segments' or 'device_traces' key (keys: {keys})")
    segments = data.get("segments", [])
    traces = data.get("device_traces", data.get("traces", []))
    if not isinstance(segments, list):
        raise ctx.fail("is not a PyTorch memory snapshot: 'segments' is not a list")
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise ctx.fail("is not a PyTorch memory snapshot: 'device_traces' is not a list of lists")
    settings = data.get("allocator_settings")
    annotations = data.get("external_annotations")
    if settings is not None and not isinstance(settings, dict):
        ctx.warn("allocator_settings is not a dict; ignored")
        settings = None
    if annotations is not None and not isinstance(annotations, list):
        ctx.warn("external_annotations is not a list; ignored")
        annotations = None
    for key, feature in (("allocator_settings", "allocator_settings"), ("external_annotations",
                                                                         "external_annotations")):
        if key in data:
            ctx.features.add(feature)
    return segments, traces, settings, annotations


def _int_field(d: dict, key: str, where: str, ctx: _Context, default: int | None = None) -> int:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        if v is None:
            raise ctx.fail(f"{where} has no '{key}'")
        raise ctx.fail(f"{where} has a non-integer '{key}' ({v!r})")
    return v


def _parse_segment(d: Any, index: int, ctx: _Context) -> Segment:
    where = f"segment {index}"
    if not isinstance(d, dict):
        raise ctx.fail(f"is not a PyTorch memory snapshot: {where} is a {type(d).__name__}, not a dict")
    address = _int_field(d, "address", where, ctx)
    total = _int_field(d, "total_size", where, ctx)
    if total < 0 or address < 0:
        raise ctx.fail(f"{where} has a negative address or size")
    blocks_data = d.get("blocks", [])
    if not isinstance(blocks_data, list):
        raise ctx.fail(f"{where} has 'blocks' that is not a list")
    blocks = _parse_blocks(blocks_data, address, where, ctx)
    covered = sum(b.size for b in blocks)
    if blocks and covered != total:
        ctx.warn(f"{where} at {address:#x}: its blocks cover {covered} bytes of its total_size {total}")
    pool = d.get("segment_type")
    if pool not in ("small", "large"):
        pool = "small" if total == SMALL_SEGMENT else "large"
    if "is_expandable" in d:
        ctx.features.add("is_expandable")
    frames = d.get("frames")
    if frames:
        ctx.features.add("segment_frames")
    return Segment(
        device=_int_field(d, "device", where, ctx, 0), address=address, total_size=total,
        stream=_int_field(d, "stream", where, ctx, 0), pool=pool, blocks=blocks,
        pool_id=_pool_id(d.get("segment_pool_id")), is_expandable=_opt_bool(d.get("is_expandable")),
        stack=ctx.interner.intern(frames) if isinstance(frames, list) else NO_STACK)


def _parse_blocks(blocks_data: list, seg_address: int, seg_where: str, ctx: _Context) -> tuple[Block, ...]:
    blocks = []
    running = seg_address
    for j, b in enumerate(blocks_data):
        where = f"{seg_where} block {j}"
        if not isinstance(b, dict):
            raise ctx.fail(f"{where} is a {type(b).__name__}, not a dict")
        size = _int_field(b, "size", where, ctx)
        if size < 0:
            raise ctx.fail(f"{where} has a negative size")
        if "address" in b:
            address = _int_field(b, "address", where, ctx)
            if address != running:
                ctx.warn(f"{seg_where}: block {j} at {address:#x} does not follow the block before it")
        else:
            address = running  # 2.0 blocks: the segment address plus the sizes of the blocks before
        running = address + size
        blocks.append(_block(b, address, size, where, ctx))
    return tuple(blocks)


def _block(b: dict, address: int, size: int, where: str, ctx: _Context) -> Block:
    state = _STATES.get(b.get("state"))
    if state is None:
        raise ctx.fail(f"{where} has an unknown state {b.get('state')!r}")
    history = b.get("history")
    frames = b.get("frames")
    requested = b.get("requested_size")
    if isinstance(history, list):
        ctx.features.add("block_history")
        if history and isinstance(history[0], dict):
            frames = frames or history[0].get("frames")
            if requested is None:
                requested = history[0].get("real_size")
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 0:
        requested = size
    stack = ctx.interner.intern(frames) if isinstance(frames, list) else NO_STACK
    return Block(address, size, requested, state, stack)


def _pool_id(v: Any) -> tuple[int, int] | None:
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, int) for x in v):
        return (int(v[0]), int(v[1]))
    return None


def _opt_bool(v: Any) -> bool | None:
    return None if v is None else bool(v)


def _parse_trace(device: int, entries: list, ctx: _Context) -> Trace:
    try:
        return _trace_columns(device, entries, ctx)
    except (KeyError, TypeError, AttributeError, ValueError, OverflowError):
        _find_bad_entry(device, entries, ctx)
        raise ctx.fail(f"device {device}'s trace has entries of the wrong shape")


def _trace_columns(device: int, entries: list, ctx: _Context) -> Trace:
    # Comprehensions per column: several times faster than one loop over millions of entries.
    names = list(ACTIONS)
    code_of = {a: i for i, a in enumerate(names)}
    actions = [e["action"] for e in entries]
    codes = list(map(code_of.get, actions))
    if None in codes:
        for a in set(actions) - set(code_of):
            code_of[a] = len(names)
            names.append(str(a))
            ctx.warn(f"device {device}'s trace has an action fragviz does not know: {a!r} (kept, not replayed)")
        codes = list(map(code_of.__getitem__, actions))
    n = len(entries)
    addr = [e["addr"] if "addr" in e else e.get("device_free", 0) for e in entries]
    size = [e["size"] for e in entries]
    stream = [e.get("stream", 0) for e in entries]
    times = [e.get("time_us", NO_TIME) for e in entries]
    intern = ctx.interner.intern
    stacks = [intern(e.get("frames")) for e in entries]
    compile_ctx = _optional_strings(entries, "compile_context", ctx)
    metadata = _optional_strings(entries, "user_metadata", ctx)
    trace = Trace(
        device=device, action=np.array(codes, np.uint8), addr=_int64(addr), size=_int64(size),
        stream=_int64(stream), time_us=_int64(times), stack=np.array(stacks, np.int32),
        compile_context=compile_ctx, user_metadata=metadata, action_names=tuple(names))
    _note_trace_features(trace, entries, ctx)
    if n and (trace.size < 0).any():
        raise ctx.fail(f"device {device}'s trace has an entry with a negative size")
    return trace


def _int64(values: list) -> np.ndarray:
    return np.array(values, dtype=np.int64) if values else np.zeros(0, np.int64)


def _optional_strings(entries: list, key: str, ctx: _Context) -> np.ndarray:
    if not entries or not any(key in e for e in entries[:1000]) and not any(key in e for e in entries):
        return np.full(len(entries), NO_STRING, np.int32)
    ctx.features.add(key)
    sid = ctx.string_id
    return np.array([sid(e.get(key)) for e in entries], np.int32)


def _note_trace_features(trace: Trace, entries: list, ctx: _Context) -> None:
    if trace.has_time:
        ctx.features.add("time_us")
    if len(trace) and (trace.stack != NO_STACK).any():
        ctx.features.add("trace_frames")
    if any(a in ("segment_map", "segment_unmap") for a in trace.action_counts()):
        ctx.features.add("expandable_actions")


def _find_bad_entry(device: int, entries: list, ctx: _Context) -> None:
    for i, e in enumerate(entries):
        where = f"device {device}'s trace entry {i}"
        if not isinstance(e, dict):
            raise ctx.fail(f"{where} is a {type(e).__name__}, not a dict")
        if not isinstance(e.get("action"), str):
            raise ctx.fail(f"{where} has no action")
        for key in ("addr", "size", "stream", "time_us", "device_free"):
            v = e.get(key, 0)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ctx.fail(f"{where} has a non-integer '{key}' ({v!r})")
            if not -(1 << 63) <= v < (1 << 63):
                raise ctx.fail(f"{where} has '{key}' out of the 64-bit range")
        if "size" not in e:
            raise ctx.fail(f"{where} has no size")
        if not isinstance(e.get("frames", []), list):
            raise ctx.fail(f"{where} has 'frames' that is not a list")


def _check_devices(segments: tuple[Segment, ...], traces: dict[int, Trace], ctx: _Context) -> None:
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


def _format_info(raw: RawSnapshot, ctx: _Context, segments_data: list, traces: dict[int, Trace]) -> FormatInfo:
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


