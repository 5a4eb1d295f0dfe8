"""How many: the overview's handoffs per verdict and runs per health, each bounded so it stays cheap, and the
marker the pages poll to learn that something changed."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from django.db import connection
from django.db.models import BooleanField, Count, ExpressionWrapper, Max, QuerySet
from django.db.models.expressions import RawSQL

from receipts.ingest import health as run_health
from receipts.ingest import silence
from receipts.models import Handoff, Run
from receipts.org.teams import EVERYTHING, Scope
from receipts.queries import compiled
from receipts.queries.compiled import slot
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


# The overview's tile (and the runs list's verdict filter value) for handoffs whose failing verdict is not final.
IN_PROGRESS = "IN_PROGRESS"
# The verdicts a handoff can hold while in progress (receipts.ingest.due).
DUE_VERDICTS = (*run_health.DUE_PARTS, "UNCERTAIN")
# The task statuses the pages count and filter by: a silent observed run (issue 29 §5) is its own, after running.
_AFTER_RUNNING = Run.Status.values.index(Run.Status.RUNNING) + 1
TASK_STATUSES = (*Run.Status.values[:_AFTER_RUNNING], silence.SILENT, *Run.Status.values[_AFTER_RUNNING:])

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


def bounded_count(queryset: QuerySet, bound: int = COUNT_BOUND, *, order: tuple[str, ...] = ()) -> BoundedCount:
    """How many rows `queryset` has, counting no further than `bound` + 1 (one query, at most that many rows).

    `order` (the list's own) counts the rows in the order the list reads them: where the matches are all among
    the newest rows (a time window on the handoffs), the database stops at the bound there instead of reading
    every older row first (the runs of a 7-day verdict filter at 50k runs: 4k buffers instead of 13k). Elsewhere
    no order lets it count the cheapest way it finds.
    """
    return BoundedCount.of(queryset.order_by(*order).values("pk")[: bound + 1].count(), bound)


def overview_counts(
    since: datetime | None = None,
    bound: int = VERDICT_COUNT_BOUND,
    counted: Mapping[str, int] | None = None,
    *,
    seen: Scope = EVERYTHING,
    pending: Mapping[str, int] | None = None,
) -> list[tuple[str, BoundedCount]]:
    """(tile, number of handoffs created since `since`, or ever) for every verdict, worst first, and IN_PROGRESS;
    each counted up to `bound`, one query (none when `counted` and `pending` give them: a long window's rollup
    counts and its handoffs in progress, `window_stats`).

    Each verdict's count reads at most `bound` + 1 entries of an index (the verdict index, or the window's
    `handoff_created_verdict`), so the overview does not scan every handoff; past the bound it says "10,000+".
    Settled verdicts (spec v1.2): a handoff whose failing verdict still waits for a due part is counted on the
    IN_PROGRESS tile (from the unsettled handoffs' index), never under that verdict.
    """
    if counted is not None:
        return _settled_counts(counted, in_progress_counts(since, seen=seen) if pending is None else pending, bound)

    def build() -> compiled.CompiledValues:
        at = None if since is None else slot("since")
        found = Handoff.objects.all() if at is None else Handoff.objects.filter(created_at__gte=at)
        counted_sql, counted_params = _count_per_verdict(seen.apply(found, "run__"), VERDICT_ORDER, bound)
        pending_sql, pending_params = _count_per_verdict(_in_progress(at, seen), DUE_VERDICTS, bound, IN_PROGRESS)
        return compiled.CompiledValues(f"{counted_sql} UNION ALL {pending_sql}", (*counted_params, *pending_params), ())

    counting = compiled.kept(("overview counts", since is None, bound, seen.key), build)
    values = dict(counting.rows(since=connection.ops.adapt_datetimefield_value(since)))
    pending = {v: values[f"{IN_PROGRESS}:{v}"] for v in DUE_VERDICTS}
    return _settled_counts(values, pending, bound)


def _count_per_verdict(rows: QuerySet[Handoff], verdicts: tuple[str, ...], bound: int, prefix: str = "") -> tuple:
    """SQL and parameters of (tile, n) per verdict: COUNT over a LIMITed subquery (the ORM cannot count a
    sliced subquery) whose verdict is the row's, so the subquery is compiled once for all the verdicts (a
    compile per verdict was most of the overview's counting CPU on every live render). The tile is the
    verdict, after `prefix` and a colon when one is given."""
    one = rows.filter(verdict=RawSQL("verdicts.verdict", ())).order_by().values("pk")[: bound + 1]
    sql, params = one.query.sql_with_params()
    tiles = [f"{prefix}:{v}" if prefix else v for v in verdicts]
    names = " UNION ALL ".join(["SELECT %s AS tile, %s AS verdict"] * len(verdicts))
    counted = f"SELECT verdicts.tile, (SELECT COUNT(*) FROM ({sql}) AS one) FROM ({names}) AS verdicts"
    return counted, [*params, *(x for pair in zip(tiles, verdicts, strict=True) for x in pair)]


def in_progress_counts(since: datetime | None = None, *, seen: Scope = EVERYTHING) -> dict[str, int]:
    """Per verdict, the handoffs created since `since` whose failing verdict is not one yet (`due_condition`):
    a part is still due and the handoff is unsettled. One query over the unsettled handoffs' index."""
    return dict(in_progress_query(since, seen=seen))


def in_progress_query(since: datetime | None = None, *, seen: Scope = EVERYTHING) -> QuerySet:
    """(verdict, n) rows of `in_progress_counts`, for a caller that sends them with another query."""
    return _in_progress(since, seen).order_by().values_list("verdict").annotate(n=Count("pk"))


def _in_progress(since: datetime | None, seen: Scope) -> QuerySet[Handoff]:
    found = Handoff.objects.filter(settled_at__isnull=True).filter(run_health.due_condition())
    return seen.apply(found if since is None else found.filter(created_at__gte=since), "run__")


def _settled_counts(
    counted: Mapping[str, int], pending: Mapping[str, int], bound: int
) -> list[tuple[str, BoundedCount]]:
    """Settled verdicts (spec v1.2) on the tiles: a handoff in progress is counted as IN_PROGRESS, never under
    the failing verdict it may still become; the IN_PROGRESS tile comes before the verdicts that wait or pass."""
    tiles = [(v, BoundedCount.of(max(counted.get(v, 0) - pending.get(v, 0), 0), bound)) for v in VERDICT_ORDER]
    at = VERDICT_ORDER.index("UNCERTAIN")
    return [*tiles[:at], (IN_PROGRESS, BoundedCount.of(sum(pending.values()), bound)), *tiles[at:]]


def run_status_counts(
    since: datetime | None = None, *, seen: Scope = EVERYTHING
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(health level, runs) worst first and (task status, runs), for runs active since `since`; one query.

    A silent observed run is counted as "silent", not as running (issue 29 §5)."""

    def build() -> QuerySet:
        found = Run.objects.all() if since is None else Run.objects.filter(updated_at__gte=slot("since"))
        found = seen.apply(found).annotate(quiet=ExpressionWrapper(silence.silent_condition(), BooleanField()))
        return found.order_by().values_list("health", "status", "quiet").annotate(n=Count("pk"))

    at = connection.ops.adapt_datetimefield_value(since)
    rows = compiled.once(("run status counts", since is None, seen.key), build, values=True).rows(since=at)
    by_health: dict[str, int] = {}
    by_status: dict[str, int] = {}
    for level, status, quiet, n in rows:
        by_health[level] = by_health.get(level, 0) + n
        status = silence.SILENT if quiet else status
        by_status[status] = by_status.get(status, 0) + n
    health = [(level, by_health.get(level, 0)) for level in run_health.LEVELS]
    if by_health.get(""):
        health.append(("", by_health[""]))
    return health, [(status, by_status.get(status, 0)) for status in TASK_STATUSES]


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
