"""The snapshot page's OOM card: the doctor's verdicts of the page's device, each naming its device and event
and linking to its state (the page at that device and event); other devices' OOMs as links to them. A card
that showed another device's OOM unnamed would explain a state the page is not showing."""
from __future__ import annotations

import dash
from dash import Input, Output, State, dcc, html, no_update

from fragviz.doctor import Diagnosis
from fragviz.ui import ids
from fragviz.ui.context import AppContext
from fragviz.ui.pages.common import card, make_search, verdict_card
from fragviz.ui.pages.snapshot.view import page_sid

TITLES = {"exhaustion": "True exhaustion", "fragmentation": "Fragmentation", "outside_pytorch":
          "Memory outside PyTorch", "capacity_cap": "A capacity cap"}


def oom_href(sid: int, device: int, event: int) -> str:
    """The snapshot page at an OOM's state: its device, after the events before it (the state the doctor read)."""
    return f"/snapshots/{sid}" + make_search(device=device, event=event)


def oom_title(o: Diagnosis) -> str:
    """'Fragmentation on cuda:1 at event 41': the verdict, the device and the event of one recorded OOM."""
    return f"{TITLES.get(o.verdict, o.verdict)} on cuda:{o.device} at event {o.event}"


def _card(sid: int, o: Diagnosis) -> html.Div:
    link = dcc.Link(f"show the state at this OOM (cuda:{o.device}, event {o.event})",
                    href=oom_href(sid, o.device, o.event), className="fv-oom-link")
    return verdict_card(o, oom_title(o), link)


def _elsewhere(sid: int, device: int, ooms: list[Diagnosis]) -> list[html.P]:
    """One line per other device with OOMs: how many, and a link to the first one's state."""
    by_device: dict[int, list[Diagnosis]] = {}
    for o in ooms:
        if o.device != device:
            by_device.setdefault(o.device, []).append(o)
    return [html.P([f"cuda:{d} records {len(its)} OOM{'s' if len(its) > 1 else ''}: ",
                    dcc.Link(f"the first at event {its[0].event}", href=oom_href(sid, d, its[0].event),
                             className="fv-oom-link")], className="fv-oom-elsewhere")
            for d, its in sorted(by_device.items())]


def verdicts_view(sid: int, device: int, ooms: list[Diagnosis]) -> html.Div:
    """The card's content on `device`: its OOMs' verdicts, or that it records none, then other devices' OOMs.
    `ooms` are the doctor's entries of the snapshot's own OOMs (each with its device and event)."""
    if not ooms:
        return html.Div(html.P("No out-of-memory error is recorded in this snapshot."))
    here = [_card(sid, o) for o in ooms if o.device == device]
    none_here = [] if here else [html.P(f"No out-of-memory error is recorded on cuda:{device}.")]
    return html.Div([*here, *none_here, *_elsewhere(sid, device, ooms)])


def oom_card() -> html.Section:
    return card("Why it ran out of memory", dcc.Loading(html.Div(id=ids.OOM_VERDICT)))


def register(app: dash.Dash, ctx: AppContext) -> None:
    @app.callback(Output(ids.OOM_VERDICT, "children"), Input(ids.STATE_DRAWN, "data"),
                  State(ids.SNAPSHOT_URL, "pathname"))
    def verdicts(drawn, pathname):
        # once the device's first state is drawn (assets/state_view.js)
        sid = page_sid(pathname)
        if sid is None or not drawn:
            return no_update
        return verdicts_view(sid, drawn["device"], ctx.views.doctor(sid))
