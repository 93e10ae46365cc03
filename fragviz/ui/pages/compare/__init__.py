"""The compare page: two snapshots (or two events or devices of one), side by side, on one axis, and as a
difference by allocation site. The whole choice is in the URL:
/compare?a=ID&da=DEVICE&ea=EVENT&b=ID&db=DEVICE&eb=EVENT&align=event|time|step; a side without an event is at its
peak (its state of most allocated bytes), so /compare?a=ID&b=ID compares each at its peak. The memory gate's
budgets follow (gr, ga, gg, gf, gd, gc: see compare/gate.py): B judged against A as `fragviz gate` judges them."""
from __future__ import annotations

import dash
from dash import Input, Output, State, dash_table, dcc, html, no_update

from fragviz.base.errors import FragvizError, public_message
from fragviz.ui import ids
from fragviz.ui.figures.compare import difference_figure
from fragviz.ui.context import AppContext
from fragviz.ui.pages.common import card, error_panel, fb, header, make_search, query_int
from fragviz.ui.pages.compare import align as compare_align
from fragviz.ui.pages.compare import gate as compare_gate

PATH = "/compare"  # a prefix, as it always was: /compare?a=...
SIDES = (("A", "a", ids.COMPARE_A, ids.COMPARE_DEVICE_A, ids.COMPARE_EVENT_A),
         ("B", "b", ids.COMPARE_B, ids.COMPARE_DEVICE_B, ids.COMPARE_EVENT_B))


def layout(ctx: AppContext, pathname: str, search: str | None = None) -> html.Div:
    rows = ctx.reader.list_snapshots()
    options = [{"label": f"{r.id}: {r.name.rsplit('/', 1)[-1]}", "value": r.id} for r in rows]
    # one group per side, each kept on its line (wrapped within only where the page is narrower than it)
    controls = [html.Div(_side_controls(ctx, search, options, label, key, pick, dev, ev), className="fv-side")
                for label, key, pick, dev, ev in SIDES]
    return html.Div([header(), html.Main(className="fv-main", children=[
        html.H2("Compare"),
        card("States", html.Div(className="fv-controls", children=[*controls, compare_align.peaks_button()])),
        compare_align.aligned_card(search),
        html.Div(id=ids.COMPARE_SUMMARY, className="fv-row"),
        card("Difference by allocation site (live bytes, B minus A)", dcc.Graph(id=ids.COMPARE_FIGURE),
             dash_table.DataTable(id=ids.COMPARE_TABLE, sort_action="native", page_size=15,
                                  columns=[{"name": "allocation site", "id": "site"}, {"name": "A", "id": "a"},
                                           {"name": "B", "id": "b"}, {"name": "B − A", "id": "delta"},
                                           {"name": "B − A (bytes)", "id": "delta_bytes", "type": "numeric"}],
                                  style_cell={"textAlign": "left", "whiteSpace": "normal"})),
        compare_gate.gate_card(search),
    ])])


def _side_controls(ctx: AppContext, search, options, label, key, pick, dev, ev) -> list:
    sid = query_int(search, key)
    dev_options, device = device_choice(ctx, sid, query_int(search, "d" + key))
    event = compare_align.resolved_event(ctx.compare, sid, device, query_int(search, "e" + key))
    return [
        html.Label([f"{label} ", dcc.Dropdown(id=pick, options=options, value=sid, className="fv-pick")]),
        html.Label(["device ", dcc.Dropdown(id=dev, options=dev_options, value=device, clearable=False,
                                            className="fv-device", placeholder="—")]),
        # A class with a width: unsized, the box shrinks to a sliver inside the flex label (and a click on it
        # lands beside the input). 7-digit events fit.
        html.Label(["event ", dcc.Input(id=ev, type="number", min=0, value=event,
                                        placeholder="peak", debounce=True, className="fv-compare-event")]),
    ]


def device_choice(ctx: AppContext, sid: int | None, wanted: int | None) -> tuple[list[dict], int | None]:
    """The device picker of one side: the snapshot's devices, and `wanted` when it has it, else its first."""
    try:
        devices = ctx.reader.snapshot_row(sid).devices if sid is not None else []
    except FragvizError:
        devices = []
    value = wanted if wanted in devices else (devices[0] if devices else None)
    return [{"label": f"cuda:{d}", "value": d} for d in devices], value


def _state(ctx: AppContext, sid: int, device: int | None, event: int | None):
    row = ctx.reader.snapshot_row(sid)
    if device not in row.devices:
        device = row.devices[0] if row.devices else 0
    event = compare_align.resolved_event(ctx.compare, sid, device, event)
    segments, fig, k = ctx.views.state(sid, device, event)
    return row, device, segments, fig, k


def _summary(label: str, row, device: int, fig, k: int) -> html.Section:
    return card(f"{label}: {row.name.rsplit('/', 1)[-1]}, cuda:{device}, after {k} events", html.Dl([
        c for name, v in (("reserved", fb(fig.reserved_bytes)), ("allocated", fb(fig.allocated_bytes)),
                          ("fragmentation", f"{fig.fragmentation:.1%}"),
                          ("non-releasable", fb(fig.non_releasable_bytes)),
                          ("largest request the cache can serve", fb(fig.largest_free_block)),
                          ("cached free", fb(fig.free_bytes)), ("free scatter", f"{fig.free_scatter:.1%}"),
                          ("segments", str(fig.segments)))
        for c in (html.Dt(name), html.Dd(v))]))


def _difference(ctx: AppContext, a: int, seg_a, b: int, seg_b) -> list[dict]:
    sites_a = {r["site"]: r["bytes"] for r in ctx.views.top_sites(a, seg_a, limit=10**6)}
    sites_b = {r["site"]: r["bytes"] for r in ctx.views.top_sites(b, seg_b, limit=10**6)}
    rows = [{"site": s, "bytes_a": sites_a.get(s, 0), "bytes_b": sites_b.get(s, 0)} for s in set(sites_a) | set(sites_b)]
    rows.sort(key=lambda r: -abs(r["bytes_b"] - r["bytes_a"]))
    return rows


def compared(ctx: AppContext, a, b, ea, eb, da, db) -> tuple:
    """Both sides' summaries, the difference by site as a figure and as table rows; or why there are none."""
    if a is None or b is None:
        return html.P("Pick two snapshots (or the same one twice, at two events or devices)."), {}, []
    try:
        row_a, da, seg_a, fig_a, ka = _state(ctx, a, da, ea)
        row_b, db, seg_b, fig_b, kb = _state(ctx, b, db, eb)
    except FragvizError as exc:
        return error_panel(public_message(exc, ctx.reader.records.path)), {}, []
    rows = _difference(ctx, a, seg_a, b, seg_b)
    table = [{"site": r["site"], "a": fb(r["bytes_a"]), "b": fb(r["bytes_b"]), "delta": fb(r["bytes_b"] - r["bytes_a"]),
              "delta_bytes": r["bytes_b"] - r["bytes_a"]} for r in rows]
    summary = [_summary("A", row_a, da, fig_a, ka), _summary("B", row_b, db, fig_b, kb)]
    return summary, difference_figure(rows, "A", "B"), table


def register(app: dash.Dash, ctx: AppContext) -> None:
    for _label, _key, pick, dev, _ev in SIDES:
        # A new snapshot on one side: its own devices, the chosen one kept where it has it.
        app.callback(Output(dev, "options"), Output(dev, "value"), Input(pick, "value"), State(dev, "value"),
                     prevent_initial_call=True)(lambda sid, current: device_choice(ctx, sid, current))

    compare_align.register(app, ctx)
    compare_gate.register(app, ctx)

    @app.callback(Output(ids.URL, "search", allow_duplicate=True), *compare_align.SIDE_INPUTS,
                  Input(ids.COMPARE_ALIGN, "value"), *compare_gate.INPUTS, State(ids.URL, "search"),
                  prevent_initial_call="initial_duplicate")
    def follow_url(a, da, ea, b, db, eb, align, gr, ga, gg, gf, gd, gc, search):
        if a is None or b is None:
            return no_update  # half a choice stays as it came: no history entry to step back through
        new_search = make_search(a=a, da=da, ea=ea, b=b, db=db, eb=eb, align=None if align == "event" else align,
                                 **compare_gate.url_keys((gr, ga, gg, gf, gd, gc)))
        return no_update if new_search == search else new_search

    @app.callback(Output(ids.COMPARE_SUMMARY, "children"), Output(ids.COMPARE_FIGURE, "figure"),
                  Output(ids.COMPARE_TABLE, "data"),
                  Input(ids.COMPARE_A, "value"), Input(ids.COMPARE_B, "value"), Input(ids.COMPARE_EVENT_A, "value"),
                  Input(ids.COMPARE_EVENT_B, "value"), Input(ids.COMPARE_DEVICE_A, "value"),
                  Input(ids.COMPARE_DEVICE_B, "value"))
    def compare(a, b, ea, eb, da, db):
        return compared(ctx, a, b, ea, eb, da, db)
