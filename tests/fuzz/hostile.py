"""Hand-built hostile pickles: every opcode that can name a global or call, memo bombs, depth, huge numbers.

Each code-running case aims at the canary (tests.fuzz.canary): if fragviz ever ran it, a file would appear in
the canary folder. The payloads are opcode fragments (encode.Raw) placed inside real-looking snapshot
dicts, at the top level and deep, and written in every protocol 0-5.
"""
from __future__ import annotations

import copyreg
import gzip
import os
import pickle
import struct
from typing import Any, Callable

from .canary import NewCanary, SetstateCanary, canary_dir
from .case import Case
from .encode import Nest, PickleWriter, Raw, to_pickle

# Extension codes the worker registers with copyreg (EXT1, EXT2, EXT4): an unpickler that honoured the
# registry without asking find_class would call these.
EXTENSIONS = {0xC8: ("os", "system"), 0x1234: ("builtins", "exec"), 0x123456: ("tests.fuzz.canary", "write_canary")}


def register_extensions() -> list[int]:
    """Register the codes (the worker does, for good); returns those this call added."""
    added = []
    for code, (module, name) in EXTENSIONS.items():
        if copyreg._extension_registry.get((module, name)) != code:  # type: ignore[attr-defined]
            copyreg.add_extension(module, name, code)
            added.append(code)
    return added


def unregister_extensions(codes: list[int]) -> None:
    for code in codes:
        module, name = EXTENSIONS[code]
        copyreg.remove_extension(module, name, code)


def frame(name: str = "forward", line: int = 10) -> dict[str, Any]:
    return {"filename": "/home/u/model.py", "line": line, "name": name}


def snapshot_template() -> dict[str, Any]:
    """A small 2.5-style snapshot: one segment of two blocks, a five-entry trace, settings, annotations."""
    base = 0x7F0000000000
    blocks = [{"address": base, "size": 1 << 20, "requested_size": 1000000, "state": "active_allocated",
               "frames": [frame("alloc_a", 11), frame("main", 99)]},
              {"address": base + (1 << 20), "size": 1 << 20, "requested_size": 0, "state": "inactive",
               "frames": []}]
    segment = {"device": 0, "address": base, "total_size": 2 << 20, "allocated_size": 1 << 20,
               "active_size": 1 << 20, "requested_size": 1000000, "stream": 0, "segment_type": "large",
               "segment_pool_id": (0, 0), "is_expandable": False, "frames": [frame("alloc_a", 11)],
               "blocks": blocks}
    trace = [
        {"action": "segment_alloc", "addr": base, "size": 2 << 20, "stream": 0, "time_us": 1000,
         "frames": [frame("alloc_a", 11)], "compile_context": "N/A", "user_metadata": ""},
        {"action": "alloc", "addr": base, "size": 1 << 20, "stream": 0, "time_us": 1001,
         "frames": [frame("alloc_a", 11)], "compile_context": "N/A", "user_metadata": ""},
        {"action": "alloc", "addr": base + (1 << 20), "size": 1 << 20, "stream": 0, "time_us": 1002,
         "frames": [frame("alloc_b", 12)], "compile_context": "N/A", "user_metadata": "step 1"},
        {"action": "free_requested", "addr": base + (1 << 20), "size": 1 << 20, "stream": 0, "time_us": 1003,
         "frames": [], "compile_context": "N/A", "user_metadata": ""},
        {"action": "free_completed", "addr": base + (1 << 20), "size": 1 << 20, "stream": 0, "time_us": 1004,
         "frames": [], "compile_context": "N/A", "user_metadata": ""},
    ]
    settings = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False", "max_split_size": -1,
                "garbage_collection_threshold": 0.0, "expandable_segments": False,
                "roundup_power2_divisions": {"1": 0, "2": 0}}
    annotations = [{"device": 0, "stage": "START", "name": "forward", "time_us": 1000}]
    return {"segments": [segment], "device_traces": [trace], "allocator_settings": settings,
            "external_annotations": annotations}


# Where a payload goes -----------------------------------------------------------------------------
def _at(path: tuple) -> Callable[[Any], Any]:
    def place(payload: Any) -> Any:
        snap = snapshot_template()
        node = snap
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = payload
        return snap
    return place


PLACEMENTS: dict[str, Callable[[Any], Any]] = {
    "top": lambda payload: payload,
    "segments": _at(("segments",)),
    "segment-address": _at(("segments", 0, "address")),
    "block-frames": _at(("segments", 0, "blocks", 0, "frames", 0)),
    "trace-frame-name": _at(("device_traces", 0, 2, "frames", 0, "name")),
    "user-metadata": _at(("device_traces", 0, 4, "user_metadata")),
    "settings": _at(("allocator_settings", "garbage_collection_threshold")),
    "annotations": _at(("external_annotations", 0)),
    "dict-key": lambda payload: {**snapshot_template(), "extra": Raw(b"}" + payload.ops + b"K\x01s")},
    "deep": lambda payload: _at(("device_traces", 0, 3, "user_metadata"))(Nest(5000, payload)),
}


# The calls: module, name, arguments --------------------------------------------------------------
def targets() -> list[tuple[str, str, tuple]]:
    d = canary_dir()
    cmd = lambda tag: f"touch {os.path.join(d, 'ran-' + tag)}"  # noqa: E731
    path = lambda tag: os.path.join(d, "ran-" + tag)  # noqa: E731
    return [
        ("os", "system", (cmd("os-system"),)),
        ("posix", "system", (cmd("posix-system"),)),
        ("subprocess", "check_call", (["touch", path("subprocess")],)),
        ("builtins", "exec", (f"open({path('exec')!r}, 'w').write('x')",)),
        ("builtins", "eval", (f"__import__('os').system({cmd('eval')!r})",)),
        ("builtins", "open", (path("open"), "w")),
        ("io", "open", (path("io-open"), "w")),
        ("tests.fuzz.canary", "write_canary", ()),
        ("tests.fuzz.canary", "NewCanary", ()),
    ]


def _ops(value: Any, p: int) -> bytes:
    """Opcodes that push `value` (plain data without shared references: no memo slots used)."""
    w = PickleWriter(p)
    w.shared = set()
    w._write(value)
    return bytes(w.out)


def _args(args: tuple, p: int) -> bytes:
    return b"(" + b"".join(_ops(a, p) for a in args) + b"t"


def route_ops(route: str, module: str, name: str, args: tuple, p: int) -> bytes:
    """Opcodes for one call route; each pushes exactly one object."""
    glob = b"c" + module.encode() + b"\n" + name.encode() + b"\n"
    stack_glob = _ops(module, max(p, 1)) + _ops(name, max(p, 1)) + b"\x93"
    ext = {"ext1": b"\x82\xc8", "ext2": b"\x83\x34\x12", "ext4": b"\x84" + struct.pack("<I", 0x123456)}
    if route == "global":
        return glob + _args(args, p) + b"R"
    if route == "stack_global":
        return stack_glob + _args(args, p) + b"R"
    if route == "inst":
        return b"(" + b"".join(_ops(a, p) for a in args) + b"i" + module.encode() + b"\n" + name.encode() + b"\n"
    if route == "obj":
        return b"(" + glob + b"".join(_ops(a, p) for a in args) + b"o"
    if route in ext:  # the code names the registered callable: its arguments are the ones that callable takes
        d = canary_dir()
        fixed = {"ext1": (f"touch {os.path.join(d, 'ran-ext1')}",),
                 "ext2": (f"open({os.path.join(d, 'ran-ext2')!r}, 'w')",), "ext4": ()}
        return ext[route] + _args(fixed[route], p) + b"R"
    if route == "global_memo_twice":  # the global memoised, fetched back and called twice
        return glob + b"q\xf0" + _args(args, p) + b"R0h\xf0" + _args(args, p) + b"R"
    raise ValueError(route)


CALL_ROUTES = ("global", "stack_global", "inst", "obj", "ext1", "ext2", "ext4", "global_memo_twice")


def object_ops(p: int) -> dict[str, bytes]:
    """Routes that need no target: BUILD, NEWOBJ, NEWOBJ_EX, PERSID, BINPERSID, and plain-object misuses."""
    d = canary_dir()
    setstate = b"ctests.fuzz.canary\nSetstateCanary\n"
    new = b"ctests.fuzz.canary\nNewCanary\n"
    return {
        "build-setstate": setstate + b")\x81" + b"}" + _ops("x", p) + _ops(1, p) + b"sb",
        "build-obj": b"(" + setstate + b"o" + _ops({"k": 1}, p) + b"b",
        "build-plain-dict": b"}" + _ops({"__class__": "x"}, p) + b"b",
        "build-slotstate": b"}" + b"(N" + _ops({"__dict__": 1}, p) + b"tb",
        "newobj": new + b")\x81",
        "newobj-args": new + _ops((1, 2), p) + b"\x81",
        "newobj-ex": new + b")}\x92",
        "newobj-ex-kwargs": new + b")" + _ops({"a": 1}, p) + b"\x92",
        "newobj-stack-global": _ops("tests.fuzz.canary", 1) + _ops("NewCanary", 1) + b"\x93)\x81",
        "persid": b"P" + f"os.system:touch {d}/ran-persid".encode() + b"\n",
        "binpersid": _ops(f"os.system:touch {d}/ran-binpersid", p) + b"Q",
        "binpersid-tuple": _ops(("os", "system", f"touch {d}/ran-binpersid2"), p) + b"Q",
        "reduce-on-dict": b"})R",
        "reduce-on-list": b"](K\x01tR",
        "obj-plain": b"(}o",
        "inst-builtins-list": b"(K\x01ibuiltins\nlist\n",
        "next-buffer": b"\x97",
        "readonly-buffer": b"C\x01x\x98",
        "bytearray8": b"\x96" + struct.pack("<Q", 3) + b"abc",
    }


def code_cases() -> list[Case]:
    """Every call route x every target, and every object route x every protocol x every placement."""
    cases: list[Case] = []
    placements = list(PLACEMENTS)
    n = 0
    for route in CALL_ROUTES:
        for module, name, args in targets():
            p = n % 6
            where = placements[n % len(placements)]
            n += 1
            tree = PLACEMENTS[where](Raw(route_ops(route, module, name, args, p)))
            cases.append(Case(f"hostile/every-target/{route}/{module}.{name}/p{p}/{where}", to_pickle(tree, p), "hostile"))
    for p in range(6):
        for r, (route, ops) in enumerate(object_ops(p).items()):
            for where in _spread(placements, p, r):
                tree = PLACEMENTS[where](Raw(ops))
                cases.append(Case(f"hostile/{route}/p{p}/{where}", to_pickle(tree, p), "hostile"))
        module, name, args = targets()[p % 3]
        for r, route in enumerate(CALL_ROUTES):
            for where in _spread(placements, p, r):
                tree = PLACEMENTS[where](Raw(route_ops(route, module, name, args, p)))
                cases.append(Case(f"hostile/{route}/{module}.{name}/p{p}/{where}", to_pickle(tree, p), "hostile"))
    return cases + authentic_cases()


def _spread(placements: list[str], p: int, r: int) -> list[str]:
    """The top level and two more placements, rotating so that each route meets every placement over p = 0..5."""
    n = len(placements)
    return sorted({"top", placements[(2 * p + r) % n], placements[(2 * p + r + 1) % n]})


class _Evil:
    """pickle.dumps writes this as the call __reduce__ returns: the classic attack, as Python writes it."""

    def __init__(self, call: Any, args: tuple) -> None:
        self.call, self.args = call, args

    def __reduce__(self):
        return self.call, self.args


class _NewExEvil:
    def __reduce_ex__(self, protocol):
        return copyreg.__newobj_ex__, (NewCanary, (), {"a": 1})  # type: ignore[attr-defined]


def authentic_cases() -> list[Case]:
    """The standard pickler's own encoding of hostile objects (GLOBAL/STACK_GLOBAL, REDUCE, BUILD, NEWOBJ(_EX), EXT)."""
    import builtins
    import posix
    import subprocess

    from . import canary

    d = canary_dir()
    objs = {
        "os.system": _Evil(posix.system, (f"touch {d}/ran-auth-system",)),
        "builtins.exec": _Evil(builtins.exec, (f"open({d + '/ran-auth-exec'!r}, 'w')",)),
        "subprocess.check_call": _Evil(subprocess.check_call, (["touch", f"{d}/ran-auth-subprocess"],)),
        "builtins.open": _Evil(builtins.open, (f"{d}/ran-auth-open", "w")),
        "setstate": _with_state(SetstateCanary),
        "newobj": _with_state(NewCanary),
        "newobj-ex": _NewExEvil(),
        "ext": _Evil(canary.write_canary, ()),
    }
    cases = []
    added = register_extensions()  # so the standard pickler writes EXT opcodes for the registered globals
    try:
        for p in range(6):
            for label, obj in objs.items():
                for where in ("top", "trace-frame-name", "settings", "user-metadata"):
                    snap = obj if where == "top" else _place_object(where, obj)
                    try:
                        data = pickle.dumps(snap, protocol=p)
                    except (pickle.PicklingError, TypeError, AttributeError):
                        continue
                    cases.append(Case(f"hostile/authentic/{label}/p{p}/{where}", data, "hostile"))
    finally:
        unregister_extensions(added)
    return cases


def _with_state(cls: type) -> Any:
    """An instance built without its canary __new__/__init__, with a __dict__ so pickle writes a BUILD."""
    obj = object.__new__(cls)
    obj.__dict__["state"] = 1
    return obj


def _place_object(where: str, obj: Any) -> Any:
    snap = snapshot_template()
    if where == "trace-frame-name":
        snap["device_traces"][0][2]["frames"][0]["name"] = obj
    elif where == "settings":
        snap["allocator_settings"]["garbage_collection_threshold"] = obj
    else:
        snap["device_traces"][0][4]["user_metadata"] = obj
    return snap


# Memo bombs ("billion laughs") --------------------------------------------------------------------
def laughs(levels: int = 40, fanout: int = 2, leaf: Any = "lol") -> list:
    """A list that reuses one nested list fanout**levels times: tiny as a pickle, astronomic as a tree."""
    node: Any = [leaf]
    for _ in range(levels):
        node = [node] * fanout
    return node


def laugh_cases() -> list[Case]:
    cases = []
    bomb = laughs(40, 2)
    wide = laughs(10, 16, "x" * 50)  # 16**10 = 2**40 leaves, ~13 KB once the leaves and memo are written
    for label, b in (("2x40", bomb), ("16x10", wide)):
        for where in ("settings", "trace-frame-name", "user-metadata", "annotations", "top", "segments",
                      "block-frames"):
            place = PLACEMENTS[where]
            if where == "settings":
                tree = snapshot_template()
                tree["allocator_settings"] = {"PYTORCH_CUDA_ALLOC_CONF": "", "roundup_power2_divisions": b}
            elif where == "annotations":
                tree = snapshot_template()
                tree["external_annotations"] = b
            else:
                tree = place(b)
            for p in (2, 4):
                cases.append(Case(f"laughs/{label}/{where}/p{p}", to_pickle(tree, p), "hostile"))
    cases.append(Case("laughs/trace-30M-memo-events/gzip", memo_trace_bomb(30_000_000), "hostile"))
    cases.append(Case("laughs/trace-1M-memo-events", memo_trace_bomb(1_000_000, gz=False), "hostile"))
    return cases


def memo_trace_bomb(events: int, gz: bool = True) -> bytes:
    """A trace of `events` entries, every one a memo reference to one event dict (30M: ~100 KB gzip)."""
    snap = snapshot_template()
    event = snap["device_traces"][0][1]
    del snap["device_traces"]
    head = to_pickle(snap, 4)[:-2]  # the top dict, open: its SETITEMS and STOP come last
    out = bytearray(head)
    out += _ops("device_traces", 4) + b"](]" + _ops(event, 4) + b"q\xffa"
    batches, rest = divmod(events - 1, 1000)
    out += (b"(" + b"h\xff" * 1000 + b"e") * batches
    if rest:
        out += b"(" + b"h\xff" * rest + b"e"
    out += b"eu."
    return gzip.compress(bytes(out), 9) if gz else bytes(out)


# Depth, numbers, lengths, truncation -------------------------------------------------------------
def depth_cases() -> list[Case]:
    cases = []
    for depth in (10_000, 100_000, 1_000_000):
        for where in ("top", "trace-frame-name", "user-metadata", "settings", "block-frames", "segment-address"):
            tree = PLACEMENTS[where](Nest(depth, "x"))
            cases.append(Case(f"deep/list-{depth}/{where}", to_pickle(tree, 4), "hostile"))
        cases.append(Case(f"deep/dict-{depth}/annotations",
                          to_pickle(PLACEMENTS["annotations"](Nest(depth, 1, "dict")), 2), "hostile"))
        cases.append(Case(f"deep/list-{depth}/p0", to_pickle(PLACEMENTS["user-metadata"](Nest(depth, 1)), 0),
                          "hostile"))
    cyc: list = []
    cyc.append(cyc)
    for where in ("top", "trace-frame-name", "user-metadata", "settings", "segments", "block-frames", "annotations"):
        cases.append(Case(f"cycle/list-self/{where}", to_pickle(PLACEMENTS[where](cyc), 4), "hostile"))
    snap = snapshot_template()
    snap["device_traces"][0][0]["frames"] = snap["device_traces"][0]  # the frames list is the trace itself
    cases.append(Case("cycle/frames-are-the-trace", to_pickle(snap, 4), "hostile"))
    snap = snapshot_template()
    snap["segments"][0]["blocks"][0]["frames"].append(snap["segments"][0])
    cases.append(Case("cycle/block-frame-is-its-segment", to_pickle(snap, 4), "hostile"))
    return cases


HUGE = {"2^63": 2 ** 63, "2^64": 2 ** 64, "2^1000": 2 ** 1000, "-2^63-1": -(2 ** 63) - 1, "-2^1000": -(2 ** 1000),
        "2^64-1": 2 ** 64 - 1, "-1": -1}
INT_FIELDS = {
    "segment-address": ("segments", 0, "address"), "segment-total": ("segments", 0, "total_size"),
    "segment-stream": ("segments", 0, "stream"), "segment-device": ("segments", 0, "device"),
    "block-size": ("segments", 0, "blocks", 0, "size"), "block-address": ("segments", 0, "blocks", 1, "address"),
    "block-requested": ("segments", 0, "blocks", 0, "requested_size"),
    "event-addr": ("device_traces", 0, 2, "addr"), "event-size": ("device_traces", 0, 2, "size"),
    "event-stream": ("device_traces", 0, 2, "stream"), "event-time": ("device_traces", 0, 3, "time_us"),
    "frame-line": ("device_traces", 0, 1, "frames", 0, "line"),
    "max-split": ("allocator_settings", "max_split_size"),
    "pool-id": ("segments", 0, "segment_pool_id"),
}


def number_cases() -> list[Case]:
    cases = []
    for field, path in INT_FIELDS.items():
        for label, value in HUGE.items():
            v = (value, 0) if field == "pool-id" else value
            tree = _at(path)(v)
            p = 2 if len(cases) % 2 else 4  # LONG1 and LONG4 (2^1000 needs LONG4 above 255 bytes: 2^2040)
            cases.append(Case(f"huge/{field}/{label}/p{p}", to_pickle(tree, p), "hostile"))
    tree = _at(("segments", 0, "total_size"))(Raw(b"\x8b" + struct.pack("<i", 300) + b"\x01" * 300))
    cases.append(Case("huge/long4-2400-bits/segment-total", to_pickle(tree, 4), "hostile"))
    tree = _at(("device_traces", 0, 2, "size"))(Raw(b"L" + b"9" * 5000 + b"L\n"))
    cases.append(Case("huge/long-text-5000-digits/event-size", to_pickle(tree, 0), "hostile"))
    tree = _at(("device_traces", 0, 2, "size"))(Raw(b"I" + b"9" * 5000 + b"\n"))
    cases.append(Case("huge/int-text-5000-digits/event-size", to_pickle(tree, 0), "hostile"))
    tree = _at(("segments", 0, "device"))(1 << 30)
    cases.append(Case("huge/device-2^30", to_pickle(tree, 4), "hostile"))
    tree = snapshot_template()
    tree["device_traces"] = [[] for _ in range(100_000)] + tree["device_traces"]
    cases.append(Case("huge/100k-empty-device-traces", to_pickle(tree, 4), "hostile"))
    return cases


def length_cases() -> list[Case]:
    """Lengths declared but not present, truncated pickles, and opcode misuse."""
    def in_frame_name(ops: bytes, p: int = 4) -> bytes:
        return to_pickle(_at(("device_traces", 0, 2, "frames", 0, "name"))(Raw(ops)), p)

    raw = {
        "binunicode-4G": b"X\xff\xff\xff\xffabc",
        "binunicode8-2^62": b"\x8d" + struct.pack("<Q", 1 << 62) + b"abc",
        "binbytes-4G": b"B\xff\xff\xff\xffabc",
        "binbytes8-2^63": b"\x8e" + struct.pack("<Q", (1 << 63) - 1) + b"abc",
        "bytearray8-2^62": b"\x96" + struct.pack("<Q", 1 << 62),
        "long4-2G": b"\x8b\xff\xff\xff\x7f\x01\x02",
        "long4-negative": b"\x8b\xff\xff\xff\xff\x01",
        "binstring-negative": b"T\xff\xff\xff\xffabc",
        "short-binunicode-past-end": b"\x8c\xffabc",
        "binget-unset": b"h\xee",
        "long-binget-2^32-1": b"j\xff\xff\xff\xff",
        "long-binput-150M": b"N" + b"r" + struct.pack("<I", 150_000_000),  # the C memo grows to 2x the index
        "long-binput-2^31": b"N" + b"r" + struct.pack("<I", 1 << 31),
        "get-negative": b"g-1\n",
        "put-negative": b"NI0\np-1\n",
        "frame-2^63": b"\x95" + struct.pack("<Q", (1 << 63) - 1) + b"N",
        "appends-on-dict": b"}(K\x01e",
        "setitems-on-list": b"](K\x01K\x02u",
        "setitem-unhashable-key": b"}]K\x01s",
        "dup-pop-mark": b"N2010",
        "mark-unclosed": b"(NN",
        "bad-utf8": b"X\x02\x00\x00\x00\xff\xfe",
        "binstring-non-ascii": b"U\x02\xff\xfe",
        "float-text-garbage": b"Fnot-a-float\n",
        "unknown-opcode": b"\xff",
    }
    cases = []
    for label, ops in raw.items():
        cases.append(Case(f"lengths/{label}/frame-name", in_frame_name(ops), "hostile"))
        cases.append(Case(f"lengths/{label}/top", b"\x80\x04" + ops + b".", "hostile"))
    cases.append(Case("lengths/frame-longer-than-file", b"\x80\x04\x95" + struct.pack("<Q", 1 << 40) + b"}.",
                      "hostile"))
    cases.append(Case("lengths/stop-only", b"\x80\x04.", "hostile"))
    cases.append(Case("lengths/protocol-6", b"\x80\x06}.", "hostile"))
    cases.append(Case("lengths/protocol-255", b"\x80\xff}.", "hostile"))
    cases.append(Case("lengths/proto-opcode-twice", b"\x80\x04\x80\x02}.", "hostile"))
    full = to_pickle(snapshot_template(), 4)
    std = pickle.dumps(snapshot_template(), protocol=4)
    for cut in sorted({1, 2, 3, 10, len(full) // 3, len(full) // 2, len(full) - 2, len(full) - 1}):
        cases.append(Case(f"truncated/at-{cut}-of-{len(full)}", full[:cut], "hostile"))
    for cut in (20, len(std) // 2, len(std) - 1):
        cases.append(Case(f"truncated/framed-at-{cut}-of-{len(std)}", std[:cut], "hostile"))
    for label, value in (("int", 5), ("str", "segments"), ("none", None), ("tuple", (1, 2)), ("float", 1.5),
                         ("empty-list", []), ("empty-dict", {}), ("bytes", b"x"), ("list-of-ints", [1, 2, 3])):
        cases.append(Case(f"not-a-dict/{label}", to_pickle(value, 4), "hostile"))
    return cases


def real_negative_cases(real_dir: str) -> list[Case]:
    cases = []
    folder = os.path.join(real_dir, "negative")
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        with open(os.path.join(folder, name), "rb") as fh:
            cases.append(Case(f"real-negative/{name}", fh.read(), "hostile"))
    return cases


def all_cases(real_dir: str | None = None) -> list[Case]:
    cases = code_cases() + laugh_cases() + depth_cases() + number_cases() + length_cases()
    if real_dir:
        cases += real_negative_cases(real_dir)
    return cases
