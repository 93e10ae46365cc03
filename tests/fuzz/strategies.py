"""Structure-aware inputs: real snapshots shrunk to a few segments and events, then mutated (hypothesis).

Two families. `structured()` mutates the plain data (types swapped, keys removed or added, int64 edges,
overlapping and stray addresses, sizes that do not add up, reordered and unknown trace actions, odd
states and settings, lone surrogates, deep nesting, shared references and memo bombs) and encodes it as
pickle (protocols 0-5, with or without gzip) or JSON. `mutated_bytes()` flips, cuts and splices the
encoded files themselves.
"""
from __future__ import annotations

import copy
import functools
import gzip
import os
import pickle
from dataclasses import dataclass, field
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from .case import Case
from .encode import Nest, to_json, to_pickle
from .hostile import laughs, snapshot_template

EDGE_INTS = (2 ** 63 - 1, 2 ** 63, -(2 ** 63), -(2 ** 63) - 1, 2 ** 64, 2 ** 64 - 1, -1, 0, 1, 2 ** 1000,
             -(2 ** 1000), 2 ** 31, -(2 ** 31) - 1, 2 ** 53 + 1)
ODD_STRINGS = ("", "\ud800", "\udfff", "a\ud83dz", "\x00", "line\nbreak", "\u202eevil", "x" * 5000, "é" * 300,
               "??", "<module>", "active_allocated ", "ACTIVE_ALLOCATED", "inactive\x00")
STATES = ("active_allocated", "active_pending_free", "active_awaiting_free", "inactive", "bogus", "", None, 1,
          ["inactive"], {"state": "inactive"}, "\ud800")
ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
           "segment_unmap", "snapshot", "oom", "user_defined", "annotate", "bogus", "", None, 5, ["alloc"])
VOCAB = ("segments", "device_traces", "allocator_settings", "external_annotations", "blocks", "frames", "history",
         "address", "addr", "size", "total_size", "requested_size", "allocated_size", "active_size", "state",
         "stream", "device", "action", "time_us", "segment_type", "segment_pool_id", "is_expandable",
         "user_metadata", "compile_context", "device_free", "real_size", "traces", "filename", "line", "name",
         "garbage_collection_threshold", "PYTORCH_CUDA_ALLOC_CONF", "max_split_size", "expandable_segments",
         "roundup_power2_divisions", "\ud800")
ALLOC_CONFS = ("", "expandable_segments:True", "max_split_size_mb:-1", "max_split_size_mb:abc",
               "garbage_collection_threshold:2.5", "roundup_power2_divisions:[256:1,>:8]",
               "roundup_power2_divisions:[", "backend:cudaMallocAsync", ",,,:::", "max_split_size_mb:" + "9" * 400,
               "x" * 10000, "pinned_num_register_threads:1000000")


# Seeds --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Seed:
    name: str
    data: Any


def _cut_frames(x: Any, keep: int = 2) -> None:
    if isinstance(x, dict):
        if isinstance(x.get("frames"), list):
            x["frames"] = x["frames"][:keep]
        if isinstance(x.get("history"), list):
            x["history"] = x["history"][:keep]
            for h in x["history"]:
                _cut_frames(h, keep)


def shrink(data: Any, segments: int = 3, events: int = 12) -> Any:
    """A real snapshot cut to its `segments` smallest segments (whole) and each device's last `events`."""
    segs = data if isinstance(data, list) else data.get("segments", [])
    order = sorted(range(len(segs)), key=lambda i: (len(segs[i].get("blocks", [])), i))[:segments]
    kept = [copy.deepcopy(segs[i]) for i in sorted(order)]
    for seg in kept:
        seg["blocks"] = seg.get("blocks", [])[:6]
        _cut_frames(seg)
        for b in seg["blocks"]:
            _cut_frames(b)
    if isinstance(data, list):
        return kept
    out = {k: copy.deepcopy(v) for k, v in data.items() if k not in ("segments", "device_traces")}
    out["segments"] = kept
    traces = []
    for t in data.get("device_traces", []):
        t = copy.deepcopy(t[-events:])
        for e in t:
            _cut_frames(e)
        traces.append(t)
    out["device_traces"] = traces
    if isinstance(out.get("external_annotations"), list):
        out["external_annotations"] = out["external_annotations"][:3]
    return out


@functools.lru_cache(maxsize=None)
def seeds(real_dir: str) -> tuple[Seed, ...]:
    """Every real snapshot, shrunk, and the hand-built template."""
    from fragviz.snapshot.loader import read_raw

    out = [Seed("template", snapshot_template())]
    for name in sorted(os.listdir(real_dir)):
        if name.endswith(".pickle"):
            out.append(Seed(name[:-7], shrink(read_raw(os.path.join(real_dir, name)).data)))
    return tuple(out)


# Encoding -----------------------------------------------------------------------------------------
@dataclass
class Recipe:
    """A tree and how it is written: enough to write it again after the minimiser has cut it down."""

    tree: Any
    encoding: str  # "pickle", "stdpickle" or "json"
    protocol: int = 4
    gzip: bool = False
    seed: str = ""
    ops: list[str] = field(default_factory=list)

    def encode(self) -> bytes:
        data = None
        if self.encoding == "json":
            data = to_json(self.tree)
        if data is None and self.encoding == "stdpickle":
            try:
                data = pickle.dumps(self.tree, protocol=self.protocol)
            except (pickle.PicklingError, TypeError, RecursionError, ValueError):
                data = None
        if data is None:
            data = to_pickle(self.tree, self.protocol)
        return gzip.compress(data, 6, mtime=0) if self.gzip else data

    def label(self) -> str:
        how = f"{self.encoding}-p{self.protocol}" if self.encoding != "json" else "json"
        return f"{self.seed}/{'+'.join(self.ops)}/{how}{'.gz' if self.gzip else ''}"


# Walking the tree ---------------------------------------------------------------------------------
def _kids(node: Any) -> list:
    if isinstance(node, dict):
        return list(node.keys())
    if isinstance(node, list):
        return list(range(len(node)))
    return []


def slots(tree: Any, want: Callable[[Any], bool], limit: int = 5000) -> list[tuple[Any, Any]]:
    """(container, key) of every value `want` accepts; each container visited once (shared, cyclic data)."""
    out, seen, stack = [], set(), [tree]
    while stack and len(out) < limit:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for k in _kids(node):
            v = node[k]
            if want(v):
                out.append((node, k))
            if isinstance(v, (dict, list)):
                stack.append(v)
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _segments(tree: Any) -> list:
    segs = tree if isinstance(tree, list) else tree.get("segments") if isinstance(tree, dict) else None
    return [s for s in segs if isinstance(s, dict)] if isinstance(segs, list) else []


def _traces(tree: Any) -> list[list]:
    t = tree.get("device_traces") if isinstance(tree, dict) else None
    return [x for x in t if isinstance(x, list)] if isinstance(t, list) else []


def _blocks(tree: Any) -> list[tuple[dict, dict]]:
    return [(s, b) for s in _segments(tree) for b in (s.get("blocks") if isinstance(s.get("blocks"), list)
                                                       else []) if isinstance(b, dict)]


# Values -------------------------------------------------------------------------------------------
scalars = st.one_of(st.integers(-(2 ** 70), 2 ** 70), st.sampled_from(EDGE_INTS), st.text(max_size=12),
                    st.sampled_from(ODD_STRINGS), st.none(), st.booleans(), st.binary(max_size=8),
                    st.floats(allow_nan=True, allow_infinity=True))
values = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.sampled_from(VOCAB), scalars,
                                                                          max_size=3),
                   st.tuples(scalars, scalars))


# Mutations: each takes (draw, tree) and returns (tree, label) --------------------------------------
def m_swap_type(draw, tree):
    spots = slots(tree, lambda v: True)
    if not spots:
        return draw(values), "swap-root"
    parent, key = draw(st.sampled_from(spots))
    parent[key] = draw(values.filter(lambda v: type(v) is not type(parent[key])))
    return tree, f"swap:{key}"


def m_remove(draw, tree):
    spots = slots(tree, lambda v: True)
    if not spots:
        return tree, "remove-none"
    parent, key = draw(st.sampled_from(spots))
    del parent[key]
    return tree, f"remove:{key}"


def m_add_key(draw, tree):
    spots = slots(tree, lambda v: isinstance(v, dict)) + ([(None, None)] if isinstance(tree, dict) else [])
    if not spots:
        return tree, "add-none"
    parent, key = draw(st.sampled_from(spots))
    target = tree if parent is None else parent[key]
    name = draw(st.one_of(st.sampled_from(VOCAB), st.text(max_size=8)))
    target[name] = draw(values)
    return tree, f"add:{name}"


def m_edge_int(draw, tree):
    spots = slots(tree, _is_int)
    if not spots:
        return tree, "edge-none"
    parent, key = draw(st.sampled_from(spots))
    parent[key] = draw(st.sampled_from(EDGE_INTS))
    return tree, f"edge:{key}"


def m_odd_string(draw, tree):
    spots = slots(tree, lambda v: isinstance(v, str))
    if not spots:
        return tree, "string-none"
    parent, key = draw(st.sampled_from(spots))
    parent[key] = draw(st.sampled_from(ODD_STRINGS))
    return tree, f"string:{key}"


def m_deep(draw, tree):
    spots = slots(tree, lambda v: True)
    if not spots:
        return tree, "deep-none"
    parent, key = draw(st.sampled_from(spots))
    depth = draw(st.sampled_from((500, 1000, 3000, 10_000, 100_000)))
    parent[key] = Nest(depth, draw(scalars), draw(st.sampled_from(("list", "dict"))))
    return tree, f"deep{depth}:{key}"


def m_share(draw, tree):
    spots = slots(tree, lambda v: True)
    sources = slots(tree, lambda v: isinstance(v, (dict, list)))
    if not spots or not sources:
        return tree, "share-none"
    parent, key = draw(st.sampled_from(spots))
    sp, sk = draw(st.sampled_from(sources))
    parent[key] = sp[sk]  # the same object twice: a memo reference; a cycle when it is an ancestor
    return tree, f"share:{key}"


def m_laughs(draw, tree):
    spots = slots(tree, lambda v: True)
    if not spots:
        return tree, "laughs-none"
    parent, key = draw(st.sampled_from(spots))
    levels = draw(st.integers(8, 40))
    parent[key] = laughs(levels, 2, draw(scalars))
    return tree, f"laughs{levels}:{key}"


def m_overlap(draw, tree):
    segs = _segments(tree)
    if len(segs) < 2:
        return tree, "overlap-none"
    i, j = draw(st.integers(0, len(segs) - 1)), draw(st.integers(0, len(segs) - 1))
    delta = draw(st.sampled_from((0, 1, 512, -512)))
    if _is_int(segs[j].get("address")):
        segs[i]["address"] = segs[j]["address"] + delta
    return tree, "overlap"


def m_block_outside(draw, tree):
    blocks = _blocks(tree)
    if not blocks:
        return tree, "outside-none"
    seg, blk = draw(st.sampled_from(blocks))
    base, total = seg.get("address"), seg.get("total_size")
    if _is_int(base) and _is_int(total):
        blk["address"] = draw(st.sampled_from((base + total, base + total + 512, base - 512, 0, base + total // 2 + 1)))
    return tree, "block-outside"


def m_sizes(draw, tree):
    blocks = _blocks(tree)
    if not blocks:
        return tree, "sizes-none"
    seg, blk = draw(st.sampled_from(blocks))
    which = draw(st.sampled_from(("total_size", "allocated_size", "active_size", "requested_size", "block")))
    new = draw(st.sampled_from((0, 1, -1, 512, 3, 2 ** 40, -(2 ** 40))))
    if which == "block":
        blk["size"] = new
    else:
        seg[which] = new
    return tree, f"sizes:{which}"


def m_state(draw, tree):
    blocks = _blocks(tree)
    if not blocks:
        return tree, "state-none"
    _, blk = draw(st.sampled_from(blocks))
    blk["state"] = copy.deepcopy(draw(st.sampled_from(STATES)))
    return tree, "state"


def m_reorder(draw, tree):
    traces = [t for t in _traces(tree) if len(t) > 1]
    if not traces:
        return tree, "reorder-none"
    t = draw(st.sampled_from(traces))
    if len(t) > 64:
        t.reverse()
    else:
        t[:] = draw(st.permutations(t))
    return tree, "reorder"


def m_free_after_segment_free(draw, tree):
    traces, blocks = _traces(tree), _blocks(tree)
    if not traces or not blocks:
        return tree, "late-free-none"
    seg, blk = draw(st.sampled_from(blocks))
    t = draw(st.sampled_from(traces))
    t.append({"action": "segment_free", "addr": seg.get("address"), "size": seg.get("total_size"), "stream": 0})
    t.append({"action": "free_completed", "addr": blk.get("address"), "size": blk.get("size"), "stream": 0})
    return tree, "free_completed-after-segment_free"


def m_event(draw, tree):
    traces = _traces(tree)
    if not traces:
        return tree, "event-none"
    t = draw(st.sampled_from(traces))
    action = draw(st.sampled_from(ACTIONS))
    event = {"action": action, "addr": draw(st.one_of(st.sampled_from(EDGE_INTS), st.integers(0, 2 ** 48))),
             "size": draw(st.one_of(st.sampled_from(EDGE_INTS), st.integers(0, 2 ** 32))), "stream": 0}
    if action == "oom":
        event["device_free"] = draw(st.one_of(st.sampled_from(("lots", None, -1, 2 ** 64)), st.integers()))
    if draw(st.booleans()):
        event[draw(st.sampled_from(VOCAB))] = draw(values)
    t.insert(draw(st.integers(0, len(t))), event)
    return tree, f"event:{action}"


def m_gc_threshold(draw, tree):
    if not isinstance(tree, dict):
        return tree, "gc-none"
    s = tree.setdefault("allocator_settings", {})
    if isinstance(s, dict):
        key = draw(st.sampled_from(("garbage_collection_threshold", "PYTORCH_CUDA_ALLOC_CONF", "max_split_size",
                                    "expandable_segments", "roundup_power2_divisions")))
        s[key] = copy.deepcopy(draw(st.one_of(st.sampled_from(("0.6", [0.6], {}, None, -1, 2.0, float("nan"),
                                                               float("inf"), 2 ** 64, {"1": "x"}, [[1, 2]])),
                                             st.sampled_from(ALLOC_CONFS), values)))
        return tree, f"settings:{key}"
    return tree, "gc-none"


def m_device(draw, tree):
    segs = _segments(tree)
    if not segs:
        return tree, "device-none"
    seg = draw(st.sampled_from(segs))
    seg["device"] = draw(st.sampled_from((-1, 1, 7, 64, 1 << 20, 2 ** 63, "0", None, 0.5, True)))
    return tree, "device"


def m_frame_names(draw, tree):
    spots = slots(tree, lambda v: isinstance(v, dict) and "name" in v and "filename" in v)
    if not spots:
        return tree, "frame-none"
    parent, key = draw(st.sampled_from(spots))
    frame = parent[key]
    field_ = draw(st.sampled_from(("name", "filename", "line")))
    frame[field_] = draw(st.one_of(st.sampled_from(ODD_STRINGS), st.sampled_from(EDGE_INTS), values))
    return tree, f"frame:{field_}"


def m_repeat(draw, tree):
    traces = [t for t in _traces(tree) if t]
    if traces:
        t = draw(st.sampled_from(traces))
        t.extend([t[0]] * draw(st.sampled_from((1000, 20_000, 50_000))))  # one event, shared many times
        return tree, "repeat-events"
    return tree, "repeat-none"


def m_pool_id(draw, tree):
    segs = _segments(tree)
    if not segs:
        return tree, "pool-none"
    draw(st.sampled_from(segs))["segment_pool_id"] = draw(st.sampled_from(
        ((0,), (0, 0, 0), [1, 2], "0,0", (2 ** 64, 0), (-1, -1), None, ("a", "b"))))
    return tree, "pool-id"


def m_user_metadata(draw, tree):
    events = [e for t in _traces(tree) for e in t if isinstance(e, dict)]
    if not events:
        return tree, "meta-none"
    e = draw(st.sampled_from(events))
    e[draw(st.sampled_from(("user_metadata", "compile_context", "time_us")))] = draw(st.one_of(
        values, st.just(Nest(50_000, "m")), st.sampled_from(ODD_STRINGS)))
    return tree, "event-field"


MUTATIONS = (m_swap_type, m_remove, m_add_key, m_edge_int, m_odd_string, m_deep, m_share, m_laughs, m_overlap,
             m_block_outside, m_sizes, m_state, m_reorder, m_free_after_segment_free, m_event, m_gc_threshold,
             m_device, m_frame_names, m_repeat, m_pool_id, m_user_metadata)

encodings = st.one_of(
    st.tuples(st.just("stdpickle"), st.integers(2, 5), st.booleans()),
    st.tuples(st.just("pickle"), st.integers(0, 5), st.booleans()),
    st.tuples(st.just("json"), st.just(4), st.booleans()),
)


def structured(real_dir: str) -> st.SearchStrategy[Recipe]:
    all_seeds = seeds(real_dir)

    @st.composite
    def build(draw) -> Recipe:
        s = draw(st.sampled_from(all_seeds))
        tree = copy.deepcopy(s.data)
        ops = []
        for _ in range(draw(st.integers(1, 3))):
            tree, label = draw(st.sampled_from(MUTATIONS))(draw, tree)
            ops.append(label)
        encoding, protocol, gz = draw(encodings)
        return Recipe(tree, encoding, protocol, gz, s.name, ops)

    return build()


# Raw byte mutations -------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def encoded_seeds(real_dir: str) -> tuple[tuple[str, str, bytes], ...]:
    """(seed name, encoding, bytes): each seed as a protocol-4 pickle, protocol-2, gzip and JSON."""
    out = []
    for s in seeds(real_dir):
        p4 = pickle.dumps(s.data, protocol=4)
        out.append((s.name, "pickle4", p4))
        out.append((s.name, "pickle2", to_pickle(s.data, 2)))
        out.append((s.name, "pickle0", to_pickle(s.data, 0)))
        out.append((s.name, "gzip", gzip.compress(p4, 6, mtime=0)))
        out.append((s.name, "gzip-inner", p4))  # mutated inside, then compressed
        js = to_json(s.data)
        if js:
            out.append((s.name, "json", js))
    return tuple(out)


def mutated_bytes(real_dir: str) -> st.SearchStrategy[Case]:
    bases = encoded_seeds(real_dir)

    @st.composite
    def build(draw) -> Case:
        name, enc, base = draw(st.sampled_from(bases))
        data = bytearray(base)
        ops = []
        for _ in range(draw(st.integers(1, 4))):
            op = draw(st.sampled_from(("flip", "set", "truncate", "delete", "insert", "duplicate", "splice")))
            n = len(data)
            i = draw(st.integers(0, max(0, n - 1)))
            if op == "flip" and n:
                data[i] ^= 1 << draw(st.integers(0, 7))
            elif op == "set" and n:
                data[i] = draw(st.sampled_from((0, 0xFF, 0x80, ord("."), ord("("), ord("h"), ord("}"), ord("]"))))
            elif op == "truncate":
                del data[i:]
            elif op == "delete":
                del data[i:i + draw(st.integers(1, 64))]
            elif op == "insert":
                data[i:i] = draw(st.binary(min_size=1, max_size=16))
            elif op == "duplicate":
                data[i:i] = data[i:i + draw(st.integers(1, 256))]
            elif op == "splice":
                _, _, other = draw(st.sampled_from(bases))
                j = draw(st.integers(0, max(0, len(other) - 1)))
                data[i:] = other[j:j + draw(st.integers(1, 4096))]
            ops.append(f"{op}@{i}")
        out = gzip.compress(bytes(data), 6, mtime=0) if enc == "gzip-inner" else bytes(data)
        return Case(f"bytes/{name}/{enc}/{'+'.join(ops)}", out, "bytes")

    return build()


# Drawing examples without a test per example ------------------------------------------------------
def draw_examples(strategy: st.SearchStrategy, n: int, seed: int | None = None) -> list:
    """`n` examples from `strategy`: fixed by derandomize (seed None) or by `seed`; nothing shrinks or is saved."""
    out: list = []

    @settings(max_examples=n, database=None, derandomize=seed is None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(example):
        out.append(example)

    if seed is not None:
        collect = hypothesis_seed(seed)(collect)
    collect()
    return out


def structured_cases(real_dir: str, n: int, seed: int | None = None) -> list[Case]:
    cases, seen = [], set()
    for recipe in draw_examples(structured(real_dir), n, seed):
        data = recipe.encode()
        key = hash(data)
        if key in seen:
            continue
        seen.add(key)
        cases.append(Case(f"structured/{recipe.label()}", data, "structured", recipe))
    return cases


def byte_cases(real_dir: str, n: int, seed: int | None = None) -> list[Case]:
    cases, seen = [], set()
    for case in draw_examples(mutated_bytes(real_dir), n, seed):
        if hash(case.data) not in seen:
            seen.add(hash(case.data))
            cases.append(case)
    return cases


def seed_cases(real_dir: str) -> list[Case]:
    """The shrunk seeds themselves, unmutated, in every encoding: they must pass (the harness's control)."""
    return [Case(f"seed/{name}/{enc}", gzip.compress(data, 6, mtime=0) if enc == "gzip-inner" else data, "seed")
            for name, enc, data in encoded_seeds(real_dir)]
