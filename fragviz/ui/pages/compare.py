"""The compare page: two snapshots (or two events of one), side by side and as a difference by allocation site."""
from __future__ import annotations

from dash import Input, Output, State, dash_table, dcc, html, no_update

from fragviz.errors import FragvizError
from fragviz.ui import figures, ids
from fragviz.ui.pages.common import card, error_panel, fb, header, make_search, query_int


def layout(app_ctx, search: str | None) -> html.Div:
    rows = app_ctx.reader.list_snapshots()
    options = [{"label": f"{r.id}: {r.name.rsplit('/', 1)[-1]}", "value": r.id} for r in rows]
    a, b = query_int(search, "a"), query_int(search, "b")
    return html.Div([header(), html.Main(className="fv-main", children=[
        html.H2("Compare"),
        card("States", html.Div(className="fv-controls", children=[
            html.Label(["A ", dcc.Dropdown(id=ids.COMPARE_A, options=options, value=a, className="fv-pick")]),
            html.Label(["event ", dcc.Input(id="compare-ea", type="number", min=0, value=query_int(search, "ea"),
                                            placeholder="last", debounce=True)]),
            html.Label(["B ", dcc.Dropdown(id=ids.COMPARE_B, options=options, value=b, className="fv-pick")]),
            html.Label(["event ", dcc.Input(id="compare-eb", type="number", min=0, value=query_int(search, "eb"),
                                            placeholder="last", debounce=True)]),
        ])),
        html.Div(id="compare-summary", className="fv-row"),
        card("Difference by allocation site (live bytes, B minus A)", dcc.Graph(id=ids.COMPARE_FIGURE),
             dash_table.DataTable(id=ids.COMPARE_TABLE, sort_action="native", page_size=15,
                                  columns=[{"name": "allocation site", "id": "site"}, {"name": "A", "id": "a"},
                                           {"name": "B", "id": "b"}, {"name": "B − A", "id": "delta"},
                                           {"name": "B − A (bytes)", "id": "delta_bytes", "type": "numeric"}],
                                  style_cell={"textAlign": "left", "whiteSpace": "normal"})),
    ])])


def _state(app_ctx, sid: int, event: int | None):
    row = app_ctx.reader.snapshot_row(sid)
    device = row.devices[0] if row.devices else 0
    segments, fig, k = app_ctx.views.state(sid, device, event)
    return row, segments, fig, k


def _summary(label: str, row, fig, k: int) -> html.Section:
    return card(f"{label}: {row.name.rsplit('/', 1)[-1]} after {k} events", html.Dl([
        c for name, v in (("reserved", fb(fig.reserved_bytes)), ("allocated", fb(fig.allocated_bytes)),
                          ("cached free", fb(fig.free_bytes)), ("largest free block", fb(fig.largest_free_block)),
                          ("fragmentation", f"{fig.fragmentation:.1%}"), ("segments", str(fig.segments)))
        for c in (html.Dt(name), html.Dd(v))]))


def register(app, app_ctx) -> None:
    @app.callback(Output("compare-summary", "children"), Output(ids.COMPARE_FIGURE, "figure"),
                  Output(ids.COMPARE_TABLE, "data"), Output(ids.URL, "search", allow_duplicate=True),
                  Input(ids.COMPARE_A, "value"), Input(ids.COMPARE_B, "value"), Input("compare-ea", "value"),
                  Input("compare-eb", "value"), State(ids.URL, "search"), prevent_initial_call="initial_duplicate")
    def compare(a, b, ea, eb, search):
        if a is None or b is None:
            return html.P("Pick two snapshots (or the same one twice, at two events)."), {}, [], no_update
        try:
            row_a, seg_a, fig_a, ka = _state(app_ctx, a, ea)
            row_b, seg_b, fig_b, kb = _state(app_ctx, b, eb)
        except FragvizError as exc:
            return error_panel(str(exc)), {}, [], no_update
        sites_a = {r["site"]: r["bytes"] for r in app_ctx.views.top_sites(a, seg_a, limit=10**6)}
        sites_b = {r["site"]: r["bytes"] for r in app_ctx.views.top_sites(b, seg_b, limit=10**6)}
        rows = [{"site": s, "bytes_a": sites_a.get(s, 0), "bytes_b": sites_b.get(s, 0)} for s in set(sites_a) | set(sites_b)]
        rows.sort(key=lambda r: -abs(r["bytes_b"] - r["bytes_a"]))
        table = [{"site": r["site"], "a": fb(r["bytes_a"]), "b": fb(r["bytes_b"]), "delta": fb(r["bytes_b"] - r["bytes_a"]),
                  "delta_bytes": r["bytes_b"] - r["bytes_a"]} for r in rows]
        summary = [_summary("A", row_a, fig_a, ka), _summary("B", row_b, fig_b, kb)]
        new_search = make_search(a=a, ea=ea, b=b, eb=eb)
        return (summary, figures.difference_figure(rows, "A", "B"), table,
                no_update if new_search == search else new_search)
