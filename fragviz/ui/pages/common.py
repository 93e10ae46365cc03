"""Bits every page uses: the header, error panels, URL query parsing, byte formatting."""
from __future__ import annotations

from urllib.parse import parse_qs, urlencode

from dash import dcc, html

from fragviz.units import format_bytes

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


def card(title: str, *children, id: str | None = None, class_name: str = "") -> html.Section:
    kwargs = {"id": id} if id else {}
    return html.Section(className=f"fv-card {class_name}", children=[html.H3(title), *children], **kwargs)
