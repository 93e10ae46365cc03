"""The callbacks of the snapshot page's views of what holds memory (the cards are in usage.py).

Both views share the page's event (a line at the selected event) and its zoom: a drag on the timeline, the
bands or the kind areas redraws all three over that range, refined to exact states when it is short enough.
"""
from __future__ import annotations

from dash import ClientsideFunction, Input, Output, State, ctx as dash_ctx, no_update

from fragviz.base.errors import FragvizError
from fragviz.ui import ids
from fragviz.ui.pages.snapshot import timeline, view_of
from fragviz.ui.pages.usage import kind_notes
from fragviz.ui.figures.usage import bands_figure, empty_figure, groups_figure


def register(app, app_ctx) -> None:
    # The range all three views show, in events, from whichever graph was dragged (assets/usage.js)
    app.clientside_callback(ClientsideFunction("fragviz", "usageRange"), Output(ids.USAGE_RANGE, "data"),
                            Output(ids.TIMELINE_FOLLOW, "data"),
                            Input(ids.TIMELINE, "relayoutData"), Input(ids.ALLOC_BANDS, "relayoutData"),
                            Input(ids.MEMORY_BY, "relayoutData"), State(ids.TIMELINE_AXIS, "value"),
                            prevent_initial_call=True)

    @app.callback(Output(ids.ALLOC_BANDS, "figure"), Output(ids.MEMORY_BY, "figure"),
                  Output(ids.KIND_NOTES, "children"), Input(ids.USAGE_RANGE, "data"), Input(ids.MEMORY_BY_GROUP, "value"), Input(ids.DEVICE, "value"),
                  State(ids.SNAPSHOT_URL, "pathname"), State(ids.SNAPSHOT_URL, "search"))
    def draw_usage(view_range, by, device, pathname, search):
        sid, cur_device, _event, n = view_of(app_ctx, pathname, search)
        device = cur_device if device is None else device
        if dash_ctx.triggered_id == ids.DEVICE or (view_range and view_range.get("all")):
            view_range = None  # a new device starts over its whole trace, as does a reset of the zoom
        lo, hi = (min(view_range["lo"], n), min(view_range["hi"], n)) if view_range else (0, None)
        try:
            bands, groups = app_ctx.views.usage.view(sid, device, by or "kind", lo, hi)
            notes = kind_notes(app_ctx.views.usage.kind_notes(sid, device))
        except FragvizError as exc:
            return empty_figure(str(exc)), empty_figure(str(exc)), []
        x_range = [lo, hi + 1] if view_range else None
        return bands_figure(bands, x_range), groups_figure(groups, x_range), notes

    @app.callback(Output(ids.TIMELINE, "figure", allow_duplicate=True), Input(ids.TIMELINE_FOLLOW, "data"),
                  State(ids.TIMELINE_AXIS, "value"), State(ids.SNAPSHOT_URL, "pathname"),
                  State(ids.SNAPSHOT_URL, "search"), prevent_initial_call=True)
    def follow_zoom(view_range, axis, pathname, search):
        # The timeline refines itself on its own drags; it follows the drags on the other two
        if not view_range:
            return no_update
        sid, device, event, n = view_of(app_ctx, pathname, search)
        if view_range.get("all"):
            return timeline(app_ctx, sid, device, event, axis=axis)
        lo = min(view_range["lo"], n)
        return timeline(app_ctx, sid, device, event, lo, max(lo + 1, min(view_range["hi"], n) + 1), axis)

    # The selected event's line on both views, placed in the browser (assets/usage.js)
    app.clientside_callback(ClientsideFunction("fragviz", "usageEventLine"), Output(ids.ALLOC_BANDS, "className"),
                            Input(ids.EVENT_INFO, "children"), Input(ids.ALLOC_BANDS, "figure"),
                            Input(ids.MEMORY_BY, "figure"))
