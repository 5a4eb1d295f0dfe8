"""The team map's queries: the routes taken, counted in one grouped query, and the routes the contracts declare.

The counts never read a row per handoff into Python: the database groups them by graph scope, sender,
receiver, route version, verdict and whether the verdict is still in progress, so a map costs the same
few queries for ten runs or ten thousand.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import BooleanField, Count, ExpressionWrapper, Min, QuerySet
from django.db.models.fields.json import KT

from receipts.ingest import health
from receipts.models import ContractVersion, Handoff
from receipts.org.teams import EVERYTHING, Scope
from receipts.queries import teammap


@dataclass(frozen=True)
class MapFilters:
    """Which handoffs a map counts: those of runs created since `since`, of one graph, version or run."""

    since: datetime | None = None
    graph: str = ""
    route_version: str = ""
    run_id: int | None = None
    seen: Scope = EVERYTHING  # issue 22 §2: the teams whose runs are counted


def handoffs(filters: MapFilters) -> QuerySet[Handoff]:
    found = filters.seen.apply(Handoff.objects.all(), "run__")
    if filters.run_id is not None:
        found = found.filter(run_id=filters.run_id)
    if filters.since is not None:
        # The runs list's window is the runs' creation time: a route's link lists the same runs.
        found = found.filter(run__created_at__gte=filters.since)
    if filters.graph:
        found = found.filter(run__graph=filters.graph)
    if filters.route_version:
        found = found.filter(route_version=filters.route_version)
    return found


def route_rows(found: QuerySet[Handoff]) -> list[teammap.RouteRow]:
    """The handoffs of `found` grouped by scope, sender, receiver, version, verdict and in progress: one query."""
    in_progress = ExpressionWrapper(health.due_condition(), output_field=BooleanField())
    grouped = (
        found.order_by()
        .annotate(scope=KT("reduced_part__graph_scope"), in_progress=in_progress)
        .values("scope", "sender", "receiver", "route_version", "verdict", "in_progress")
        .annotate(count=Count("pk"), first_at=Min("created_at"))
    )
    return [teammap.RouteRow(**row) for row in grouped]


def declared_routes(versions: Iterable[str]) -> dict[str, set[tuple[str, str]]]:
    """Each contract version's declared (sender, receiver) routes (one query); a version without a stored
    contract declares nothing, so every route taken under it is undeclared (spec check 1)."""
    wanted = set(versions)
    found: dict[str, set[tuple[str, str]]] = {version: set() for version in wanted}
    for version, routes in ContractVersion.objects.filter(version__in=wanted).values_list("version", "routes"):
        found[version] = _pairs(routes)
    return found


def newest_routes() -> dict[str, set[tuple[str, str]]]:
    """The newest contract version's routes: what an empty window shows as declared (one query)."""
    newest = ContractVersion.objects.order_by("-created_at", "-pk").values_list("version", "routes").first()
    return {newest[0]: _pairs(newest[1])} if newest else {}


def _pairs(routes: object) -> set[tuple[str, str]]:
    if not isinstance(routes, dict):
        return set()
    return {
        (str(sender), str(receiver))
        for sender, receivers in routes.items()
        if isinstance(receivers, dict)
        for receiver in receivers
    }
