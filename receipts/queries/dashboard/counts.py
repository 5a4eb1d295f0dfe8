"""How many: the overview's handoffs per verdict and runs per health, each bounded so it stays cheap, and the
marker the pages poll to learn that something changed."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from django.db import connection
from django.db.models import Count, Max, QuerySet

from receipts.ingest import health as run_health
from receipts.models import Handoff, Run
from receipts.org.teams import EVERYTHING, Scope
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
