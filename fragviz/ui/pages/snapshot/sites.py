"""Where the memory was allocated, on the snapshot page: the allocation sites at the event and at the peak
(sites shortened to fit their card, the whole site in a tooltip), which peak that is, and the icicle of live
bytes by stack with why it is not drawn or what it leaves out."""
from __future__ import annotations

import dash
from dash import Input, Output, State, dash_table, dcc, html, no_update
from dash.exceptions import PreventUpdate

from fragviz.model import BlockState, Frame, Segment
from fragviz.ui import ids
from fragviz.ui.context import AppContext
from fragviz.ui.data.sites import icicle_weights, sites_rows
from fragviz.ui.figures.stacks import icicle_figure
from fragviz.ui.pages.common import card, fb
from fragviz.ui.pages.snapshot.timeline import RECORD_HINT
from fragviz.ui.pages.snapshot.view import View, page_sid, view_of


def sites_cards() -> list[html.Section]:
    return [card("Top allocation sites at the event", sites_table(ids.SITES_NOW), class_name="fv-sites"),
            card("Top allocation sites at the peak", dcc.Loading([html.Div(id=ids.SITES_PEAK_INFO),
                                                                  sites_table(ids.SITES_PEAK)]), class_name="fv-sites")]


def icicle_card() -> html.Section:
    return card("Memory by stack at the event",
                html.P("Stacks as the block's stack above shows them: PyTorch-internal and C++ frames hidden "
                       "unless its box is ticked; the frames all stacks share folded into the top box.",
                       className="fv-hint"), html.Div(id=ids.ICICLE_NOTE),
                dcc.Graph(id=ids.ICICLE, config={"displaylogo": False}))


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


def sites_at(ctx: AppContext, view: View, show_all: bool) -> tuple:
    """The sites table at the view's event (rows, tooltips) and the icicle: its figure, style and note."""
    segments, _, _ = ctx.views.state(view.sid, view.device, view.event)
    sites, tips = sites_rows(ctx.views.top_sites(view.sid, segments))
    weights = icicle_weights(ctx.views.stack_weights(view.sid, segments, limit=60), show_all)
    fig = icicle_figure(weights, max_depth=8) if weights else {}
    return sites, tips, fig, {} if weights else {"display": "none"}, icicle_note(segments, weights)


def sites_at_peak(ctx: AppContext, sid: int, device: int) -> tuple:
    """The sites table at the device's peak (rows, tooltips), and what that peak is."""
    peak = ctx.views.peak_event(sid, device)
    segments, fig, _ = ctx.views.state(sid, device, peak)
    n = ctx.reader.trace_length(sid, device)
    return *sites_rows(ctx.views.top_sites(sid, segments)), peak_info(sid, device, peak, n, fig.allocated_bytes)


def register(app: dash.Dash, ctx: AppContext) -> None:
    # The sites table and the icicle follow each state a moment after it is drawn (the browser draws one thing
    # at a time): assets/state_view.js sets SITES_TRIGGER.
    @app.callback(Output(ids.SITES_NOW, "data"), Output(ids.SITES_NOW, "tooltip_data"), Output(ids.ICICLE, "figure"),
                  Output(ids.ICICLE, "style"), Output(ids.ICICLE_NOTE, "children"), Input(ids.SITES_TRIGGER, "data"),
                  Input(ids.STACK_ALL, "value"), State(ids.SNAPSHOT_URL, "pathname"), State(ids.SNAPSHOT_URL, "search"))
    def draw_sites(drawn, show_all, pathname, search):
        if not drawn:  # not before the state is drawn
            raise PreventUpdate
        # The state drawn's sites (its device and event); the icicle follows the stack panel's frame filter too
        view = view_of(ctx, pathname, search)._replace(device=drawn["device"], event=drawn["event"])
        return sites_at(ctx, view, "all" in (show_all or []))

    @app.callback(Output(ids.SITES_PEAK, "data"), Output(ids.SITES_PEAK, "tooltip_data"),
                  Output(ids.SITES_PEAK_INFO, "children"), Input(ids.STATE_DRAWN, "data"),
                  State(ids.SNAPSHOT_URL, "pathname"))
    def peak_sites(drawn, pathname):
        # once the device's first state is drawn (assets/state_view.js)
        sid = page_sid(pathname)
        if sid is None or not drawn:
            return no_update, no_update, no_update
        return sites_at_peak(ctx, sid, drawn["device"])
