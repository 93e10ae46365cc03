"""Where the memory was allocated, on the snapshot page: the allocation-site tables (sites shortened to fit
their card, the whole site in a tooltip), which peak the "at the peak" table shows, the icicle's stacks and
notes, and why a timeline is empty."""
from __future__ import annotations

import re
from collections import defaultdict

from dash import dash_table, dcc, html

from fragviz.model import BlockState, Frame, Segment
from fragviz.snapshot.frames import is_user_frame, visible_frames
from fragviz.ui import ids
from fragviz.base.units import format_bytes as fb

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


def sites_table(table_id: str) -> dash_table.DataTable:
    """A table of allocation sites: the site column takes what room is left and wraps; live bytes, bytes and
    blocks keep their width, so that they stay in sight however long the sites are."""
    fixed = {"live": "96px", "bytes": "112px", "blocks": "64px"}
    return dash_table.DataTable(
        id=table_id, columns=[{"name": "allocation site", "id": "site"}, {"name": "live", "id": "live"},
                              {"name": "bytes", "id": "bytes", "type": "numeric"},
                              {"name": "blocks", "id": "blocks", "type": "numeric"}],
        sort_action="native", page_size=12, tooltip_delay=300, tooltip_duration=None,
        css=[{"selector": "table", "rule": "table-layout: fixed; width: 100%;"},
             {"selector": "td.dash-cell[data-dash-column=site] .dash-cell-value",
              "rule": "overflow-wrap: anywhere; white-space: normal;"}],
        style_table={"width": "100%", "overflowX": "hidden"},
        style_cell={"textAlign": "left", "fontFamily": "inherit", "whiteSpace": "normal", "overflow": "hidden"},
        style_cell_conditional=[{"if": {"column_id": c}, "width": w, "minWidth": w, "maxWidth": w}
                                for c, w in fixed.items()] + [{"if": {"column_id": "site"}, "width": "auto"}])


def sites_rows(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """The table's rows (the site shortened) and their tooltips (the whole site)."""
    data = [{"site": short_site(r["site"]), "live": fb(r["bytes"]), "bytes": r["bytes"], "blocks": r["blocks"]}
            for r in rows]
    tips = [{"site": {"value": r["site"], "type": "text"}} for r in rows]
    return data, tips


def peak_info(sid: int, device: int, event: int, n: int, allocated: int) -> html.Div:
    """What the "at the peak" table shows: the peak of allocated memory (the timeline's "allocated" line: live
    blocks, frees still waiting for their streams included), its event, and a link that selects that event."""
    if n == 0:
        return html.P("This device has no trace: the table shows the sites of the only state recorded, the "
                      f"final one ({fb(allocated)} allocated).", className="fv-hint")
    return html.P(className="fv-hint", children=[
        f"The peak of allocated memory on device {device}: {fb(allocated)} ({allocated:,} bytes) after event "
        f"{event} of {n}. ",
        dcc.Link(f"Go to event {event}", id=ids.SITES_PEAK_JUMP, href=f"/snapshots/{sid}?device={device}&event={event}"),
    ])


RECORD_HINT = ("torch.cuda.memory._record_memory_history(max_entries=100000, context='all', stacks='all') before "
               "the code runs, then torch.cuda.memory._dump_snapshot('snapshot.pickle')")


def no_trace_note(n: int, segments_list: bool) -> html.P | None:
    """Why the timeline is empty (no trace) or all but empty (one event); None where it has a history."""
    if n == 0 and segments_list:
        return html.P("This file is a list of segments (torch.cuda.memory_snapshot()): it has no trace, so there "
                      "is no memory over time to draw; only the state when it was taken is shown. For a timeline, "
                      f"record with {RECORD_HINT}.", className="fv-note")
    if n == 0:
        return html.P("This snapshot has no trace: it was recorded without torch.cuda.memory._record_memory_history, "
                      "or with enabled='state' (stacks of live blocks, no history of events). There is no memory over "
                      "time to draw; only the final state is shown. For a timeline, record with "
                      f"{RECORD_HINT}.", className="fv-note")
    if n == 1:
        return html.P("This snapshot's trace holds a single event: it was most likely recorded with enabled='state' "
                      "or max_entries=1, which keep only the last event. Events 0 and 1 are the states before and "
                      "after it.", className="fv-note")
    return None


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


def icicle_note(segments: list[Segment], weights: dict[tuple[Frame, ...], int]) -> html.P | None:
    """Why the icicle is not drawn, or what it leaves out: live blocks without a recorded stack."""
    live = [b for s in segments for b in s.blocks if b.state is not BlockState.INACTIVE]
    bare = [b for b in live if b.stack < 0]
    if not live:
        return html.P("Nothing is allocated at this event: no live block to place on a stack.", className="fv-note")
    if not weights:
        return html.P([
            f"None of the {len(live)} live blocks ({fb(sum(b.size for b in live))}) has a recorded stack, so there "
            "is nothing to draw here. PyTorch keeps a block's stack only when it was allocated while memory history "
            "was recorded with a context (context='state', 'alloc' or 'all'); blocks allocated before recording "
            "started have none. Record with ", html.Code(RECORD_HINT), "."], className="fv-note")
    if bare:
        return html.P(f"{len(bare)} of the {len(live)} live blocks ({fb(sum(b.size for b in bare))}) have no recorded "
                      "stack (allocated before history was recorded) and are not drawn.", className="fv-hint")
    return None
