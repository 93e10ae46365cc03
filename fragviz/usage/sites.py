"""Allocation sites: the frame of a stack a user would look at, and the sites that hold the most live bytes.

A site is one frame of an allocation's stack (innermost call first), written "filename:line name". It is the
first of these found:

1. the innermost user frame: Python outside torch's package and the standard library (`is_user_frame`);
2. the innermost other Python frame that is not internal: torch's own Python code;
3. the innermost frame of the autograd engine's work (namespace `torch::autograd`, but not `VariableType`, which
   every forward op passes through): backward runs on the engine's own threads, with no Python frame, and its
   node (`torch::autograd::generated::MmBackward0::apply`) or formula names the op whose gradient it computes;
4. the innermost ATen operator entry (`at::_ops::<op>::call`): the op that allocated;
5. the innermost frame that is neither internal (unwinder, interpreter, dispatcher boxing: `is_internal`) nor the
   allocator's own (the caching allocator and c10: `is_allocator_frame`).

So a site is never one of the allocator's frames (`DeviceCachingAllocator::malloc`, which heads every stack
recorded with stacks='all'): a stack of allocator and internal frames only is ONLY_ALLOCATOR_SITE.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from fragviz.model import Frame, Segment
from fragviz.snapshot.frames import cpp_function, is_allocator_frame, is_internal, is_user_frame

NO_STACK_SITE = "(no stack recorded)"
ONLY_ALLOCATOR_SITE = "(only allocator and internal frames)"

_AUTOGRAD = re.compile(r"^torch::autograd::(?!VariableType::)")
_OPERATOR = re.compile(r"^at::_ops::\w+::call$")


def _is_python(frame: Frame) -> bool:
    return frame.filename.endswith(".py")


def _is_framework(frame: Frame) -> bool:
    """A frame that may name a site at all: neither internal nor the allocator's."""
    return not is_internal(frame) and not is_allocator_frame(frame)


def _cpp_matching(pattern: re.Pattern) -> Callable[[Frame], bool]:
    return lambda f: not _is_python(f) and _is_framework(f) and bool(pattern.match(cpp_function(f.name)))


# The preferences of the module docstring, in order
_PREFERENCES: tuple[Callable[[Frame], bool], ...] = (
    is_user_frame,
    lambda f: _is_python(f) and not is_internal(f),
    _cpp_matching(_AUTOGRAD),
    _cpp_matching(_OPERATOR),
    _is_framework,
)


def site_frame(frames: Sequence[Frame]) -> Frame | None:
    """The frame that names a stack's allocation site (see the module docstring); None if only allocator or
    internal frames."""
    for preferred in _PREFERENCES:
        chosen = next((f for f in frames if preferred(f)), None)
        if chosen is not None:
            return chosen
    return None


def site_label(frames: Sequence[Frame]) -> str:
    """The allocation site of a stack (innermost frame first) as "filename:line name"; NO_STACK_SITE for an
    empty stack, ONLY_ALLOCATOR_SITE where no frame is the user's or the framework's."""
    if not frames:
        return NO_STACK_SITE
    chosen = site_frame(frames)
    if chosen is None:
        return ONLY_ALLOCATOR_SITE
    return f"{chosen.filename}:{chosen.line} {chosen.name}"


@dataclass(frozen=True)
class SiteTotal:
    """Live bytes and blocks of one allocation site in a state."""

    site: str
    bytes: int
    blocks: int

    def as_dict(self) -> dict[str, Any]:
        return {"site": self.site, "bytes": self.bytes, "blocks": self.blocks}


def top_sites(segments: Iterable[Segment], frames_of: Callable[[int], Sequence[Frame]],
              limit: int) -> list[SiteTotal]:
    """The `limit` sites holding the most live bytes (active blocks, pending frees included) in a state: most
    bytes first, ties by site. `frames_of(stack)` gives a stack's frames; each stack is labelled once."""
    labels: dict[int, str] = {}
    totals: dict[str, list[int]] = {}
    for seg in segments:
        for b in seg.blocks:
            if not b.state.is_active:
                continue
            site = labels.get(b.stack)
            if site is None:
                site = labels[b.stack] = site_label(frames_of(b.stack)) if b.stack >= 0 else NO_STACK_SITE
            entry = totals.setdefault(site, [0, 0])
            entry[0] += b.size
            entry[1] += 1
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1][0], kv[0]))[:limit]
    return [SiteTotal(site, size, count) for site, (size, count) in ranked]
