"""The overview's long windows from hourly rollups: handoffs per creation hour and current verdict.

The database keeps `VerdictBucket` itself (migration 0021's triggers on the handoff table: +1 for a new
handoff, -1 / +1 when its verdict or creation time changes, -1 when it is deleted), inside the transaction
that changed the handoff, so a verdict that changes after its hour was counted moves with it: the rollup
can never show a handoff as healthy that is not. Deltas are appended, never updated (no two writers wait on
one counter row); `compact` folds them into one row per hour, verdict and owner key (beat, every minute).

Each row also names its handoffs' run's graph and source name (migration 0027): a team's scope filters the rows
at read time, as it filters runs (`Scope.q`), so a team's long window is as cheap as an admin's and a graph that
changes hands moves its counts at once.

A window reads the whole hours it covers from the rollup and the part-hour at its start from the handoffs
(an index range of at most an hour): exact to the handoff, whatever the window's length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction
from django.db.models import Case, Count, IntegerField, Max, QuerySet, Sum, Value, When

from receipts.models import Handoff, Run, VerdictBucket
from receipts.org.teams import EVERYTHING, Scope
from receipts.queries import compiled
from receipts.queries.compiled import slot

HOUR = timedelta(hours=1)


@dataclass
class WindowCounts:
    """Handoffs created since a time by current verdict, and per trend bucket (each bucket's verdicts)."""

    by_verdict: dict[str, int] = field(default_factory=dict)
    by_bucket: list[dict[str, int]] = field(default_factory=list)
    extra: dict[str, int] = field(default_factory=dict)  # the rows `window_counts` was also asked for


def floor_hour(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def trend_edges(since: datetime, now: datetime, buckets: int) -> list[datetime]:
    """`buckets` contiguous intervals from `since`, each starting on an hour after the first: the rollup's
    hours then fall wholly inside one interval. Needs a bucket width of at least an hour."""
    width = (now - since) / buckets
    return [since, *(floor_hour(since + width * i) for i in range(1, buckets))]


def window_counts(
    since: datetime,
    edges: list[datetime],
    *,
    seen: Scope = EVERYTHING,
    also: Callable[[object], QuerySet] | None = None,
) -> WindowCounts:
    """Handoffs created at or after `since` by verdict, whole and per interval of `edges`, of the runs `seen`
    sees; two queries. `also(since)`, (verdict, n) rows of handoffs made from the window's start and the scope
    alone, is sent with the first and comes back in `extra` (the overview's handoffs in progress, at no query of
    their own). Both queries are compiled once per scope and number of edges (`compiled.once`): the times are
    slots."""
    first_hour = floor_hour(since) + (HOUR if floor_hour(since) < since else timedelta(0))
    counts = WindowCounts(by_bucket=[{} for _ in edges])
    adapt = connection.ops.adapt_datetimefield_value
    times = {"since": adapt(since), "first_hour": adapt(first_hour)}
    times.update((f"edge{n}", adapt(edge)) for n, edge in enumerate(edges))

    def head() -> QuerySet:
        window = Handoff.objects.filter(created_at__gte=slot("since"), created_at__lt=slot("first_hour"))
        rows = seen.apply(window, "run__").order_by().values_list("verdict")
        rows = rows.annotate(n=Count("pk"), side=Value(0, IntegerField()))
        if also is not None:
            rows = rows.union(also(slot("since")).annotate(side=Value(1, IntegerField())), all=True)
        return rows

    for verdict, n, side in compiled.once(("rollup head", also is not None, seen.key), head, values=True).rows(**times):
        if side:
            counts.extra[verdict] = counts.extra.get(verdict, 0) + n
        else:
            _add(counts, 0, verdict, n)

    def hours() -> QuerySet:
        # The database sums each interval's hours (at most SPARK_BUCKETS x verdicts rows come back, not an hour each).
        interval = Case(
            *(When(bucket__gte=slot(f"edge{n}"), then=Value(n)) for n in reversed(range(len(edges)))),
            default=Value(0),
            output_field=IntegerField(),
        )
        # The rows' graph and source_name are their runs': the scope filters them as it filters runs.
        found = seen.apply(VerdictBucket.objects.filter(bucket__gte=slot("first_hour")))
        return found.annotate(interval=interval).order_by().values_list("interval", "verdict").annotate(n=Sum("n"))

    for index, verdict, n in compiled.once(("rollup hours", len(edges), seen.key), hours, values=True).rows(**times):
        _add(counts, index, verdict, n)
    return counts


def _add(counts: WindowCounts, index: int, verdict: str, n: int) -> None:
    if n:
        counts.by_verdict[verdict] = counts.by_verdict.get(verdict, 0) + n
        bucket = counts.by_bucket[index]
        bucket[verdict] = bucket.get(verdict, 0) + n


def compact() -> int:
    """Fold the deltas into one row per hour, verdict and owner key (zero sums dropped); how many rows remain.

    PostgreSQL: one statement deletes the rows it sees and inserts their sums, so a delta committed meanwhile
    is either folded or left for the next time, never lost. SQLite has one writer at a time: the rows up to
    the highest id seen are folded in one transaction.
    """
    table = VerdictBucket._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"WITH moved AS (DELETE FROM {table} RETURNING bucket, verdict, graph, source_name, n) "
                f"INSERT INTO {table} (bucket, verdict, graph, source_name, n) "
                "SELECT bucket, verdict, graph, source_name, SUM(n) FROM moved "
                "GROUP BY bucket, verdict, graph, source_name HAVING SUM(n) <> 0"
            )
        else:
            upto = VerdictBucket.objects.aggregate(last=Max("pk"))["last"] or 0
            sums = list(
                VerdictBucket.objects.filter(pk__lte=upto)
                .order_by()
                .values_list("bucket", "verdict", "graph", "source_name")
                .annotate(total=Sum("n"))
            )
            VerdictBucket.objects.filter(pk__lte=upto).delete()
            VerdictBucket.objects.bulk_create(
                VerdictBucket(bucket=b, verdict=v, graph=g, source_name=s, n=n) for b, v, g, s, n in sums if n
            )
    return VerdictBucket.objects.count()


def rebuild() -> None:
    """Count every handoff into the rollup afresh (after a bulk load that bypassed the triggers, e.g. TRUNCATE)."""
    with transaction.atomic():
        VerdictBucket.objects.all().delete()
        table, handoffs, runs = VerdictBucket._meta.db_table, Handoff._meta.db_table, Run._meta.db_table
        hour = (
            "date_trunc('hour', h.created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
            if connection.vendor == "postgresql"
            else "strftime('%Y-%m-%d %H:00:00', h.created_at)"
        )
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (bucket, verdict, graph, source_name, n) "
                f"SELECT {hour}, h.verdict, r.graph, r.source_name, COUNT(*) FROM {handoffs} h "
                f"JOIN {runs} r ON r.id = h.run_id GROUP BY 1, 2, 3, 4"
            )
