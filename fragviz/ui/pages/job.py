"""The job page: /jobs/<id>. Every rank of a training job side by side, from the stored summaries alone: peak
reserved and requested, fragmentation at the peak, OOMs and their verdicts, the imbalance across ranks and
the ranks that stand out. A rank's link (or its bar) opens its snapshot."""
from __future__ import annotations

from statistics import median

import dash
from dash import ALL, Input, Output, State, ctx as dash_ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from fragviz.base.errors import FragvizError, public_message
from fragviz.jobs.stats import OUTLIER_RULE
from fragviz.jobs.table import JobFigures, RankRow, job_figures, job_figures_of
from fragviz.ui import ids
from fragviz.ui.context import AppContext
from fragviz.ui.figures.jobs import ranks_figure
from fragviz.ui.pages.common import card, error_page, error_panel, fb, header

PATH = "/jobs/"  # the page's prefix: /jobs/<id>
NOT_RECORDED = "not recorded"
# (key, header, sort value): the table's columns, each sortable by its header
COLUMNS = (
    ("rank", "rank", lambda r: (r.rank, r.device if r.device is not None else -1)),
    ("snapshot", "snapshot", lambda r: r.name),
    ("peak_reserved", "peak reserved", lambda r: r.peak_reserved_bytes),
    ("peak_requested", "peak requested", lambda r: r.peak_requested_bytes),
    ("fragmentation", "fragmentation at the peak", lambda r: r.fragmentation_at_peak),
    ("ooms", "OOMs", lambda r: r.ooms),
    ("verdicts", "verdicts", lambda r: " ".join(r.verdicts or ())),
)
_SORT_KEYS = {key: value for key, _, value in COLUMNS}


def job_id_of(pathname: str | None) -> int | None:
    parts = (pathname or "").strip("/").split("/")
    return int(parts[1]) if len(parts) == 2 and parts[0] == "jobs" and parts[1].isdigit() else None


def snapshot_href(row: RankRow) -> str:
    return f"/snapshots/{row.snapshot_id}" + ("" if row.device is None else f"?device={row.device}")


def layout(ctx: AppContext, pathname: str, search: str | None = None) -> html.Div:
    job_id = job_id_of(pathname)
    try:
        if job_id is None:
            raise FragvizError(f"{pathname}: not a job's address (/jobs/<id>)")
        figures = job_figures_of(ctx.reader, job_id)
    except FragvizError as exc:
        return error_page(public_message(exc, ctx.reader.records.path))
    job = figures.job
    return html.Div([header(), html.Main(className="fv-main fv-job", children=[
        html.H2(f"Job {job.name}"),
        html.P(f"{len(job.ranks)} ranks, {len(figures.rows)} devices, {figures.ooms} OOMs; recorded "
               f"{job.created_at.replace('T', ' ')[:16]}", className="fv-sub"),
        html.Div(className="fv-row", children=[
            card("Imbalance across ranks", *_imbalance(figures), id=ids.JOB_IMBALANCE),
            card("Look further", _links(ctx, figures), class_name="fv-narrow"),
        ]),
        card("Peak reserved and peak requested per rank", html.P(
            "A bar's click opens that rank's snapshot; outliers are outlined, OOM ranks marked ✕.",
            className="fv-hint"),
             dcc.Loading(dcc.Graph(id=ids.JOB_CHART, figure=ranks_figure(figures),
                                   config={"displaylogo": False}), type="dot")),
        card("Ranks", dcc.Store(id=ids.JOB_SORT_STATE, data={"key": "rank", "desc": False}),
             dcc.Loading(html.Div(id=ids.JOB_TABLE, className="fv-scroll", children=ranks_table(figures, "rank", False)),
                         type="dot")),
    ])])


def _imbalance(figures: JobFigures) -> list:
    outliers = [r for r in figures.rows if r.outlier]
    return [
        html.Dl([c for name, v in (("peak reserved, max / median", _ratio(figures, "peak_reserved_bytes")),
                                   ("peak requested, max / median", _ratio(figures, "peak_requested_bytes")),
                                   ("outliers", ", ".join(_outlier_text(figures, r) for r in outliers) or "none"))
                 for c in (html.Dt(name), html.Dd(v, className="fv-outlier" if name == "outliers" and outliers
                                                 else ""))]),
        html.P(["Outlier rule: ", OUTLIER_RULE, "."], className="fv-hint"),
    ]


def _ratio(figures: JobFigures, figure: str) -> str:
    """`1.23× (9.8 GiB / 8 GiB)`: the imbalance of one figure across the rows, with its max and median."""
    known = [getattr(r, figure) for r in figures.rows if getattr(r, figure) is not None]
    value = figures.reserved_imbalance if figure == "peak_reserved_bytes" else figures.requested_imbalance
    if value is None:
        return NOT_RECORDED
    return f"{value:.2f}× ({fb(max(known))} / {fb(int(median(known)))})"


def _outlier_text(figures: JobFigures, r: RankRow) -> str:
    which = [w for w, flag in (("reserved", r.reserved_outlier), ("requested", r.requested_outlier)) if flag]
    return f"{figures.label(r)} ({' and '.join(which)})"


def _links(ctx: AppContext, figures: JobFigures) -> html.Ul:
    job_id = figures.job.id
    largest, middle = figures.largest(), figures.median_row()
    items = []
    if largest is not None and middle is not None:
        items.append(html.Li(dcc.Link("compare the largest rank with the median rank", id=ids.JOB_COMPARE,
                                      href=compare_href(ctx, figures, largest, middle)),
                             title=f"{figures.label(largest)} against {figures.label(middle)}"))
    items += [html.Li(html.A(text, href=href, download="")) for text, href in (
        ("memory series of every rank (Parquet)", f"/api/jobs/{job_id}/export?what=series&format=parquet"),
        ("memory series of every rank (CSV)", f"/api/jobs/{job_id}/export?what=series&format=csv"),
        ("this per-rank table (CSV)", f"/api/jobs/{job_id}/ranks.csv"))]
    return html.Ul(items, id=ids.JOB_DOWNLOADS, className="fv-links")


def compare_href(ctx: AppContext, figures: JobFigures, a: RankRow, b: RankRow) -> str:
    """/compare of two ranks' snapshots, aligned on an axis both have (by step where both record step markers,
    else by time, else by event); their devices named where a snapshot has several."""
    axis = ctx.compare.shared_axis([(a.snapshot_id, a.device), (b.snapshot_id, b.device)])
    href = f"/compare?a={a.snapshot_id}&b={b.snapshot_id}&align={axis}"
    if a.snapshot_id in figures.multi_device or b.snapshot_id in figures.multi_device:
        href += f"&da={a.device}&db={b.device}"
    return href


def ranks_table(figures: JobFigures, key: str, desc: bool) -> html.Table:
    """The per-rank table sorted by `key` (a COLUMNS key); figures not recorded sort last."""
    value = _SORT_KEYS.get(key, _SORT_KEYS["rank"])
    known = [r for r in figures.rows if value(r) is not None]
    rows = sorted(known, key=value, reverse=desc) + [r for r in figures.rows if value(r) is None]
    head = html.Thead(html.Tr([html.Th(html.Button(
        text + (" ▼" if desc else " ▲") * (k == key), id={"type": ids.JOB_SORT, "key": k}, n_clicks=0,
        className="fv-sort", title=f"sort by {text}")) for k, text, _ in COLUMNS]))
    return html.Table(className="fv-table fv-ranks", children=[head, html.Tbody([_tr(figures, r) for r in rows])])


def _tr(figures: JobFigures, r: RankRow) -> html.Tr:
    return html.Tr(className="fv-outlier-row" if r.outlier else "", **{"data-rank": str(r.rank)}, children=[
        html.Td(dcc.Link(figures.label(r), href=snapshot_href(r))),
        html.Td(r.name.rsplit("/", 1)[-1], title=r.name),
        _bytes_cell(r.peak_reserved_bytes, r.reserved_outlier),
        _bytes_cell(r.peak_requested_bytes, r.requested_outlier),
        _cell(NOT_RECORDED if r.fragmentation_at_peak is None else f"{r.fragmentation_at_peak:.1%}",
              r.fragmentation_at_peak is None),
        html.Td(str(r.ooms), className="fv-oom" if r.ooms else ""),
        _cell(verdicts_text(r), r.ooms > 0 and r.verdicts is None),
    ])


def _bytes_cell(value: int | None, outlier: bool) -> html.Td:
    if value is None:
        return _cell(NOT_RECORDED, True)
    return html.Td(fb(value), className="fv-outlier" if outlier else "", title="outlier" if outlier else None)


def _cell(text: str, missing: bool) -> html.Td:
    return html.Td(text, className="fv-missing" if missing else "")


def verdicts_text(r: RankRow) -> str:
    if not r.ooms:
        return "—"
    return NOT_RECORDED if r.verdicts is None else ", ".join(r.verdicts)


def jobs_table(reader) -> html.Table | html.P:
    """The library's jobs card: each job's name (a link to its page), ranks and worst OOM."""
    jobs = reader.jobs()
    if not jobs:
        return html.P(["No jobs yet: ingest every rank of a training job with ",
                       html.Code("fragviz ingest --job NAME DIR"), "."], className="fv-hint")
    summaries = {row.id: row.summary for row in reader.list_snapshots()}
    head = html.Thead(html.Tr([html.Th(h) for h in ("job", "ranks", "worst OOM", "recorded")]))
    body = [_job_tr(job_figures(job, summaries)) for job in jobs]
    return html.Table(className="fv-table", children=[head, html.Tbody(body)])


def _job_tr(figures: JobFigures) -> html.Tr:
    job, worst = figures.job, figures.worst_oom()
    ranks = [r.rank for r in job.ranks]
    span = f" ({ranks[0]}–{ranks[-1]})" if len(ranks) > 1 else ""
    return html.Tr([
        html.Td(dcc.Link(job.name, href=f"/jobs/{job.id}")), html.Td(f"{len(ranks)}{span}"),
        html.Td("none" if worst is None else f"{figures.label(worst)}: {worst.ooms} OOM"
                + ("s" if worst.ooms > 1 else "") + f" ({verdicts_text(worst)})", className="fv-oom" if worst else ""),
        html.Td(job.created_at.replace("T", " ")[:16])])


def register(app: dash.Dash, ctx: AppContext) -> None:
    @app.callback(Output(ids.JOB_TABLE, "children"), Output(ids.JOB_SORT_STATE, "data"),
                  Input({"type": ids.JOB_SORT, "key": ALL}, "n_clicks"), State(ids.JOB_SORT_STATE, "data"),
                  State(ids.URL, "pathname"), prevent_initial_call=True)
    def sort(clicks, state, pathname):
        job_id = job_id_of(pathname)
        if job_id is None or not any(clicks or ()):
            raise PreventUpdate
        key = dash_ctx.triggered_id["key"]
        desc = not state["desc"] if key == state["key"] else key not in ("rank", "snapshot")
        try:
            figures = job_figures_of(ctx.reader, job_id)
        except FragvizError as exc:
            return error_panel(public_message(exc, ctx.reader.records.path)), no_update
        return ranks_table(figures, key, desc), {"key": key, "desc": desc}

    @app.callback(Output(ids.URL, "href", allow_duplicate=True), Input(ids.JOB_CHART, "clickData"),
                  prevent_initial_call=True)
    def open_rank(click):
        point = ((click or {}).get("points") or [{}])[0]
        custom = point.get("customdata")
        if not custom:
            raise PreventUpdate
        sid, device = custom[0], custom[1]
        return f"/snapshots/{sid}" + ("" if device is None else f"?device={device}")
