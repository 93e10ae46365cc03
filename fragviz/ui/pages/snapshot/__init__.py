"""The snapshot page: /snapshots/<id>?device=N&event=K. Every state of the view is in the URL.

Its parts, each with the components it draws and their callbacks: view (the URL read as a view, the timeline
drawn), state (the selected state: segment map, gaps, the line of figures), timeline, usage (what holds memory),
stack, sites, device (what follows the device), oom, export."""
from __future__ import annotations

import dash
from dash import dcc, html

from fragviz.base.errors import FragvizError, public_message
from fragviz.ui import ids
from fragviz.ui.context import AppContext
from fragviz.ui.pages.common import card, error_page, fb, header, opening_device
from fragviz.ui.pages.snapshot import device, export, oom, sites, stack, state, timeline, usage
from fragviz.ui.pages.snapshot.view import PATH, view_of

__all__ = ["PATH", "layout", "register"]
PARTS = (export, oom, device, state, sites, timeline, stack, usage)


def layout(ctx: AppContext, pathname: str, search: str | None = None) -> html.Div:
    try:
        view = view_of(ctx, pathname, search)
        row = ctx.reader.snapshot_row(view.sid)
        meta = ctx.reader.snapshot_meta(view.sid)
    except FragvizError as exc:
        return error_page(public_message(exc, ctx.reader.records.path))
    if not row.devices:
        return empty_page(row, meta)
    fmt = meta["format"]
    return html.Div([
        dcc.Location(id=ids.SNAPSHOT_URL, refresh="callback-nav"), dcc.Store(id=ids.SITES_TRIGGER),
        dcc.Store(id=ids.STACK_SOURCE), dcc.Store(id=ids.SELECTED_EVENT), dcc.Store(id=ids.BLOCK_CLICK),
        dcc.Store(id=ids.STATE_DRAWN),
        state.state_source(ctx, view.sid, row.devices, opening_device(row.devices, row.summary, None)), header(),
        html.Main(className="fv-main", children=[
            html.H2(row.name.rsplit("/", 1)[-1], title=row.name),
            html.P(device.sub_line(fmt, row.file_size, view.n, view.device), id=ids.SNAPSHOT_SUB, className="fv-sub"),
            state.controls(row.devices, view),
            timeline.timeline_card(ctx, view, fmt),
            *usage.cards(view.n),
            html.Div(className="fv-row", children=[state.segments_card(), stack.stack_card()]),
            html.Div(className="fv-row", children=[state.gaps_card(), oom.oom_card()]),
            html.Div(className="fv-row", children=sites.sites_cards()),
            sites.icicle_card(),
            export.export_card(ctx, view.sid, view.device, view.event),
            card("Allocator settings and capture health", health(meta), id=ids.HEALTH),
        ]),
    ])


def empty_page(row, meta: dict) -> html.Div:
    """A snapshot with no device at all: nothing to select or draw, so no controls; what it holds and why."""
    fmt = meta["format"]
    return html.Div([header(), html.Main(className="fv-main", children=[
        html.H2(row.name.rsplit("/", 1)[-1], title=row.name),
        html.P(f"format {fmt.generation} ({fmt.torch_estimate}), {fmt.encoding} · {fb(row.file_size)}",
               className="fv-sub"),
        card("Memory over the trace", html.Div(id=ids.TIMELINE_NOTE, children=html.P(
            "This snapshot is empty: it holds no segment and no trace event on any device. It was taken before "
            "anything was allocated on a CUDA device (or after torch.cuda.empty_cache() returned every segment) "
            "with no memory history recorded. There is nothing to draw."))),
        card("Allocator settings and capture health", health(meta), id=ids.HEALTH),
    ])])


def health(meta: dict) -> html.Div:
    settings = meta["allocator_settings"]
    conf = (settings or {}).get("PYTORCH_CUDA_ALLOC_CONF") or "(defaults)"
    items = [html.Li(w) for w in meta["warnings"]] or [html.Li("No capture problems found.")]
    shown = {k: v for k, v in (settings or {}).items() if k != "roundup_power2_divisions"}
    return html.Div([
        html.P(["PYTORCH_CUDA_ALLOC_CONF: ", html.Code(conf)] if settings else
               "This snapshot records no allocator settings (PyTorch before about 2.3): defaults are assumed."),
        html.Ul([html.Li(f"{k}: {v}") for k, v in shown.items()]) if shown else None,
        html.H4("Capture health"), html.Ul(items, className="fv-warnings"),
    ])


def register(app: dash.Dash, ctx: AppContext) -> None:
    for part in PARTS:
        part.register(app, ctx)
