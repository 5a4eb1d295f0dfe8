"""Read-side queries for the operator pages.

Every function here runs a fixed number of queries however many runs and
handoffs exist (select_related, one aggregate per question, bounded slices),
so the pages stay fast as the tables grow. Nothing here changes state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import CharField, Count, Exists, F, IntegerField, Max, Min, OuterRef, Q, QuerySet, Subquery, Value

from receipts import health as run_health
from receipts.bundle import VERDICTS
from receipts.models import ContractVersion, Handoff, MiddlewareReport, Receipt, Run, VerdictChange
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
    q: str = ""  # part of an operation id, handoff id, agent or graph
    graph: str = ""
    route_version: str = ""
    health: str = ""  # receipts.health's level


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
    return list(open_waits_query(username)[:limit])


def open_waits_query(username: str | None = None) -> QuerySet[Handoff]:
    """Every open wait (a page slices it), the deadline due soonest first; only `username`'s when given."""
    waits = _handoffs().filter(wait_open=True)
    if username is not None:
        waits = waits.filter(wait_owner=username)
    return waits.order_by(F("wait_deadline").asc(nulls_last=True), "pk")


def open_wait_count(username: str | None = None) -> int:
    waits = Handoff.objects.filter(wait_open=True)
    if username is not None:
        waits = waits.filter(wait_owner=username)
    return waits.count()


def false_completions(limit: int = LIST_LIMIT) -> list[Handoff]:
    """The open false completions: not accepted or resolved by an operator (receipts.actions.settle)."""
    return list(false_completions_query()[:limit])


def false_completions_query() -> QuerySet[Handoff]:
    """Every open false completion, newest first (a page slices it)."""
    return _open_false(_handoffs()).order_by("-updated_at", "-pk")


def false_completion_count() -> int:
    return _open_false(Handoff.objects.all()).count()


# A settled false completion keeps its verdict; its latest verdict change is the settlement.
SETTLEMENT_CAUSES = run_health.SETTLEMENT_CAUSES


def _open_false(handoffs: QuerySet[Handoff]) -> QuerySet[Handoff]:
    latest = VerdictChange.objects.filter(handoff=OuterRef("pk")).order_by("-at", "-pk").values("cause")[:1]
    found = handoffs.filter(verdict="FALSE_COMPLETE").annotate(latest_cause=Subquery(latest))
    return found.filter(Q(latest_cause__isnull=True) | ~Q(latest_cause__in=SETTLEMENT_CAUSES))


def runs(filters: RunFilters) -> QuerySet[Run]:
    """Runs matching `filters`, newest first, with their handoff counts and latest verdict."""
    found = Run.objects.all()
    handoffs = Handoff.objects.filter(run=OuterRef("pk"))
    if filters.verdict:
        found = found.filter(Exists(handoffs.filter(verdict=filters.verdict)))
    if filters.verdict == "HEALTHY":
        # A healthy handoff does not make a failing run look fine: a filter that claims health never lists one.
        found = found.exclude(health__in=run_health.ALARMING)
    if filters.agent:
        found = found.filter(Exists(handoffs.filter(Q(sender=filters.agent) | Q(receiver=filters.agent))))
    if filters.status:
        found = found.filter(status=filters.status)
    if filters.since:
        found = found.filter(created_at__gte=filters.since)
    if filters.until:
        found = found.filter(created_at__lt=filters.until)
    if filters.graph:
        found = found.filter(graph=filters.graph)
    if filters.route_version:
        found = found.filter(Exists(handoffs.filter(route_version=filters.route_version)))
    if filters.health:
        found = found.filter(health=filters.health)
    if filters.q:
        q = filters.q
        named = Q(handoff_id__icontains=q) | Q(sender__icontains=q) | Q(receiver__icontains=q)
        found = found.filter(Q(operation_id__icontains=q) | Q(graph__icontains=q) | Exists(handoffs.filter(named)))
    latest = Handoff.objects.filter(run=OuterRef("pk")).order_by("-updated_at", "-pk")
    return found.annotate(
        handoff_count=Count("handoffs"),
        problem_count=Count("handoffs", filter=~Q(handoffs__verdict__in=("HEALTHY", "WAITING_ON_APPROVAL"))),
        latest_verdict=Subquery(latest.values("verdict")[:1]),
    ).order_by("-created_at", "-pk")


def run_timeline(run: Run, limit: int = TIMELINE_LIMIT, page: int = 1) -> list[HandoffView]:
    """The run's handoffs in the order they were created, each with its grid: the latest `limit` on page 1,
    the `limit` before those on page 2, and so on."""
    start = (max(page, 1) - 1) * limit
    recent = list(Handoff.objects.filter(run=run).order_by("-created_at", "-pk")[start : start + limit])
    recent.reverse()
    for handoff in recent:
        handoff.run = run  # already loaded: no query per row
    return [HandoffView(h, grid) for h, grid in zip(recent, boundary_grids(recent), strict=True)]


def exact_match(text: str) -> tuple[int, int | None] | None:
    """(run pk, handoff pk or None) when `text` is exactly an operation id or a handoff id; one query."""
    runs = Run.objects.filter(operation_id=text).order_by().values_list("pk", Value(None, output_field=IntegerField()))
    handoffs = Handoff.objects.filter(handoff_id=text).order_by().values_list("run_id", "pk")
    found = list(runs.union(handoffs, all=True)[:1]) if text else []
    return tuple(found[0]) if found else None


def search_choices() -> tuple[list[str], list[str]]:
    """The graphs runs were started on and the route versions handoffs declared (one query, both indexed)."""
    kind = Value("", output_field=CharField())
    graphs = Run.objects.exclude(graph="").order_by().values_list(kind, "graph")
    versions = Handoff.objects.exclude(route_version="").order_by().values_list(Value("v"), "route_version")
    rows = sorted(graphs.union(versions))  # union drops the duplicates
    return [name for k, name in rows if not k], [name for k, name in rows if k]


def missing_context_keys(handoffs: Iterable[Handoff]) -> dict[int, list[str]]:
    """Per context-incomplete handoff, the keys its route contract requires that its context lacks.

    The same rule as the classifier (receipts.verdicts: the contract's list wins over what the created
    receipt claims), answered with names rather than a count; one query, none without such handoffs.
    """
    incomplete = [h for h in handoffs if h.verdict == "CONTEXT_INCOMPLETE"]
    if not incomplete:
        return {}
    created = {h.pk: h.created_part or {} for h in incomplete}
    versions = {c.get("route_version") or h.route_version for h, c in zip(incomplete, created.values(), strict=True)}
    routes = dict(ContractVersion.objects.filter(version__in=versions).values_list("version", "routes"))
    missing = {}
    for h in incomplete:
        part = created[h.pk]
        sender, receiver = part.get("sender") or h.sender, part.get("receiver") or h.receiver
        required = (routes.get(part.get("route_version") or h.route_version) or {}).get(sender, {}).get(receiver)
        if required is None:
            required = part.get("required_context_keys") or []
        present = set((h.reduced_part or {}).get("context_keys") or [])
        missing[h.pk] = [key for key in required if key not in present]
    return missing


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


# --- run health and time on the overview ---------------------------------------------

SPARK_BUCKETS = 12
WINDOW_ROW_LIMIT = 20_000  # handoffs or waits read per window: beyond it the figures cover the newest


@dataclass(frozen=True)
class ReportGroup:
    """Identical middleware reports of one run (same agent, kind and detail), counted."""

    pk: int
    agent: str
    kind: str
    detail: dict
    count: int
    recorded_at: datetime


def run_status_counts(since: datetime | None = None) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(health level, runs) worst first and (task status, runs), for runs active since `since`; one query."""
    found = Run.objects.all() if since is None else Run.objects.filter(updated_at__gte=since)
    by_health: dict[str, int] = {}
    by_status: dict[str, int] = {}
    for level, status, n in found.order_by().values_list("health", "status").annotate(n=Count("pk")):
        by_health[level] = by_health.get(level, 0) + n
        by_status[status] = by_status.get(status, 0) + n
    health = [(level, by_health.get(level, 0)) for level in run_health.LEVELS]
    if by_health.get(""):
        health.append(("", by_health[""]))
    return health, [(status, by_status.get(status, 0)) for status in Run.Status.values]


@dataclass
class WindowStats:
    since: datetime
    handoffs: int = 0
    problem_handoffs: int = 0
    waits_opened: int = 0
    problem_trend: list[int] = field(default_factory=list)
    wait_trend: list[int] = field(default_factory=list)
    handoff_p50: float | None = None  # seconds
    handoff_p95: float | None = None
    wait_p50: float | None = None
    wait_p95: float | None = None
    waits_resolved: int = 0


def window_stats(since: datetime, now: datetime) -> WindowStats:
    """Handoffs and waits in [since, now): counts, a trend in SPARK_BUCKETS buckets, median and p95 durations.

    Two queries whatever the window: the window's handoffs (times and verdicts only) and its waits
    (first wait receipt = opened, first resolved one = resolved).
    """
    stats = WindowStats(since=since)
    rows = list(
        Handoff.objects.filter(created_at__gte=since)
        .order_by("-created_at")
        .values_list("created_at", "verdict", "created_part__at", "destination_part__started_at", "classified_at")[
            :WINDOW_ROW_LIMIT
        ]
    )
    problems = [r[0] for r in rows if r[1] not in ("HEALTHY", "WAITING_ON_APPROVAL")]
    stats.handoffs, stats.problem_handoffs = len(rows), len(problems)
    stats.problem_trend = _buckets(problems, since, now)
    stats.handoff_p50, stats.handoff_p95 = _percentiles(_handoff_seconds(row) for row in rows)
    earlier = Receipt.objects.filter(handoff=OuterRef("handoff"), part="wait", recorded_at__lt=since)
    waits = list(
        Receipt.objects.filter(part="wait", recorded_at__gte=since)
        .filter(~Exists(earlier))
        .order_by()
        .values("handoff")
        .annotate(opened=Min("recorded_at"), resolved=Min("recorded_at", filter=Q(payload__resolved=True)))
        .values_list("opened", "resolved")[:WINDOW_ROW_LIMIT]
    )
    stats.waits_opened = len(waits)
    stats.wait_trend = _buckets([opened for opened, _ in waits], since, now)
    done = [(resolved - opened).total_seconds() for opened, resolved in waits if resolved is not None]
    stats.waits_resolved = len(done)
    stats.wait_p50, stats.wait_p95 = _percentiles(done)
    return stats


def _handoff_seconds(row: tuple) -> float | None:
    # created.at -> destination.started_at, or the time it was classified when no destination started.
    _, _, created, started, classified = row
    start, end = _parse_time(created), _parse_time(started) or classified
    if start is None or end is None:
        return None
    return max((end - start).total_seconds(), 0.0)


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _buckets(times: Iterable[datetime], since: datetime, now: datetime) -> list[int]:
    counts = [0] * SPARK_BUCKETS
    width = max((now - since).total_seconds(), 1.0) / SPARK_BUCKETS
    for at in times:
        index = int((at - since).total_seconds() // width)
        counts[min(max(index, 0), SPARK_BUCKETS - 1)] += 1
    return counts


def _percentiles(values: Iterable[float | None]) -> tuple[float | None, float | None]:
    """Median and 95th percentile (nearest rank) of the known values; (None, None) without any."""
    known = sorted(v for v in values if v is not None)
    if not known:
        return None, None

    def rank(p: float) -> float:
        return known[min(len(known) - 1, max(0, math.ceil(p * len(known)) - 1))]

    return rank(0.5), rank(0.95)


def run_report_groups(run: Run, limit: int = REPORT_LIMIT) -> list[ReportGroup]:
    """The run's middleware reports, identical ones (agent, kind, detail) grouped with a count; newest first."""
    rows = (
        MiddlewareReport.objects.filter(run=run)
        .order_by()
        .values("agent", "kind", "detail")
        .annotate(n=Count("pk"), last=Max("recorded_at"), first=Min("pk"))
        .order_by("-last", "-first")[:limit]
    )
    return [ReportGroup(r["first"], r["agent"], r["kind"], r["detail"], r["n"], r["last"]) for r in rows]
