"""Bits every page uses: the header, error panels, URL query parsing, byte formatting, an OOM verdict."""
from __future__ import annotations

from typing import Callable
from urllib.parse import parse_qs, urlencode

from dash import dcc, html

from fragviz.base.errors import UsageError
from fragviz.doctor import Diagnosis
from fragviz.store.records import Summary
from fragviz.base.units import format_bytes

fb = format_bytes


def header() -> html.Header:
    return html.Header(className="fv-header", children=[
        dcc.Link("fragviz", href="/", className="fv-brand"),
        html.Span("CUDA caching-allocator fragmentation, explained", className="fv-tagline"),
        html.Nav([dcc.Link("Library", href="/"), dcc.Link("Live", href="/live"), dcc.Link("Compare", href="/compare"),
                  dcc.Link("Doctor", href="/doctor")]),
    ])


def error_panel(message: str) -> html.Div:
    return html.Div(className="fv-error", role="alert", children=[html.Strong("Cannot show this: "), message])


def error_page(message: str) -> html.Div:
    """A page that cannot be shown: the header, and why."""
    return html.Div([header(), html.Main(className="fv-main", children=[error_panel(message)])])


def query(search: str | None) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs((search or "").lstrip("?")).items()}


def query_int(search: str | None, key: str) -> int | None:
    value = query(search).get(key)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def make_search(**params) -> str:
    return "?" + urlencode({k: v for k, v in params.items() if v is not None})


def path_sid(pathname: str | None, prefix: str) -> int:
    """The snapshot id in a page's path (/snapshots/<id>, /whatif/<id>); a UsageError saying so where it is no id."""
    part = (pathname or "")[len(prefix):].split("/")[0]
    if not part.isdigit():
        raise UsageError(f"'{part[:40]}' is not a snapshot id: a snapshot's address is {prefix}<number>")
    return int(part)


def sid_of(pathname: str | None) -> int | None:
    """The snapshot id of a snapshot or what-if page's path (/snapshots/<id>, /whatif/<id>); None elsewhere."""
    parts = (pathname or "").strip("/").split("/")
    if len(parts) >= 2 and parts[0] in ("snapshots", "whatif") and parts[1].isdigit():
        return int(parts[1])
    return None


def opening_device(devices: list[int], summary: Summary, wanted: int | None) -> int:
    """The device a page shows: `wanted` where the snapshot has it; else the device of its first OOM (the lowest
    device that records one, as the doctor lists them); else its first device (0 when it has none)."""
    if wanted in devices:
        return wanted
    with_oom = [d for d in devices if (found := summary.device(d)) is not None and found.ooms]
    return with_oom[0] if with_oom else (devices[0] if devices else 0)


def card(title: str, *children, id: str | None = None, class_name: str = "") -> html.Section:
    kwargs = {"id": id} if id else {}
    return html.Section(className=f"fv-card {class_name}", children=[html.H3(title), *children], **kwargs)


# (figure, label): the figures a verdict card lists, where the diagnosis has them
_OOM_FIGURES: tuple[tuple[Callable[[Diagnosis], int | None], str], ...] = (
    (lambda o: o.requested_bytes, "requested"), (lambda o: o.reserved_bytes, "reserved"),
    (lambda o: o.allocated_bytes, "allocated"), (lambda o: o.non_releasable_bytes, "non-releasable"),
    (lambda o: o.largest_free_block, "largest request the cache could serve"),
    (lambda o: o.device_free_bytes, "device free"), (lambda o: o.device_total_bytes, "device total"))


def verdict_card(o: Diagnosis, title: str, link=None) -> html.Div:
    """One OOM diagnosis: its figures, what limits it, advice, notes and what-ifs, under `title`; `link` (to the
    OOM's state, say) under the title."""
    figs = [(label, fb(figure(o))) for figure, label in _OOM_FIGURES if figure(o) is not None]
    if o.fragmentation is not None:  # of the snapshot's state read, with the non-releasable bytes
        figs.insert(3, ("fragmentation", f"{o.fragmentation:.1%} of reserved"))
    return html.Div(className=f"fv-verdict fv-{o.verdict}", children=[
        html.H4(title), link,
        html.Dl([c for label, v in figs for c in (html.Dt(label), html.Dd(v))]),
        html.Ul([html.Li(w) for w in o.warnings], className="fv-warnings") if o.warnings else None,
        html.Ul([html.Li(a) for a in o.advice]),
        html.Ul([html.Li(t) for t in o.notes], className="fv-notes") if o.notes else None,
        html.Ul([html.Li(w.summary) for w in o.what_if], className="fv-whatif") if o.what_if else None,
    ])
