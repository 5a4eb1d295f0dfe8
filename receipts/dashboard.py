"""Read-side queries for the operator pages.

Every function here runs a fixed number of queries however many runs and
handoffs exist (select_related, one aggregate per question, bounded slices),
so the pages stay fast as the tables grow. Nothing here changes state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Exists, F, Max, OuterRef, Q, QuerySet, Subquery

from receipts.bundle import VERDICTS
from receipts.models import Handoff, MiddlewareReport, Receipt, Run
from receipts.verdicts import BOUNDARIES

# The worst news first: the order the overview lists verdicts in.
VERDICT_ORDER = (
    "ROUTE_REJECTED",
    "STALE_CONTROL",
    "OPEN_TOOL_PROTOCOL",
    "CONTEXT_INCOMPLETE",
    "DESTINATION_NOT_STARTED",
    "FALSE_COMPLETE",
    "UNCERTAIN",
    "WAITING_ON_APPROVAL",
    "HEALTHY",
)
assert set(VERDICT_ORDER) == set(VERDICTS)

# Which receipt part proves each boundary (its arrival time is shown in the grid).
BOUNDARY_PARTS: dict[str, tuple[str, ...]] = {
    "route": ("created", "reduced"),
    "control": ("reduced",),
    "tool_protocol": ("reduced",),
    "context": ("reduced",),
    "destination": ("destination",),
    "wait": ("wait", "final_status"),
    "outcome": ("verification", "final_status"),
}
assert tuple(BOUNDARY_PARTS) == BOUNDARIES

NEWEST_LIMIT = 10
SOONEST_LIMIT = 10
LIST_LIMIT = 200
TIMELINE_LIMIT = 100
REPORT_LIMIT = 100


@dataclass(frozen=True)
class RunFilters:
    verdict: str = ""
    agent: str = ""
    status: str = ""
    since: datetime | None = None
    until: datetime | None = None
    q: str = ""


@dataclass(frozen=True)
class BoundaryCell:
    name: str
    status: str
    at: datetime | None


@dataclass
class HandoffView:
    """A handoff with its boundary grid, ready for a template."""

    handoff: Handoff
    grid: list[BoundaryCell] = field(default_factory=list)


def overview_counts() -> list[tuple[str, int]]:
    """(verdict, number of handoffs) for every verdict, worst first; one query."""
    counts = dict(Handoff.objects.order_by().values_list("verdict").annotate(n=Count("pk")))
    return [(verdict, counts.get(verdict, 0)) for verdict in VERDICT_ORDER]


def _handoffs() -> QuerySet[Handoff]:
    # The JSON parts stay in the database: pages show names, codes and times only.
    return Handoff.objects.select_related("run").defer(
        "created_part", "reduced_part", "destination_part", "verification_part"
    )


def newest_handoffs(limit: int = NEWEST_LIMIT) -> list[Handoff]:
    return list(_handoffs().order_by("-updated_at", "-pk")[:limit])


def open_waits(username: str | None = None, limit: int = LIST_LIMIT) -> list[Handoff]:
    """Open waits, the deadline due soonest first (no deadline last); only `username`'s when given."""
    waits = _handoffs().filter(wait_open=True)
    if username is not None:
        waits = waits.filter(wait_owner=username)
    return list(waits.order_by(F("wait_deadline").asc(nulls_last=True), "pk")[:limit])


def open_wait_count(username: str | None = None) -> int:
    waits = Handoff.objects.filter(wait_open=True)
    if username is not None:
        waits = waits.filter(wait_owner=username)
    return waits.count()


def false_completions(limit: int = LIST_LIMIT) -> list[Handoff]:
    return list(_handoffs().filter(verdict="FALSE_COMPLETE").order_by("-updated_at", "-pk")[:limit])


def false_completion_count() -> int:
    return Handoff.objects.filter(verdict="FALSE_COMPLETE").count()


def runs(filters: RunFilters) -> QuerySet[Run]:
    """Runs matching `filters`, newest first, with their handoff counts and latest verdict."""
    found = Run.objects.all()
    handoffs = Handoff.objects.filter(run=OuterRef("pk"))
    if filters.verdict:
        found = found.filter(Exists(handoffs.filter(verdict=filters.verdict)))
    if filters.agent:
        found = found.filter(Exists(handoffs.filter(Q(sender=filters.agent) | Q(receiver=filters.agent))))
    if filters.status:
        found = found.filter(status=filters.status)
    if filters.since:
        found = found.filter(created_at__gte=filters.since)
    if filters.until:
        found = found.filter(created_at__lt=filters.until)
    if filters.q:
        found = found.filter(operation_id__icontains=filters.q)
    latest = Handoff.objects.filter(run=OuterRef("pk")).order_by("-updated_at", "-pk")
    return found.annotate(
        handoff_count=Count("handoffs"),
        problem_count=Count("handoffs", filter=~Q(handoffs__verdict__in=("HEALTHY", "WAITING_ON_APPROVAL"))),
        latest_verdict=Subquery(latest.values("verdict")[:1]),
    ).order_by("-created_at", "-pk")


def run_timeline(run: Run, limit: int = TIMELINE_LIMIT) -> list[HandoffView]:
    """The run's handoffs in the order they were created (the latest `limit`), each with its grid."""
    recent = list(Handoff.objects.filter(run=run).order_by("-created_at", "-pk")[:limit])
    recent.reverse()
    for handoff in recent:
        handoff.run = run  # already loaded: no query per row
    return [HandoffView(h, grid) for h, grid in zip(recent, boundary_grids(recent), strict=True)]


def run_handoff_count(run: Run) -> int:
    return Handoff.objects.filter(run=run).count()


def handoff_view(handoff: Handoff) -> HandoffView:
    return HandoffView(handoff, boundary_grids([handoff])[0])


def boundary_grids(handoffs: Iterable[Handoff]) -> list[list[BoundaryCell]]:
    """Per handoff, each boundary's status and when the receipt proving it arrived; one query."""
    handoffs = list(handoffs)
    arrived: dict[tuple[int, str], datetime] = {
        (row["handoff_id"], row["part"]): row["at"]
        for row in Receipt.objects.filter(handoff__in=[h.pk for h in handoffs])
        .order_by()
        .values("handoff_id", "part")
        .annotate(at=Max("recorded_at"))
    }
    grids = []
    for handoff in handoffs:
        grid = []
        for name, parts in BOUNDARY_PARTS.items():
            status = handoff.boundaries.get(name, "not_reached")
            # A boundary after the deciding one was not judged: no receipt time to show for it.
            times = [] if status == "not_reached" else [arrived[k] for p in parts if (k := (handoff.pk, p)) in arrived]
            grid.append(BoundaryCell(name, status, max(times, default=None)))
        grids.append(grid)
    return grids


def change_marker(run_id: int | None = None) -> tuple:
    """A value that changes whenever what the pages show may have changed.

    Indexed maxima only, so a page can ask every few seconds for the price of
    one cheap query or two. Recording anything bumps a handoff's updated_at and
    its run's seq; a new row bumps a primary key.
    """
    if run_id is not None:
        return tuple(Run.objects.filter(pk=run_id).values_list("seq", "status", "updated_at").first() or ())
    handoffs = Handoff.objects.aggregate(updated=Max("updated_at"), last=Max("pk"))
    runs = Run.objects.aggregate(updated=Max("updated_at"), last=Max("pk"), report=Max("reports__pk"))
    return (handoffs["updated"], handoffs["last"], runs["updated"], runs["last"], runs["report"])


def run_reports(run: Run, limit: int = REPORT_LIMIT) -> list[MiddlewareReport]:
    return list(MiddlewareReport.objects.filter(run=run).order_by("-recorded_at", "-pk")[:limit])
