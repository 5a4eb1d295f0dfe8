"""The team map page (`/map/`) and the map of one run, as the views, the run page and the socket render them.

What is counted is `receipts.queries.routestats` (one grouped query), what it means is
`receipts.queries.teammap`, where it is drawn is `sidewisp.pages.mapdrawing`; this module chooses the
handoffs (window, graph, route version, or one run), the links (the runs list filtered to a route or an
agent) and the words around the picture.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlencode

from django import forms
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET

from agents.host import teamshape
from receipts import actions
from receipts.ingest import drafts
from receipts.models import Handoff, Run
from receipts.org import teams
from receipts.queries import dashboard, routestats, teammap
from sidewisp.pages import labels, mapdrawing
from sidewisp.pages.scope import PageScope, team_switch
from sidewisp.web.access import viewer_required


class MapForm(forms.Form):
    window = forms.ChoiceField(required=False, label="Runs created in the last")
    graph = forms.ChoiceField(required=False, choices=[("", "Every graph")])
    route_version = forms.ChoiceField(required=False, label="Route version", choices=[("", "Every route version")])

    def __init__(self, *args, graphs: list[str], route_versions: list[str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["window"].choices = [(key, label) for key, (label, _) in labels.WINDOWS.items()]
        self.fields["graph"].choices += [(name, name) for name in graphs]
        self.fields["route_version"].choices += [(version, version) for version in route_versions]

    def chosen(self) -> dict[str, str]:
        """The valid choices (an invalid one is ignored, and shown as an error by the form)."""
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        return {
            "window": data.get("window") or labels.DEFAULT_WINDOW,
            "graph": data.get("graph") or "",
            "route_version": data.get("route_version") or "",
        }


@dataclass
class MapView:
    """One map, ready for `teammap/_map.html`."""

    drawing: mapdrawing.Drawing
    team: teammap.TeamMap
    heading: str
    summary: str
    description: str
    unread: list[str]  # hosted graphs whose wiring could not be read

    @property
    def routes(self) -> list[mapdrawing.DrawnArrow]:
        """The arrows as a table: worst state first, then by scope and names."""
        return sorted(self.drawing.arrows, key=lambda a: (mapdrawing.STATE_ORDER.index(a.state), a.route.key))

    @property
    def legend(self) -> list[tuple[str, str]]:
        return [(state, mapdrawing.STATE_WORDS[state]) for state in mapdrawing.STATE_ORDER]


@require_GET
@viewer_required
def team_map(request: HttpRequest) -> HttpResponse:
    context = map_context(request.GET, request.user)  # a `?team=` not the user's: 400 (refusals middleware)
    query = urlencode({k: v for k, v in context["chosen"].items() if v})
    context["ws_url"] = PageScope("map", query=query).ws_url()
    partial = request.htmx and not request.htmx.boosted
    response = render(request, "teammap/_map.html" if partial else "teammap/map.html", context)
    patch_vary_headers(response, ["HX-Request"])
    return response


def map_context(params: QueryDict | Mapping[str, str], user) -> dict:
    """The map of every run of the user's teams (or the chosen one) created in the chosen window, of one graph
    and route version when chosen."""
    team = params.get("team") or ""
    seen = teams.scope_for(user, team)
    graphs, versions = dashboard.search_choices(seen=seen)
    form = MapForm(params, graphs=graphs, route_versions=versions)
    chosen = {**form.chosen(), "team": team}
    since = timezone.now() - timedelta(seconds=labels.WINDOWS[chosen["window"]][1])
    filters = routestats.MapFilters(
        since=since, graph=chosen["graph"], route_version=chosen["route_version"], seen=seen
    )
    hosted = [chosen["graph"]] if chosen["graph"] else graphs
    shapes = {name: teamshape.shape_of(name) for name in hosted}
    links = {k: chosen[k] for k in ("window", "graph", "route_version", "team")}
    where = f"runs created in the last {labels.WINDOWS[chosen['window']][0]}"
    if chosen["graph"]:
        where += f" of graph {chosen['graph']}"
    view = map_view(filters, shapes, links, heading="Routes of the team", where=where)
    windows = [(key, label, urlencode({**links, "window": key})) for key, (label, _) in labels.WINDOWS.items()]
    switch = team_switch(user, seen, {k: v for k, v in links.items() if v and k != "team"})
    context = {"form": form, "chosen": chosen, "windows": windows, "map": view, "team_switch": switch}
    return {**context, "declarable": _declarable(filters, user)}


def _declarable(filters: routestats.MapFilters, user) -> list[dict]:
    """For an admin: each route version the map's rejected routes name without declaring them, with the newest
    run whose page offers its draft ("Declare what you saw"); nobody else is offered anything."""
    if not actions.may_declare(user):
        return []
    found = drafts.drafts_for(drafts.rejected_handoffs(routestats.handoffs(filters)))
    pks = [max(d.handoff_pks) for d in found]
    newest = {h.pk: h.run for h in Handoff.objects.select_related("run").filter(pk__in=pks)}
    return [{"draft": d, "run": newest[max(d.handoff_pks)]} for d in found]


def run_map(run: Run) -> MapView:
    """The map of one run: the routes its handoffs took, numbered in the order it first took them."""
    shapes = {run.graph: teamshape.shape_of(run.graph, run.scenario)} if run.graph else {}
    links = {"graph": run.graph}
    where = f"run {run.operation_id}"
    return map_view(routestats.MapFilters(run_id=run.pk), shapes, links, heading="The path this run took", where=where)


def map_view(filters: routestats.MapFilters, shapes: Mapping, links: dict[str, str], *, heading: str, where: str):
    """Count, combine with the contracts and the graphs' wiring, lay out: three queries whatever the size."""
    rows = routestats.route_rows(routestats.handoffs(filters))
    versions = {filters.route_version} if filters.route_version else {row.route_version for row in rows}
    declared = routestats.declared_routes(versions) if versions else routestats.newest_routes()
    team = teammap.build(rows, declared, [shape for shape in shapes.values() if shape is not None])
    steps = filters.run_id is not None
    drawing = mapdrawing.draw(
        team,
        route_href=lambda route: _runs_url({**links, "sender": route.sender, "receiver": route.receiver}),
        agent_href=lambda name: _runs_url({**links, "agent": name}),
        steps=steps,
    )
    return MapView(
        drawing=drawing,
        team=team,
        heading=heading,
        summary=_summary(team, where),
        description=_description(team, steps=steps),
        unread=sorted(name for name, shape in shapes.items() if shape is None and name in teamshape.hosted()),
    )


def _runs_url(params: dict[str, str]) -> str:
    return f"{reverse('sidewisp:runs')}?{urlencode({k: v for k, v in params.items() if v})}"


def _summary(team: teammap.TeamMap, where: str) -> str:
    taken = [route for route in team.routes if route.total]
    bad = [route for route in taken if route.state in (teammap.FAILING, teammap.UNDECLARED)]
    agents = {name for scope, names in team.nodes.items() for name in names if name not in _boxes(team, scope)}
    noun = "handoff" if team.handoffs == 1 else "handoffs"
    text = f"{team.handoffs} {noun} over {len(taken)} of {len(team.routes)} routes between {len(agents)} agents"
    return f"{text}, {len(bad)} failing, in {where}."


def _boxes(team: teammap.TeamMap, scope: str) -> set[str]:
    return {teammap.box_name(child) for child in team.children(scope)}


def _description(team: teammap.TeamMap, *, steps: bool) -> str:
    """The picture in words, for a screen reader: the failing routes first."""
    worst = sorted((r for r in team.routes if r.total), key=lambda r: (mapdrawing.STATE_ORDER.index(r.state), r.key))
    said = [f"{r.sender} to {r.receiver}: {mapdrawing.STATE_WORDS[r.state].lower()}" for r in worst[:5]]
    if not said:
        return "No handoff yet: the declared routes are drawn dashed."
    more = f" and {len(worst) - 5} more routes" if len(worst) > 5 else ""
    order = " Arrows are numbered in the order the run first took them." if steps else ""
    return f"Routes taken: {'; '.join(said)}{more}. The table below lists every route.{order}"
