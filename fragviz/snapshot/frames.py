"""Frame and stack interning: every distinct frame and every distinct stack is kept once."""
from __future__ import annotations

import re
from operator import itemgetter
from typing import Any

from fragviz.base.limits import Limits
from fragviz.model import NO_STACK, Frame
from fragviz.snapshot.values import INT64_MIN, INT64_MAX, Values, describe

# PyTorch's viewers hide these frames (torch/cuda/_memory_viz.py and MemoryViz.js use the same lists).
_INTERNAL_NAMES = ("unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "_start",
                   "__libc_start_main", "PyEval_", "PyObject_", "PyFunction_")
_INTERNAL_FILES = ("core/boxing", "/Register", "/Redispatch", "pythonrun.c", "Modules/main.c",
                   "Objects/call.c", "Objects/methodobject.c", "pycore_ceval.h", "ceval.c",
                   "cpython/abstract.h")


def is_internal(frame: Frame) -> bool:
    """True for frames PyTorch's own viewer filters out (unwinder, interpreter and dispatcher frames)."""
    return any(n in frame.name for n in _INTERNAL_NAMES) or any(f in frame.filename for f in _INTERNAL_FILES)


# The standard library's own files ("/usr/lib/python3.11/copy.py"), not the packages installed beside it
_STDLIB = re.compile(r"[/\\]lib[/\\]python\d+(\.\d+)?t?[/\\](?!(site|dist)-packages[/\\])")


def is_user_frame(frame: Frame) -> bool:
    """A Python frame outside torch's own package and the standard library: where a user would look first (the line
    that called `copy.deepcopy(model)`, not copy.py's). A Python frame is not filtered by its function's name, as
    C++ frames are (`is_internal`): `on_train_batch_start` is a user's hook, not the C runtime's `_start`."""
    fn = frame.filename
    if not fn.endswith(".py") or any(f in fn for f in _INTERNAL_FILES):
        return False
    return "/torch/" not in fn and not fn.startswith("<frozen") and not _STDLIB.search(fn)


# The caching allocator's own frames and c10's (PyTorch's core library: the allocator, storage, tensors and the
# dispatcher): every allocation passes through them, so they never say why memory was allocated.
_ALLOCATOR_FILES = re.compile(r"CachingAllocator|MallocAsync|libc10(_cuda|_hip)?\.so|[/\\]c10[/\\]")
_ANONYMOUS = "(anonymous namespace)"


def cpp_function(name: str) -> str:
    """A C++ frame's qualified function name without its return type, template arguments and parameters:
    "at::Tensor c10::callUnboxedKernelFunction<at::Tensor>(void*)" is "c10::callUnboxedKernelFunction"."""
    plain, depth = [], 0
    for ch in name.replace(_ANONYMOUS, "anonymous"):
        if ch == "(" and depth == 0:  # the parameters (a "(" inside template arguments is a function type's)
            break
        depth = max(depth + (ch == "<") - (ch == ">"), 0)  # max: a stray '>' (operator>) cannot unbalance the rest
        if depth == 0 and ch != ">":
            plain.append(ch)
    words = "".join(plain).split()
    return words[-1] if words else ""


def is_allocator_frame(frame: Frame) -> bool:
    """True for a C++ frame of the caching allocator or of c10 (CUDACachingAllocator.cpp, libc10_cuda.so, any
    function in namespace c10::, HIP's too). Not c10d (torch.distributed), whose frames name real work."""
    if frame.filename.endswith(".py"):
        return False
    return bool(_ALLOCATOR_FILES.search(frame.filename)) or cpp_function(frame.name).startswith("c10::")


def visible_frames(frames: tuple[Frame, ...] | list[Frame], show_all: bool) -> tuple[Frame, ...]:
    """The frames a stack is shown with: all of them, or its user frames (all where it has none, so that a
    stack of only PyTorch-internal or C++ frames still shows something)."""
    if show_all:
        return tuple(frames)
    return tuple(f for f in frames if is_user_frame(f)) or tuple(frames)


_FIRST, _LAST = itemgetter(0), itemgetter(-1)
LIST_CACHE_TRIAL = 1 << 16  # lists looked up by identity before the cache judges whether they are shared
LIST_CACHE_SIZE = 1 << 18  # list identities kept at most (a memory bound: ~20 MiB)


class StackInterner:
    """Maps frame lists to stack ids, deduplicating frames and stacks by content.

    Real snapshots share frame dicts between entries (each entry has its own list of them), so a first
    cache keyed by the identities of a list's first and last frame (and its length) finds a candidate stack,
    which is confirmed with a list comparison (identity first, then content: always correct). It switches
    itself off where frames are not shared objects (JSON files) and content keys are all that work. Lists met
    again by identity (`intern_many`) are known at once.
    """

    def __init__(self, values: Values | None = None) -> None:
        self.values = values or Values("frames", Limits.current(), 0)
        self.frames: list[Frame] = []
        self.stacks: list[tuple[int, ...]] = []
        self._frame_ids: dict[tuple[str, int, str], int] = {}
        self._stack_ids: dict[tuple[int, ...], int] = {}
        self._by_ends: dict[tuple[int, int, int], list[tuple[list, int]]] | None = {}
        self._recent: dict[tuple[int, int, int], tuple[list, int]] = {}  # each key's last matched bucket entry
        self._by_list: dict[int, int] | None = {id(None): NO_STACK}  # id of a frames list -> stack id
        self._list_lookups = 0
        self._list_hits = 0
        self._lookups = 0
        self._hits = 0

    def intern(self, frames: Any, where: str) -> int:
        """The stack id of a list of frame dicts (innermost first); `where` names it in errors."""
        if not frames:
            return NO_STACK
        if not isinstance(frames, list):
            raise self.values.fail(f"{where} has 'frames' that is {describe(frames)}, not a list")
        if len(frames) > self.values.limits.max_frames:
            raise self.values.limits.refuse(self.values.source, "max_frames",
                                            f"{where} has a stack of {len(frames):,} frames")
        cache = self._by_ends
        if cache is None:
            return self._intern_content(frames, where)
        key = (id(frames[0]), id(frames[-1]), len(frames))
        bucket = cache.get(key)
        if bucket is not None:
            for representative, sid in bucket:
                if representative is frames or representative == frames:
                    self._hits += 1
                    self._recent[key] = (representative, sid)  # a loop meets its stacks again soon
                    return sid
        sid = self._intern_content(frames, where)
        self._remember(key, frames, sid)
        return sid

    def intern_many(self, column: list, where: str) -> list[int]:
        """The stack ids of a column of frame lists (None or [] where an entry has none), in C-level passes.

        A list met before by identity has its id at once (PyTorch shares one list between an event's free
        request and completion, some writers one list per stack). That is sound within one parse: every list
        of a decoded file was alive at once, so no two are at the same address, even after some are freed.
        The rest are matched by their ends (`intern`'s cache), confirmed in one comparison of the whole column.
        """
        by_list = self._by_list
        if by_list is None:
            return self._intern_column(column, where)
        ids = list(map(id, column))
        out = list(map(by_list.get, ids))
        todo = [i for i, sid in enumerate(out) if sid is None]
        found = self._intern_column([column[i] for i in todo] if len(todo) < len(column) else column, where)
        for i, sid in zip(todo, found):
            out[i] = sid
            by_list[ids[i]] = sid
        self._list_lookups += len(column)
        self._list_hits += len(column) - len(todo)
        if self._list_lookups >= LIST_CACHE_TRIAL and self._list_hits * 20 < self._list_lookups:
            self._by_list = None  # lists are not shared here: stop keeping their ids
        elif len(by_list) > LIST_CACHE_SIZE:  # shared lists are near each other: the recent ones are enough
            by_list.clear()
            by_list[id(None)] = NO_STACK
        return out

    def _intern_column(self, column: list, where: str) -> list[int]:
        """Each list's candidate is the stack last matched with the same ends (first and last frame, length);
        one comparison of the whole column confirms them all where it can, else each is confirmed on its own."""
        if self._by_ends is None:
            return [self.intern(f, where) for f in column]
        try:
            keys: list = list(zip(map(id, map(_FIRST, column)), map(id, map(_LAST, column)), map(len, column)))
        except (TypeError, KeyError, IndexError):  # an empty stack, or not lists (intern() says what is wrong)
            try:
                keys = [(id(f[0]), id(f[-1]), len(f)) if f else None for f in column]
            except (TypeError, KeyError, IndexError):
                return [self.intern(f, where) for f in column]
        found = list(map(self._recent.get, keys))
        if None not in found and list(map(_FIRST, found)) == column:
            self._hits += len(column)
            return list(map(_LAST, found))
        miss = -2
        out = [NO_STACK if not f else c[1] if c is not None and (c[0] is f or c[0] == f) else miss
               for f, c in zip(column, found)]
        misses = [i for i, sid in enumerate(out) if sid == miss]
        self._hits += len(column) - len(misses)
        for i in misses:
            out[i] = self.intern(column[i], where)
        return out

    def _remember(self, key: tuple[int, int, int], frames: list, sid: int) -> None:
        self._lookups += 1
        if self._lookups == 20000 and self._hits < 2000:
            self._by_ends = None
            return
        self._by_ends.setdefault(key, []).append((frames, sid))  # type: ignore[union-attr]
        self._recent[key] = (frames, sid)

    def _intern_content(self, frames: list, where: str) -> int:
        return self.intern_keys(self._frame_key(f, where) for f in frames)

    def intern_keys(self, keys: Any) -> int:
        """The stack id of (filename, line, name) keys, innermost first (for stacks that are not frame dicts)."""
        key = tuple(self._frame_id(k) for k in keys)
        if not key:
            return NO_STACK
        sid = self._stack_ids.get(key)
        if sid is None:
            sid = len(self.stacks)
            self.stacks.append(key)
            self._stack_ids[key] = sid
        return sid

    def _frame_key(self, f: Any, where: str) -> tuple[str, int, str]:
        if isinstance(f, str):
            return ("", 0, self.values.text(f, f"{where} frame"))
        if not isinstance(f, dict):
            raise self.values.fail(f"{where} has a frame that is {describe(f)}, not a dict")
        text = self.values.text
        line = f.get("line")
        if line is not None:
            line = self.values.integer(line, f"{where} frame 'line'", -(1 << 64), 1 << 64)
        # PyTorch writes an unknown line of a C++ frame as SIZE_MAX: unknown, 0 here
        return (text(f.get("filename") or "", f"{where} frame 'filename'"),
                line if line is not None and INT64_MIN <= line <= INT64_MAX else 0,
                text(f.get("name") or "", f"{where} frame 'name'"))

    def _frame_id(self, key: tuple[str, int, str]) -> int:
        fid = self._frame_ids.get(key)
        if fid is None:
            fid = len(self.frames)
            self.frames.append(Frame(*key))
            self._frame_ids[key] = fid
        return fid

