"""Allocation sites and stacks as the snapshot page shows them: sites shortened to fit their table (the whole
site goes in a tooltip), and live bytes by stack filtered as the stack panel filters frames. No Dash here."""
from __future__ import annotations

import re
from collections import defaultdict

from fragviz.base.units import format_bytes
from fragviz.model import Frame
from fragviz.snapshot.frames import is_user_frame, visible_frames

SITE_CHARS = 64  # a shown site is at most this long: about two lines of the table's site column
PACKAGE_ROOTS = ("site-packages", "dist-packages")
_SITE = re.compile(r"^(?P<path>.*?):(?P<line>\d+) (?P<name>.*)$", re.S)


def short_site(site: str, limit: int = SITE_CHARS) -> str:
    """`site` ("path:line name", as usage.sites.site_label writes it) at most `limit` characters long, shortened in
    the middle where it must: the path from its package root (site-packages, a torchinductor cache) or its last
    folders with "…/" for the rest, long file and function names cut in their middle. Short sites are unchanged."""
    if len(site) <= limit:
        return site
    m = _SITE.match(site)
    if m is None:
        return _middle(site, limit)
    room = limit - len(m["path"]) - len(m["line"]) - 2  # what a short path leaves to the name
    name = _short_name(m["name"], max(limit // 2, room))
    tail = f":{m['line']} {name}"
    return _short_path(m["path"], max(limit - len(tail), 12)) + tail


def _short_path(path: str, limit: int) -> str:
    sep = "\\" if "\\" in path and "/" not in path else "/"
    *dirs, file = path.split(sep)
    if not dirs:
        return _middle(file, limit)
    file = _middle(file, min(max(limit // 2, 28), limit - 2))  # a generated (hashed) name leaves room for folders
    for text in _path_candidates(dirs, file, sep):
        if len(text) <= limit:
            return text
    return "…" + sep + file


def _path_candidates(dirs: list[str], file: str, sep: str):
    """Shortenings of a path, the most telling first: from its package root (the root and up to two folders
    below it kept), else its innermost folders; "…" for what is left out."""
    root = next((i for i, d in enumerate(dirs) if d in PACKAGE_ROOTS or d.startswith("torchinductor_")), None)
    if root is not None:
        for keep in (3, 2, 1):
            head, rest = dirs[root:root + keep], dirs[root + keep:]
            for inner in range(len(rest), -1, -1):
                gap = ["…"] if inner < len(rest) else []
                yield sep.join([*(["…"] if root else []), *head, *gap, *rest[len(rest) - inner:], file])
    yield sep.join([*dirs, file])
    for inner in range(len(dirs) - 1, -1, -1):
        yield sep.join(["…", *dirs[len(dirs) - inner:], file])


def _short_name(name: str, limit: int) -> str:
    """A function name; a C++ one without its parameter list and outer namespaces where it is long."""
    if len(name) <= limit:
        return name
    if "(" in name:
        name = name[:name.index("(")] + "(…)"
    if len(name) > limit and "::" in name:
        name = "…::" + "::".join(name.split("::")[-2:])
    return name if len(name) <= limit else _middle(name, limit)


def _middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    keep = max(limit - 1, 2)
    return text[:(keep + 1) // 2] + "…" + text[len(text) - keep // 2:]


def sites_rows(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """The table's rows (the site shortened) and their tooltips (the whole site)."""
    data = [{"site": short_site(r["site"]), "live": format_bytes(r["bytes"]), "bytes": r["bytes"], "blocks": r["blocks"]}
            for r in rows]
    tips = [{"site": {"value": r["site"], "type": "text"}} for r in rows]
    return data, tips



# Where the stack panel would show a stack with no user frame whole, the icicle shows one box for them all: a
# chain of unwinder and thread-start frames at its first level says nothing about the program.
INTERNAL_ONLY = Frame("", 0, "(only PyTorch-internal and C++ frames)")


def icicle_weights(weights: dict[tuple[Frame, ...], int], show_all: bool) -> dict[tuple[Frame, ...], int]:
    """Live bytes by stack with the stack panel's filter (visible_frames), stacks equal once filtered added
    together; filtered, the stacks without a user frame are one, INTERNAL_ONLY."""
    out: dict[tuple[Frame, ...], int] = defaultdict(int)
    for frames, size in weights.items():
        shown = visible_frames(frames, show_all)
        out[shown if show_all or any(map(is_user_frame, shown)) else (INTERNAL_ONLY,)] += size
    return dict(out)
