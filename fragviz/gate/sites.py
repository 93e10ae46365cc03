"""The allocation sites a gate compares, and how a candidate's sites are matched to its baseline's.

A site is the exact line of an allocation's site frame (`fragviz.usage.sites.site_frame`: the first user frame,
where the stack has one): its file and line, with its function for reading. Live bytes are summed by that line, so
three `nn.Linear` lines of one `__init__` are three sites, and a leak is named at its own line, not at the line of
most bytes in its function.

Each site also carries what survives an edit, for matching it to the baseline's:

- its scope (`site_key`): the file's last two path components (another checkout directory is the same file) and its
  function, where a comprehension, lambda or generator expression counts as the function that runs it (the next
  frame out in the same file): Python 3.11 runs a list comprehension in a frame of its own (`<listcomp>`), 3.12
  inlines it into its function;
- the code of its line (`line_code`): read when the summary is made and kept in it, because the baseline's checkout
  is gone when a candidate is judged.

A candidate's site is the baseline site of its scope with the same code, the nearest line first (lines added above
it moved it); else the nearest line of its scope not yet matched (an allocation moved into a comprehension or a
lambda, or its line edited); else it is new. Each baseline site matches one candidate site at most.
"""
from __future__ import annotations

import io
import linecache
import os
import stat
import tokenize
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from fragviz.model import Frame
from fragviz.snapshot.frames import is_user_frame
from fragviz.usage.sites import NO_STACK_SITE, site_frame, site_label

SITES_KEPT = 50  # sites per device in a summary: the growth of a site past these is not told apart
# frames that run code of the function around them: a site in one is that function's
ANONYMOUS = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>", "<lambda>"})
MAX_SOURCE_BYTES = 8 * 1024 * 1024  # a source file read for a line's code; a larger "source" is not read


@dataclass(frozen=True)
class SiteBytes:
    """Live bytes of one allocation site at the reserved peak."""

    key: str  # the site's scope: file (last two path components) and function (site_key)
    site: str  # "filename:line function", as the dashboard labels it
    frame: str | None  # the innermost user frame (Python outside torch), None when the stack has none
    bytes: int
    line: int | None = None  # the site frame's line; None without one, or in a summary of version 1
    code: str | None = None  # the line's source, normalised (line_code); None where it could not be read

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "site": self.site, "frame": self.frame, "line": self.line, "code": self.code,
                "bytes": self.bytes}


@dataclass(frozen=True)
class _Place:
    """Where a stack allocates: its site's scope, label and line, and the file the line is in."""

    key: str
    site: str
    frame: str | None
    line: int | None
    filename: str | None


def sites_of(segments: Iterable, frames_of: Callable[[int], Sequence[Frame]],
             limit: int = SITES_KEPT) -> tuple[SiteBytes, ...]:
    """Live bytes by site in a state (active blocks, pending frees included), most bytes first, ties by site; the
    code of each site kept is read from its file (line_code)."""
    by_stack: dict[int, int] = {}
    for seg in segments:
        for b in seg.blocks:
            if b.state.is_active:
                by_stack[b.stack] = by_stack.get(b.stack, 0) + b.size
    totals: dict[_Place, int] = {}
    for stack, size in by_stack.items():
        place = place_of(frames_of(stack) if stack >= 0 else [])
        totals[place] = totals.get(place, 0) + size
    ranked = sorted(totals, key=lambda p: (-totals[p], p.site, p.key))[:limit]
    return tuple(SiteBytes(p.key, p.site, p.frame, totals[p], p.line,
                           None if p.filename is None or p.line is None else line_code(p.filename, p.line))
                 for p in ranked)


def place_of(frames: Sequence[Frame]) -> _Place:
    chosen = site_frame(frames) if frames else None
    key = _scope(frames, chosen)
    if chosen is None:
        return _Place(key, site_label(frames), None, None, None)
    user = f"{chosen.filename}:{chosen.line} {chosen.name}" if is_user_frame(chosen) else None
    return _Place(key, site_label(frames), user, chosen.line, chosen.filename)


def site_key(frames: Sequence[Frame]) -> str:
    """The scope of a stack's site: its frame's last two path components and function (a comprehension's, lambda's
    or generator expression's: the function that runs it). The same site in two checkouts, or after lines moved
    above it, has the same key."""
    return _scope(frames, site_frame(frames) if frames else None)


def _scope(frames: Sequence[Frame], chosen: Frame | None) -> str:
    """site_key, with the site frame already found."""
    if not frames:
        return NO_STACK_SITE
    if chosen is None:
        return site_label(frames)
    parts = chosen.filename.replace("\\", "/").split("/")
    return f"{'/'.join(parts[-2:])} {scope_function(frames, frames.index(chosen))}"


def scope_function(frames: Sequence[Frame], index: int) -> str:
    """The function of frame `index`, or for a comprehension, lambda or generator expression, that of the next
    frame out in the same file that is none of these (its own name where there is none)."""
    frame = frames[index]
    if frame.name not in ANONYMOUS:
        return frame.name
    outer = (f.name for f in frames[index + 1:] if f.filename == frame.filename and f.name not in ANONYMOUS)
    return next(outer, frame.name)


# -- the code of a line -------------------------------------------------------------------------------------------

def line_code(filename: str, line: int) -> str | None:
    """The code of a line of a Python source file on this machine (normalise_code), or None: not a `.py` file that
    is a regular file here of at most MAX_SOURCE_BYTES (a snapshot's frames may name any path: a device or a FIFO
    is never opened), no such line, or a blank one."""
    if line <= 0 or not filename.endswith(".py"):
        return None
    try:
        info = os.stat(filename)
    except (OSError, ValueError):  # ValueError: a NUL in the name
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SOURCE_BYTES:
        return None
    linecache.checkcache(filename)  # a file edited since this process last read it is read again
    return normalise_code(linecache.getline(filename, line)) or None


def normalise_code(text: str) -> str:
    """A line's code as two runs compare it: without its comment, and with each run of blanks one space."""
    return " ".join(_without_comment(text).split())


def _without_comment(text: str) -> str:
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                return text[:token.start[1]]
    except (tokenize.TokenError, SyntaxError):  # a line of a longer statement: its tokens up to the error are read
        pass
    return text


# -- matching a candidate's sites to the baseline's -----------------------------------------------------------------

def match_sites(now: Sequence[SiteBytes], before: Sequence[SiteBytes]) -> list[tuple[SiteBytes, SiteBytes | None]]:
    """Each site of `now` with the site of `before` it is (None: a new site), as the module docstring says."""
    pairs: dict[int, int] = {}
    for same_code in (True, False):
        options = sorted((_distance(a, b), i, j) for i, a in enumerate(now) for j, b in enumerate(before)
                         if a.key == b.key and (not same_code or (a.code is not None and a.code == b.code)))
        taken = set(pairs.values())
        for _distance_, i, j in options:
            if i not in pairs and j not in taken:
                pairs[i] = j
                taken.add(j)
    return [(site, before[pairs[i]] if i in pairs else None) for i, site in enumerate(now)]


def _distance(a: SiteBytes, b: SiteBytes) -> int:
    return abs((a.line or 0) - (b.line or 0))


def by_function(sites: Sequence[SiteBytes]) -> tuple[SiteBytes, ...]:
    """The sites merged by scope, as a summary of version 1 holds them: each named by its line of most bytes, and
    without a line or code of its own."""
    merged: dict[str, list[SiteBytes]] = {}
    for s in sites:
        merged.setdefault(s.key, []).append(s)
    out = []
    for key, group in merged.items():
        top = max(group, key=lambda s: (s.bytes, s.site))
        out.append(SiteBytes(key, top.site, top.frame, sum(s.bytes for s in group)))
    return tuple(sorted(out, key=lambda s: (-s.bytes, s.site)))
