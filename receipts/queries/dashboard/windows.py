"""The overview's time window: handoffs and waits in it, their trend in buckets, median and p95 durations."""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Exists, Min, OuterRef, Q, QuerySet
from django.db.models.fields.json import KT

from receipts.ingest import health as run_health
from receipts.models import Handoff, Receipt
from receipts.org.teams import EVERYTHING, Scope
from receipts.queries import compiled, rollups
from receipts.queries.compiled import slot
from receipts.queries.dashboard.counts import VERDICT_ORDER, in_progress_query

SPARK_BUCKETS = 12
WINDOW_ROW_LIMIT = 20_000  # waits read per window: beyond it the figures cover the newest
DURATION_SAMPLE = 1_000  # the handoff durations' median and p95 are of the window's newest this many


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
    in_progress: dict[str, int] | None = None  # with `by_verdict`: those of them in progress, per verdict


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
    # The rollup's rows name their runs' graph and source: the scope filters them (issue 22 §2).
    if now - since >= ROLLUP_FROM:
        edges = rollups.trend_edges(since, now, SPARK_BUCKETS)
        _rolled_counts(stats, since, edges, seen)
    else:
        edges = _bucket_edges(since, now)
        _live_counts(stats, since, edges, seen)
    at = connection.ops.adapt_datetimefield_value(since)
    times = compiled.once(("window durations", seen.key), lambda: _durations_query(seen), values=True).rows(since=at)
    stats.handoff_p50, stats.handoff_p95 = _percentiles(_handoff_durations(times))
    waits = _waits_opened(since, seen)
    stats.waits_opened = len(waits)
    stats.wait_trend = _buckets([opened for opened, _ in waits], edges)
    done = [(resolved - opened).total_seconds() for opened, resolved in waits if resolved is not None]
    stats.waits_resolved = len(done)
    stats.wait_p50, stats.wait_p95 = _percentiles(done)
    return stats


def _durations_query(seen: Scope) -> QuerySet:
    """The newest `DURATION_SAMPLE` handoffs of the window (since the slot `since`): their times, the JSON ones as
    text (KT: no JSON decoding per value)."""
    window = seen.apply(Handoff.objects.filter(created_at__gte=slot("since")), "run__")
    return window.order_by("-created_at").values_list(
        KT("created_part__at"), KT("destination_part__started_at"), "classified_at"
    )[:DURATION_SAMPLE]


def _live_counts(stats: WindowStats, since: datetime, edges: list[datetime], seen: Scope) -> None:
    """One pass over the window's index range: every handoff, the problems, the problems per bucket.

    The ORM compiles only the window (its scope); the counts around it are SQL written once per process
    (`_counts_sql`): the ORM's fourteen filtered counts, built anew on every request, cost more CPU than the
    database spent counting (4.5 ms a render at 1M receipts)."""

    def build() -> compiled.CompiledValues:
        window = seen.apply(Handoff.objects.filter(created_at__gte=slot("since")), "run__")
        sql, params = window.order_by().values("created_at", "verdict").query.sql_with_params()
        before, after = _counts_sql(len(edges))
        edge_slots = [compiled.parameter(f"edge{i}") for i in range(len(edges))]
        bounds = [*(at for pair in itertools.pairwise(edge_slots) for at in pair), edge_slots[-1]]
        unproblematic = [*run_health.UNPROBLEMATIC]
        return compiled.CompiledValues(f"{before}{sql}{after}", (*bounds, *unproblematic, *params), ())

    adapt = connection.ops.adapt_datetimefield_value
    edge_values = {f"edge{i}": adapt(at) for i, at in enumerate(edges)}
    counting = compiled.kept(("window counts", len(edges), seen.key), build)
    [(n, problems, *trend)] = counting.rows(since=adapt(since), **edge_values)
    stats.handoffs, stats.problem_handoffs, stats.problem_trend = n, problems, trend


@functools.cache
def _counts_sql(buckets: int) -> tuple[str, str]:
    """The SQL before and after the window's query in `_live_counts`: how many rows, how many are problems, and
    the problems in each bucket (from its edge to the next one's; the last is open-ended like `_buckets`).
    Parameters: each bucket's edges, the unproblematic verdicts, then the window's."""
    edge = ["t >= %s AND t < %s"] * (buckets - 1) + ["t >= %s"]
    counts = ", ".join(["COUNT(*)", "COUNT(*) FILTER (WHERE p)"] + [f"COUNT(*) FILTER (WHERE p AND {e})" for e in edge])
    unproblematic = ", ".join(["%s"] * len(run_health.UNPROBLEMATIC))
    return (
        f"SELECT {counts} FROM (SELECT w.created_at AS t, w.verdict NOT IN ({unproblematic}) AS p FROM (",
        ") w) x",
    )


def _rolled_counts(stats: WindowStats, since: datetime, edges: list[datetime], seen: Scope) -> None:
    counted = rollups.window_counts(since, edges, seen=seen, also=lambda at: in_progress_query(at, seen=seen))
    stats.in_progress = counted.extra
    problem = [v for v in VERDICT_ORDER if v not in run_health.UNPROBLEMATIC]
    stats.by_verdict = counted.by_verdict
    stats.handoffs = sum(counted.by_verdict.values())
    stats.problem_trend = [sum(bucket.get(v, 0) for v in problem) for bucket in counted.by_bucket]
    stats.problem_handoffs = sum(stats.problem_trend)


def _waits_opened(since: datetime, seen: Scope) -> list[tuple[datetime, datetime | None]]:
    """(opened, resolved or None) of the waits opened since `since`: the handoffs with a wait receipt in the
    window and none before it. Driven by the window's wait receipts (`receipt_waits_by_time_handoff`); the earlier
    ones are an anti-join (measured faster at 1M receipts than a lookup per receipt or the old
    all-receipts-of-those-handoffs grouping: 20 vs 25 and 22 ms server time for a 7-day window)."""

    def build() -> QuerySet:
        earlier = Receipt.objects.filter(handoff=OuterRef("handoff"), part="wait", recorded_at__lt=slot("since"))
        in_window = seen.apply(Receipt.objects.filter(part="wait", recorded_at__gte=slot("since")), "handoff__run__")
        return (
            in_window.filter(~Exists(earlier))
            .order_by()
            .values("handoff")
            .annotate(opened=Min("recorded_at"), resolved=Min("recorded_at", filter=Q(payload__resolved=True)))
            .values_list("opened", "resolved")[:WINDOW_ROW_LIMIT]
        )

    at = connection.ops.adapt_datetimefield_value(since)
    return compiled.once(("waits opened", seen.key), build, values=True).rows(since=at)


def _bucket_edges(since: datetime, now: datetime) -> list[datetime]:
    width = max((now - since).total_seconds(), 1.0) / SPARK_BUCKETS
    return [since + timedelta(seconds=width * i) for i in range(SPARK_BUCKETS)]


def _handoff_durations(rows: Iterable[tuple]) -> list[float]:
    """Each row's seconds from created.at to destination.started_at, or to the time it was classified when no
    destination started; none for a row whose times are not known. One loop over the sample (a live render's
    thousand rows spent more in two function calls a row than in parsing)."""
    parse, seconds = datetime.fromisoformat, []
    for created, started, classified in rows:
        if not isinstance(created, str):
            continue
        try:
            start = parse(created.replace("Z", "+00:00"))
        except ValueError:
            continue
        end = None
        if isinstance(started, str):
            try:
                end = parse(started.replace("Z", "+00:00"))
            except ValueError:
                end = None
        end = end or classified
        if end is not None:
            seconds.append(max((end - start).total_seconds(), 0.0))
    return seconds


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
