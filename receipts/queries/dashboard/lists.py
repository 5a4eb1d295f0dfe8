"""The lists the pages show: newest handoffs, open waits, open false completions, and runs found by filters."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.db.models import Exists, F, IntegerField, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.expressions import RawSQL

from receipts.ingest import health as run_health
from receipts.ingest import silence
from receipts.models import Handoff, Run, VerdictChange
from receipts.org.teams import EVERYTHING, Scope
from receipts.queries import compiled
from receipts.queries.compiled import slot
from receipts.queries.dashboard.counts import IN_PROGRESS

NEWEST_LIMIT = 10
SOONEST_LIMIT = 10
LIST_LIMIT = 200


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


def _handoffs(seen: Scope = EVERYTHING) -> QuerySet[Handoff]:
    # The larger JSON parts stay in the database: pages show names, codes and times only. The reduced and
    # destination parts are read: whether they are present decides a verdict in progress (health.due_part).
    return seen.apply(Handoff.objects.select_related("run").defer("created_part", "verification_part"), "run__")


# The overview's lists and counts are compiled once per scope (`compiled.once`): building and compiling their
# querysets, the scope's filter in each, cost more CPU than the database spent answering them on every render.


def newest_handoffs(limit: int = NEWEST_LIMIT, *, seen: Scope = EVERYTHING) -> list[Handoff]:
    build = lambda: _handoffs(seen).order_by("-updated_at", "-pk")[:limit]  # noqa: E731
    return compiled.once(("newest", limit, seen.key), build).rows()


def open_waits(username: str | None = None, limit: int = LIST_LIMIT, *, seen: Scope = EVERYTHING) -> list[Handoff]:
    """Open waits, the deadline due soonest first (no deadline last); only `username`'s when given."""
    mine = username is not None
    build = lambda: open_waits_query(slot("owner") if mine else None, seen=seen)[:limit]  # noqa: E731
    return compiled.once(("open waits", mine, limit, seen.key), build).rows(owner=username)


def open_waits_query(username: str | None = None, *, seen: Scope = EVERYTHING) -> QuerySet[Handoff]:
    """Every open wait (a page slices it), the deadline due soonest first; only `username`'s when given."""
    waits = _handoffs(seen).filter(wait_open=True)
    if username is not None:
        waits = waits.filter(wait_owner=username)
    return waits.order_by(F("wait_deadline").asc(nulls_last=True), "pk")


def open_wait_count(username: str | None = None, *, seen: Scope = EVERYTHING) -> int:
    def build() -> QuerySet:
        waits = seen.apply(Handoff.objects.filter(wait_open=True), "run__")
        if username is not None:
            waits = waits.filter(wait_owner=slot("owner"))
        return waits.order_by().values("pk")

    key = ("open waits count", username is not None, seen.key)
    [(n,)] = compiled.once(key, build, values=True, around=_COUNT).rows(owner=username)
    return n


_COUNT = "SELECT COUNT(*) FROM ({}) AS found"


def false_completions(limit: int = LIST_LIMIT, *, seen: Scope = EVERYTHING) -> list[Handoff]:
    """The open false completions: not accepted or resolved by an operator (receipts.actions.settle)."""
    build = lambda: false_completions_query(seen=seen)[:limit]  # noqa: E731
    return compiled.once(("false completions", limit, seen.key), build).rows()


def false_completions_query(*, seen: Scope = EVERYTHING) -> QuerySet[Handoff]:
    """Every open false completion, newest first (a page slices it)."""
    return _open_false(_handoffs(seen)).order_by("-updated_at", "-pk")


def false_completion_count(*, seen: Scope = EVERYTHING) -> int:
    """Open false completions in total: the runs' stored counts, summed over the runs that have any."""
    build = lambda: seen.apply(Run.objects.filter(open_false_count__gt=0)).order_by().values("open_false_count")  # noqa: E731
    around = "SELECT SUM(found.open_false_count) FROM ({}) AS found"
    [(n,)] = compiled.once(("false count", seen.key), build, values=True, around=around).rows()
    return int(n or 0)


def open_totals(*, seen: Scope = EVERYTHING) -> tuple[int, int]:
    """`open_wait_count()` and `false_completion_count()`, in one query (the overview shows both)."""

    def make() -> compiled.CompiledValues:
        waits = seen.apply(Handoff.objects.filter(wait_open=True), "run__").order_by().values("pk")
        false = seen.apply(Run.objects.filter(open_false_count__gt=0)).order_by().values("open_false_count")
        (waits_sql, waits_params), (false_sql, false_params) = (q.query.sql_with_params() for q in (waits, false))
        counted = f"(SELECT COUNT(*) FROM ({waits_sql}) AS waits)"
        summed = f"(SELECT SUM(found.open_false_count) FROM ({false_sql}) AS found)"
        return compiled.CompiledValues(f"SELECT {counted}, {summed}", (*waits_params, *false_params), ())

    [(waits, false)] = compiled.kept(("open totals", seen.key), make).rows()
    return waits, int(false or 0)


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
    if filters.verdict == IN_PROGRESS:
        # The overview's "In progress" tile: runs with a handoff whose failing verdict is not final yet.
        found = found.filter(Exists(_in_window(handoffs.filter(run_health.due_condition()), filters)))
    elif filters.verdict:
        # A handoff in progress has no verdict yet: the row shows it in progress, so the filter does not list it.
        final = handoffs.filter(verdict=filters.verdict).exclude(run_health.due_condition())
        found = found.filter(Exists(_in_window(final, filters)))
    if filters.verdict == "HEALTHY":
        # A healthy handoff does not make a failing run look fine: a filter that claims health never lists one.
        found = found.exclude(health__in=run_health.ALARMING)
    if filters.agent:
        found = found.filter(Exists(handoffs.filter(Q(sender=filters.agent) | Q(receiver=filters.agent))))
    if filters.sender or filters.receiver:
        route = {k: v for k, v in (("sender", filters.sender), ("receiver", filters.receiver)) if v}
        found = found.filter(Exists(handoffs.filter(**route)))
    if filters.status == silence.SILENT:
        found = found.filter(silence.silent_condition())
    elif filters.status:
        found = found.filter(status=filters.status)
        if filters.status == Run.Status.RUNNING:
            found = found.exclude(silence.silent_condition())  # counted and listed as silent (issue 29 §5)
    if filters.since and not filters.verdict:
        found = found.filter(created_at__gte=filters.since)
    if filters.until and not filters.verdict:
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


def _in_window(handoffs: QuerySet[Handoff], filters: RunFilters) -> QuerySet[Handoff]:
    """With a verdict, the time filters are the handoffs' (as the overview's tiles count them): a tile's link lists
    the runs of exactly the handoffs it counted, even a run that began before the window."""
    if filters.since:
        handoffs = handoffs.filter(created_at__gte=filters.since)
    if filters.until:
        handoffs = handoffs.filter(created_at__lt=filters.until)
    return handoffs


def _matching_run_ids(q: str) -> QuerySet:
    # A union of two index lookups (pg_trgm GIN indexes on PostgreSQL, migrations 0012 and 0020): the runs
    # whose operation id, graph or scenario (shown on every row) contains `q`, and those with a handoff whose
    # id or agent does.
    named = Q(handoff_id__icontains=q) | Q(sender__icontains=q) | Q(receiver__icontains=q)
    own_fields = Q(operation_id__icontains=q) | Q(graph__icontains=q) | Q(scenario__icontains=q)
    own = Run.objects.filter(own_fields).order_by().values("pk")
    return own.union(Handoff.objects.filter(named).order_by().values("run_id"))


def exact_match(text: str, *, seen: Scope = EVERYTHING) -> tuple[int, int | None] | None:
    """(run pk, handoff pk or None) when `text` is exactly one run's operation id or one handoff's id; one query.

    An id that several sides use (issue 29 §4: a source's ids live in its own namespace) names no one run: None,
    and the search lists them all."""
    runs = seen.apply(Run.objects.filter(operation_id=text)).order_by()
    runs = runs.values_list("pk", Value(None, output_field=IntegerField()))
    handoffs = seen.apply(Handoff.objects.filter(handoff_id=text), "run__").order_by().values_list("run_id", "pk")
    found = list(runs.union(handoffs, all=True)[:2]) if text else []
    return tuple(found[0]) if len(found) == 1 else None


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
        # A scalar subquery, run once per graph: PostgreSQL turns an EXISTS into a semi-join that reads every
        # run's graph (11 ms at 50k runs instead of a few probes).
        shown = f" AND ({sql}) IS NOT NULL"
    sql = f"WITH RECURSIVE {graphs}, {versions} SELECT '', v FROM graphs WHERE v IS NOT NULL{shown} "
    sql += "UNION ALL SELECT 'v', v FROM versions WHERE v IS NOT NULL"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = sorted(cursor.fetchall())
    return [name for k, name in rows if not k], [name for k, name in rows if k]


def distinct_values(model, field: str) -> list[str]:
    """The non-empty values of an indexed text column, sorted: a loose index scan like `search_choices`'s (a few
    index probes per value), where a DISTINCT reads every row (the audit log's actions, one query)."""
    sql = f"WITH RECURSIVE {_distinct_sql(model, field, 'found')} SELECT v FROM found WHERE v IS NOT NULL ORDER BY v"
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return [value for (value,) in cursor.fetchall()]


def _distinct_sql(model, field: str, name: str) -> str:
    table, column = model._meta.db_table, model._meta.get_field(field).column
    step = f'SELECT MIN("{column}") FROM "{table}" WHERE "{column}" >'
    return f"{name}(v) AS ({step} '' UNION ALL SELECT ({step} {name}.v) FROM {name} WHERE {name}.v IS NOT NULL)"
