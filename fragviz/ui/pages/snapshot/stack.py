"""The snapshot page's stack panel: the stack of the last thing clicked, a block of the segment map or a band
of the allocations, PyTorch-internal and C++ frames hidden unless asked for."""
from __future__ import annotations

import dash
from dash import Input, Output, State, ctx as dash_ctx, dcc, html, no_update

from fragviz.model import Block, Frame
from fragviz.snapshot.frames import is_user_frame, visible_frames
from fragviz.ui import ids
from fragviz.ui.context import AppContext
from fragviz.ui.pages.common import card, fb
from fragviz.ui.pages.snapshot.usage import allocation_panel
from fragviz.ui.pages.snapshot.view import View, view_of


def stack_card() -> html.Section:
    return card("Stack of the clicked block or allocation",
                dcc.Checklist(id=ids.STACK_ALL, options=[{"label": " show PyTorch-internal and C++ frames",
                                                          "value": "all"}], value=[]),
                html.Div(id=ids.STACK_TRACE, className="fv-stack",
                         children=html.P("Click a block in the segment map or a band of the allocations above.")),
                class_name="fv-narrow")


def clicked_source(trigger, block_click: dict | None, band_click: dict | None, source: dict | None) -> dict | None:
    """What the panel shows: the block or band just clicked, else what it showed (None: nothing to show)."""
    if trigger == ids.BLOCK_CLICK:
        return {"kind": "block", **{k: block_click[k] for k in ("device", "event", "address")}} if block_click else None
    if trigger == ids.BAND_CLICK:
        return {"kind": "allocation", "key": band_click["row"]} if band_click else None
    return source or None


def stack_view(ctx: AppContext, view: View, source: dict, show_all: bool) -> html.Div:
    """The panel for a block (the one at its address in the state after its event) or an allocation (a row of
    the bands)."""
    if source["kind"] == "allocation":
        head, stack = allocation_panel(ctx, view.sid, view.device, int(source["key"]))
    else:
        block = block_at(ctx, view.sid, int(source["device"]), int(source["event"]), int(source["address"]))
        if block is None:
            return html.P("That block is not in the state any more: click it again.")
        head = html.P(f"{block.state.value} block of {fb(block.size)} at {block.address:#x}"
                      + (f", requested {fb(block.requested_size)}" if block.requested_size else ""))
        stack = block.stack
    return html.Div([head, frames_view(ctx.views.frames(view.sid, stack), show_all)])


def block_at(ctx: AppContext, sid: int, device: int, event: int, address: int) -> Block | None:
    """The block at `address` in the state of `device` after `event` events; None where there is none."""
    segments, _, _ = ctx.views.state(sid, device, event)
    return next((b for s in segments if s.address <= address < s.address + s.total_size
                 for b in s.blocks if b.address == address), None)


def frames_view(frames: tuple[Frame, ...], show_all: bool) -> html.Div:
    if not frames:
        return html.P("No stack was recorded for this block (record history with context='all').")
    shown = visible_frames(frames, show_all)
    hidden = len(frames) - len(shown)
    lines = [html.Li([html.Code(f.name), html.Span(f"  {f.filename}:{f.line}", className="fv-file-line")],
                     className="fv-user" if is_user_frame(f) else "") for f in shown]
    note = html.P(f"{hidden} PyTorch-internal and C++ frames hidden.", className="fv-hint") if hidden else None
    return html.Div([html.Ol(lines, className="fv-frames"), note])


def register(app: dash.Dash, ctx: AppContext) -> None:
    @app.callback(Output(ids.STACK_TRACE, "children"), Output(ids.STACK_SOURCE, "data"),
                  Input(ids.BLOCK_CLICK, "data"), Input(ids.BAND_CLICK, "data"),
                  Input(ids.STACK_ALL, "value"), State(ids.STACK_SOURCE, "data"), State(ids.SNAPSHOT_URL, "pathname"),
                  State(ids.SNAPSHOT_URL, "search"), prevent_initial_call=True)
    def show_stack(block_click, band_click, show_all, source, pathname, search):
        # The panel shows the last thing clicked: a block of the segment map or a band of the allocation view
        source = clicked_source(dash_ctx.triggered_id, block_click, band_click, source)
        if not source:
            return no_update, no_update
        return stack_view(ctx, view_of(ctx, pathname, search), source, "all" in (show_all or [])), source
