"""Read-side queries for the operator pages.

Every function here runs a fixed number of queries however many runs and
handoffs exist (select_related, one aggregate per question, bounded slices),
so the pages stay fast as the tables grow. Nothing here changes state.

Counts at scale (issue 13), one rule each:
- a run's handoffs, problem handoffs, open false completions and latest verdict are
  stored on the run (receipts.ingest.health.refresh keeps them), never counted per request;
- the open false completions in total are the sum of the runs' stored counts (a
  partial index holds only the runs that have any);
- a list's total is counted up to `COUNT_BOUND` and shown as "1,000+" past it
  (`bounded_count`): an honest "many" rather than scanning every match per request;
- the overview's handoffs per verdict are counted up to `VERDICT_COUNT_BOUND` each,
  one short index range per verdict (`overview_counts`);
- open waits are counted exactly: the partial index `handoff_open_waits` holds only them.

Settled verdicts (spec v1.2): a handoff in progress (receipts.ingest.health.due_part) is shown as
such, and the run page reads its run row in the same statement as its handoffs, so the
run's health and the handoffs' verdicts always come from one snapshot.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import (
    Count,
    Exists,
    F,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KT

from receipts.ingest import health as run_health
from receipts.models import ContractVersion, Handoff, MiddlewareReport, Receipt, Run, VerdictChange
from receipts.org.teams import EVERYTHING, Scope
from receipts.queries import rollups
from receipts.verdicts import BOUNDARIES
from receipts.verdicts.bundle import VERDICTS

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
    health: str = ""  # receipts.ingest.health's level
    sender: str = ""  # with `receiver`: runs with a handoff over that route (the team map's arrows)
    receiver: str = ""


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


COUNT_BOUND = 1_000
VERDICT_COUNT_BOUND = 10_000


class BoundedCount(int):
    """A count that stopped at its bound: prints "1,000+" past it, the exact number below it."""

    bound: int | None = None

    @classmethod
    def of(cls, counted: int, bound: int) -> BoundedCount:
        count = cls(min(counted, bound))
        count.bound = bound if counted > bound else None
        return count

    @property
    def more(self) -> bool:
        return self.bound is not None

    def __str__(self) -> str:
        return f"{self.bound:,}+" if self.more else super().__str__()


def bounded_count(queryset: QuerySet, bound: int = COUNT_BOUND) -> BoundedCount:
    """How many rows `queryset` has, counting no further than `bound` + 1 (one query, at most that many rows)."""
    return BoundedCount.of(queryset.order_by().values("pk")[: bound + 1].count(), bound)


def overview_counts(
    since: datetime | None = None,
    bound: int = VERDICT_COUNT_BOUND,
    counted: Mapping[str, int] | None = None,
    *,
    seen: Scope = EVERYTHING,
) -> list[tuple[str, BoundedCount]]:
    """(verdict, number of handoffs created since `since`, or ever) for every verdict, worst first; each
    counted up to `bound`, one query (none when `counted` gives them: a long window's rollup counts).

    Each verdict's count reads at most `bound` + 1 entries of an index (the verdict index, or the window's
    `handoff_created_verdict`), so the overview does not scan every handoff; past the bound it says "10,000+".
    """
    if counted is not None:
        return [(v, BoundedCount.of(counted.get(v, 0), bound)) for v in VERDICT_ORDER]
    # COUNT over a LIMITed subquery per verdict, all in one SELECT (the ORM cannot count a sliced subquery).
    found = Handoff.objects.all() if since is None else Handoff.objects.filter(created_at__gte=since)
    found = seen.apply(found, "run__")
    selects, params = [], []
    for n, verdict in enumerate(VERDICT_ORDER):
        sliced = found.filter(verdict=verdict).order_by().values("pk")[: bound + 1]
        sql, sql_params = sliced.query.sql_with_params()
        selects.append(f"(SELECT COUNT(*) FROM ({sql}) AS verdict_{n})")
        params.extend(sql_params)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(selects)}", params)
        counted = dict(zip(VERDICT_ORDER, cursor.fetchone(), strict=True))
    return [(v, BoundedCount.of(counted[v], bound)) for v in VERDICT_ORDER]


def _handoffs(seen: Scope = EVERYTHING) -> QuerySet[Handoff]:
    # The larger JSON parts stay in the database: pages show names, codes and times only. The reduced and
    # destination parts are read: whether they are present decides a verdict in progress (health.due_part).
    return seen.apply(Handoff.objects.select_related("run").defer("created_part", "verification_part"), "run__")


def newest_handoffs(limit: int = NEWEST_LIMIT, *, seen: Scope = EVERYTHING) -> list[Handoff]:
    return list(_handoffs(seen).order_by("-updated_at", "-pk")[:limit])


def open_waits(username: str | None = None, limit: int = LIST_LIMIT, *, seen: Scope = EVERYTHING) -> list[Handoff]:
    """Open waits, the deadline due soonest first (no deadline last); only `username`'s when given."""
    return list(open_waits_query(username, seen=seen)[:limit])


def open_waits_query(username: str | None = None, *, seen: Scope = EVERYTHING) -> QuerySet[Handoff]:
    """Every open wait (a page slices it), the deadline due soonest first; only `username`'s when given."""
    waits = _handoffs(seen).filter(wait_open=True)
    if username is not None:
        waits = waits.filter(wait_owner=username)
    return waits.order_by(F("wait_deadline").asc(nulls_last=True), "pk")


def open_wait_count(username: str | None = None, *, seen: Scope = EVERYTHING) -> int:
    waits = seen.apply(Handoff.objects.filter(wait_open=True), "run__")
    if username is not None:
        waits = waits.filter(wait_owner=username)
    return waits.count()


def false_completions(limit: int = LIST_LIMIT, *, seen: Scope = EVERYTHING) -> list[Handoff]:
    """The open false completions: not accepted or resolved by an operator (receipts.actions.settle)."""
    return list(false_completions_query(seen=seen)[:limit])


def false_completions_query(*, seen: Scope = EVERYTHING) -> QuerySet[Handoff]:
    """Every open false completion, newest first (a page slices it)."""
    return _open_false(_handoffs(seen)).order_by("-updated_at", "-pk")


def false_completion_count(*, seen: Scope = EVERYTHING) -> int:
    """Open false completions in total: the runs' stored counts, summed over the runs that have any."""
    found = seen.apply(Run.objects.filter(open_false_count__gt=0))
    return found.aggregate(n=Sum("open_false_count"))["n"] or 0


# A settled false completion keeps its verdict; its latest verdict change is the settlement.
SETTLEMENT_CAUSES = run_health.SETTLEMENT_CAUSES


def _open_false(handoffs: QuerySet[Handoff]) -> QuerySet[Handoff]:
    latest = VerdictChange.objects.filter(handoff=OuterRef("pk")).order_by("-at", "-pk").values("cause")[:1]
    found = handoffs.filter(verdict="FALSE_COMPLETE").annotate(latest_cause=Subquery(latest))
    return found.filter(Q(latest_cause__isnull=True) | ~Q(latest_cause__in=SETTLEMENT_CAUSES))


def runs(filters: RunFilters, *, seen: Scope = EVERYTHING) -> QuerySet[Run]:
    """Runs matching `filters`, newest first, with their handoff counts and latest verdict."""
    found = seen.apply(Run.objects.all())
    handoffs = Handoff.objects.filter(run=OuterRef("pk"))
    if filters.verdict:
        # A handoff in progress has no verdict yet: the row shows it in progress, so the filter does not list it.
        final = handoffs.filter(verdict=filters.verdict).exclude(run_health.due_condition())
        found = found.filter(Exists(final))
    if filters.verdict == "HEALTHY":
        # A healthy handoff does not make a failing run look fine: a filter that claims health never lists one.
        found = found.exclude(health__in=run_health.ALARMING)
    if filters.agent:
        found = found.filter(Exists(handoffs.filter(Q(sender=filters.agent) | Q(receiver=filters.agent))))
    if filters.sender or filters.receiver:
        route = {k: v for k, v in (("sender", filters.sender), ("receiver", filters.receiver)) if v}
        found = found.filter(Exists(handoffs.filter(**route)))
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
        found = found.filter(pk__in=_matching_run_ids(filters.q))
    return found.order_by("-created_at", "-pk")


def _matching_run_ids(q: str) -> QuerySet:
    # A union of two index lookups (pg_trgm GIN indexes on PostgreSQL, migrations 0012 and 0020): the runs
    # whose operation id, graph or scenario (shown on every row) contains `q`, and those with a handoff whose
    # id or agent does.
    named = Q(handoff_id__icontains=q) | Q(sender__icontains=q) | Q(receiver__icontains=q)
    own_fields = Q(operation_id__icontains=q) | Q(graph__icontains=q) | Q(scenario__icontains=q)
    own = Run.objects.filter(own_fields).order_by().values("pk")
    return own.union(Handoff.objects.filter(named).order_by().values("run_id"))


@dataclass
class KeysetPage:
    """One page of a list ordered newest first by (`field`, pk), found from a cursor rather than an offset.

    `older` / `newer` are the cursors (a row's pk) for the next page either way, None at an end. The
    Page-like attributes (`paginator.count`, `has_other_pages`) serve the list templates.
    """

    object_list: list
    count: BoundedCount
    older: int | None = None
    newer: int | None = None
    keyset = True

    @property
    def paginator(self) -> KeysetPage:
        return self

    @property
    def has_other_pages(self) -> bool:
        return self.older is not None or self.newer is not None

    def __iter__(self):
        return iter(self.object_list)

    def __len__(self) -> int:
        return len(self.object_list)


@dataclass
class OffsetPage:
    """A numbered page whose total is known from elsewhere (a stored count): "next" comes from the rows
    themselves (one more is read), so the links stay right even while the stored total lags a change.

    Django's Page interface as far as the list templates read it.
    """

    object_list: list
    number: int
    size: int
    count: int
    has_next: bool

    @property
    def paginator(self) -> OffsetPage:
        return self

    @property
    def num_pages(self) -> int:
        return max(math.ceil(self.count / self.size), self.number + self.has_next, 1)

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_other_pages(self) -> bool:
        return self.has_previous or self.has_next

    def previous_page_number(self) -> int:
        return self.number - 1

    def next_page_number(self) -> int:
        return self.number + 1

    def start_index(self) -> int:
        return (self.number - 1) * self.size + 1 if self.object_list else 0

    def end_index(self) -> int:
        return (self.number - 1) * self.size + len(self.object_list)

    def __iter__(self):
        return iter(self.object_list)


def offset_page(queryset: QuerySet, number: object, size: int, *, count: int) -> OffsetPage:
    """Page `number` (1 when it is not a positive whole number) of `queryset`, `count` rows in all."""
    number = int(number) if str(number).isdigit() and int(number) > 0 else 1
    start = (number - 1) * size
    rows = list(queryset[start : start + size + 1])
    return OffsetPage(rows[:size], number, size, count, has_next=len(rows) > size)


def keyset_page(
    queryset: QuerySet,
    *,
    field: str,
    size: int,
    older: int | None = None,
    newer: int | None = None,
    count_bound: int = COUNT_BOUND,
) -> KeysetPage:
    """The `size` rows of `queryset` after the row `older` (or before the row `newer`), newest first by
    (`field`, pk); the first page without either. Three queries at most: the bounded count, the cursor row,
    the rows.

    Stable while rows arrive: a row is on exactly one page whichever way one walks (pk breaks ties). A
    cursor row that no longer exists starts from the first page.
    """
    count = bounded_count(queryset, count_bound)
    if not count:
        return KeysetPage([], count)
    cursor = older if older is not None else newer
    anchor = queryset.model.objects.filter(pk=cursor).values_list(field, flat=True).first() if cursor else None
    if anchor is None:
        rows = list(queryset.order_by(f"-{field}", "-pk")[: size + 1])
        return KeysetPage(rows[:size], count, older=rows[size - 1].pk if len(rows) > size else None)
    if older is not None:
        after = queryset.filter(Q(**{f"{field}__lt": anchor}) | Q(**{field: anchor, "pk__lt": older}))
        rows = list(after.filter(**{f"{field}__lte": anchor}).order_by(f"-{field}", "-pk")[: size + 1])
        return KeysetPage(
            rows[:size],
            count,
            older=rows[size - 1].pk if len(rows) > size else None,
            newer=rows[0].pk if rows else older,
        )
    before = queryset.filter(Q(**{f"{field}__gt": anchor}) | Q(**{field: anchor, "pk__gt": newer}))
    rows = list(before.filter(**{f"{field}__gte": anchor}).order_by(field, "pk")[: size + 1])
    if len(rows) <= size:  # back at the top: the first page, whole
        return keyset_page(queryset, field=field, size=size, count_bound=count_bound)
    shown = rows[:size][::-1]
    return KeysetPage(shown, count, older=shown[-1].pk, newer=shown[0].pk)


def run_timeline(run: Run, limit: int = TIMELINE_LIMIT, page: int = 1) -> list[HandoffView]:
    """The run's handoffs in the order they were created, each with its grid: the latest `limit` on page 1,
    the `limit` before those on page 2, and so on.

    The run row is read in the same statement as the handoffs (one snapshot: the health that row stores was
    computed from exactly these verdicts) and every handoff's `run` is that one object: a page shows it, not
    the `run` it was given, which may be older (read before a receipt committed).
    """
    start = (max(page, 1) - 1) * limit
    rows = Handoff.objects.filter(run=run).select_related("run").order_by("-created_at", "-pk")
    recent = list(rows[start : start + limit])
    recent.reverse()
    for handoff in recent:
        handoff.run = recent[0].run  # one run object for the page, read with its handoffs
    return [HandoffView(h, grid) for h, grid in zip(recent, boundary_grids(recent), strict=True)]


def exact_match(text: str, *, seen: Scope = EVERYTHING) -> tuple[int, int | None] | None:
    """(run pk, handoff pk or None) when `text` is exactly an operation id or a handoff id; one query."""
    runs = seen.apply(Run.objects.filter(operation_id=text)).order_by()
    runs = runs.values_list("pk", Value(None, output_field=IntegerField()))
    handoffs = seen.apply(Handoff.objects.filter(handoff_id=text), "run__").order_by().values_list("run_id", "pk")
    found = list(runs.union(handoffs, all=True)[:1]) if text else []
    return tuple(found[0]) if found else None


def search_choices(*, seen: Scope = EVERYTHING) -> tuple[list[str], list[str]]:
    """The graphs runs were started on and the route versions handoffs declared; one query.

    Each list is a loose index scan (a recursive CTE stepping from one distinct value to the next through
    the column's index), so it costs a few index probes per distinct value, not a read of every row. A
    team's member is offered the graphs their teams own (issue 22 §2), never another team's names.
    """
    graphs = _distinct_sql(Run, "graph", "graphs")
    versions = _distinct_sql(Handoff, "route_version", "versions")
    shown, params = "", ()
    if not seen.everything:  # each graph only if one of its runs is in scope (an index probe per graph)
        visible = seen.apply(Run.objects.filter(graph=RawSQL("graphs.v", ()))).order_by().values("pk")[:1]
        sql, params = visible.query.sql_with_params()
        shown = f" AND EXISTS ({sql})"
    sql = f"WITH RECURSIVE {graphs}, {versions} SELECT '', v FROM graphs WHERE v IS NOT NULL{shown} "
    sql += "UNION ALL SELECT 'v', v FROM versions WHERE v IS NOT NULL"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = sorted(cursor.fetchall())
    return [name for k, name in rows if not k], [name for k, name in rows if k]


def _distinct_sql(model, field: str, name: str) -> str:
    table, column = model._meta.db_table, model._meta.get_field(field).column
    step = f'SELECT MIN("{column}") FROM "{table}" WHERE "{column}" >'
    return f"{name}(v) AS ({step} '' UNION ALL SELECT ({step} {name}.v) FROM {name} WHERE {name}.v IS NOT NULL)"


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
    """Per handoff, each boundary's status and when the receipt proving it arrived; one query.

    The deciding boundary of a handoff in progress is "waiting" (for its due part), not "fail". Each handoff
    gets `first_arrived` (part -> when its first receipt arrived), which dates a verdict in progress.
    """
    handoffs = list(handoffs)
    arrived: dict[tuple[int, str], datetime] = {}
    first: dict[int, dict[str, datetime]] = {}
    for row in (
        Receipt.objects.filter(handoff__in=[h.pk for h in handoffs])
        .order_by()
        .values("handoff_id", "part")
        .annotate(at=Max("recorded_at"), first=Min("recorded_at"))
    ):
        arrived[(row["handoff_id"], row["part"])] = row["at"]
        first.setdefault(row["handoff_id"], {})[row["part"]] = row["first"]
    grids = []
    for handoff in handoffs:
        handoff.first_arrived = first.get(handoff.pk, {})
        due = run_health.due_part(handoff)
        grid = []
        for name, parts in BOUNDARY_PARTS.items():
            status = handoff.boundaries.get(name, "not_reached")
            if due and name == handoff.boundary and status == "fail":
                status = "waiting"
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
WINDOW_ROW_LIMIT = 20_000  # waits read per window: beyond it the figures cover the newest
DURATION_SAMPLE = 1_000  # the handoff durations' median and p95 are of the window's newest this many


@dataclass(frozen=True)
class ReportGroup:
    """Identical middleware reports of one run (same agent, kind and detail), counted."""

    pk: int
    agent: str
    kind: str
    detail: dict
    count: int
    recorded_at: datetime


def run_status_counts(
    since: datetime | None = None, *, seen: Scope = EVERYTHING
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(health level, runs) worst first and (task status, runs), for runs active since `since`; one query."""
    found = Run.objects.all() if since is None else Run.objects.filter(updated_at__gte=since)
    found = seen.apply(found)
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
    by_verdict: dict[str, int] | None = None  # a long window's handoffs per verdict (the rollup's), else None


# A window this long or longer reads its whole hours from the rollup (receipts.queries.rollups): its trend buckets
# are then two hours or more, and start on the hour.
ROLLUP_FROM = timedelta(hours=12)


def window_stats(since: datetime, now: datetime, *, seen: Scope = EVERYTHING) -> WindowStats:
    """Handoffs and waits in [since, now): counts, a trend in SPARK_BUCKETS buckets, median and p95 durations.

    A fixed number of queries whatever the window. The handoff counts of a short window are index ranges
    (`handoff_created_verdict` holds the verdict, so they never read the table); a window of ROLLUP_FROM or
    more reads them from the hourly rollup plus the part-hour at its start, so its cost does not grow with
    its handoffs. Then the newest `DURATION_SAMPLE` handoffs' times for the durations, and the waits opened
    in the window (first wait receipt = opened, first resolved one = resolved).
    """
    stats = WindowStats(since=since)
    # The hourly rollup counts every team's handoffs: a narrowed scope counts its own (issue 22 §2).
    if now - since >= ROLLUP_FROM and seen.everything:
        edges = rollups.trend_edges(since, now, SPARK_BUCKETS)
        _rolled_counts(stats, since, edges)
    else:
        edges = _bucket_edges(since, now)
        _live_counts(stats, since, edges, seen)
    window = seen.apply(Handoff.objects.filter(created_at__gte=since), "run__")
    # The JSON times as text (KT): no JSON decoding per value.
    times = window.order_by("-created_at").values_list(
        KT("created_part__at"), KT("destination_part__started_at"), "classified_at"
    )[:DURATION_SAMPLE]
    stats.handoff_p50, stats.handoff_p95 = _percentiles(_handoff_seconds(row) for row in times)
    waits = _waits_opened(since, seen)
    stats.waits_opened = len(waits)
    stats.wait_trend = _buckets([opened for opened, _ in waits], edges)
    done = [(resolved - opened).total_seconds() for opened, resolved in waits if resolved is not None]
    stats.waits_resolved = len(done)
    stats.wait_p50, stats.wait_p95 = _percentiles(done)
    return stats


def _live_counts(stats: WindowStats, since: datetime, edges: list[datetime], seen: Scope) -> None:
    window = seen.apply(Handoff.objects.filter(created_at__gte=since), "run__")
    trend = {f"bucket_{i}": Count("created_at", filter=_in_bucket(edges, i)) for i in range(SPARK_BUCKETS)}
    problems = window.exclude(verdict__in=run_health.UNPROBLEMATIC).aggregate(n=Count("created_at"), **trend)
    stats.handoffs, stats.problem_handoffs = window.count(), problems["n"]
    stats.problem_trend = [problems[f"bucket_{i}"] for i in range(SPARK_BUCKETS)]


def _rolled_counts(stats: WindowStats, since: datetime, edges: list[datetime]) -> None:
    counted = rollups.window_counts(since, edges)
    problem = [v for v in VERDICT_ORDER if v not in run_health.UNPROBLEMATIC]
    stats.by_verdict = counted.by_verdict
    stats.handoffs = sum(counted.by_verdict.values())
    stats.problem_trend = [sum(bucket.get(v, 0) for v in problem) for bucket in counted.by_bucket]
    stats.problem_handoffs = sum(stats.problem_trend)


def _waits_opened(since: datetime, seen: Scope) -> list[tuple[datetime, datetime | None]]:
    """(opened, resolved or None) of the waits opened since `since`: the handoffs with a wait receipt in the
    window and none before it. Driven by the window's wait receipts (`receipt_waits_by_time`); the earlier
    ones are an anti-join (measured faster at 1M receipts than a lookup per receipt or the old
    all-receipts-of-those-handoffs grouping: 20 vs 25 and 22 ms server time for a 7-day window)."""
    earlier = Receipt.objects.filter(handoff=OuterRef("handoff"), part="wait", recorded_at__lt=since)
    in_window = seen.apply(Receipt.objects.filter(part="wait", recorded_at__gte=since), "handoff__run__")
    return list(
        in_window.filter(~Exists(earlier))
        .order_by()
        .values("handoff")
        .annotate(opened=Min("recorded_at"), resolved=Min("recorded_at", filter=Q(payload__resolved=True)))
        .values_list("opened", "resolved")[:WINDOW_ROW_LIMIT]
    )


def _bucket_edges(since: datetime, now: datetime) -> list[datetime]:
    width = max((now - since).total_seconds(), 1.0) / SPARK_BUCKETS
    return [since + timedelta(seconds=width * i) for i in range(SPARK_BUCKETS)]


def _in_bucket(edges: list[datetime], i: int) -> Q:
    # The last bucket is open-ended, like `_buckets` (a time at or after `now` lands in it).
    after = Q(created_at__gte=edges[i])
    return after & Q(created_at__lt=edges[i + 1]) if i + 1 < len(edges) else after


def _handoff_seconds(row: tuple) -> float | None:
    # created.at -> destination.started_at, or the time it was classified when no destination started.
    created, started, classified = row
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


def _buckets(times: Iterable[datetime], edges: list[datetime]) -> list[int]:
    """How many of `times` fall in each interval starting at an edge (before the first: the first; the last
    is open-ended)."""
    counts = [0] * len(edges)
    for at in times:
        counts[max(bisect.bisect_right(edges, at) - 1, 0)] += 1
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
