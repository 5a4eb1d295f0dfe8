"""The names a set of teams owns, and the one query that reads them for a scope (`receipts.org.teams.Scope`).

A scope's filter compares a run's graph and source name with the names its teams own and the names any team claims:
subqueries, or (`Scope.resolved`) those names read once, with whether the runs no team claims are in scope, by
`resolution`'s query (compiled once per shape of scope: `receipts.queries.compiled.kept`).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import EmptyResultSet, FullResultSet
from django.db import DEFAULT_DB_ALIAS
from django.db.models import BooleanField, Exists, ExpressionWrapper, Q, QuerySet, Value
from django.db.models.sql import Query

from receipts.models import Team, TeamGraph, TeamSource
from receipts.queries import compiled


@dataclass(frozen=True)
class Owners:
    """The graphs and sources a set of teams owns, and those any team claims: subqueries, or the values they
    name (`Scope.resolved`)."""

    graphs: object
    sources: object
    claimed_graphs: object
    claimed_sources: object

    def q(self, run: str, unclaimed) -> Q:
        """`unclaimed` is a condition, or (`Scope.resolved`) a bool: then a term it decides is left out, and a
        scope of every run is `Q()` (no filter: no join to the run)."""
        # A list of no names leaves its term out (it matches nothing, or everything negated): no join to the run
        # for a term that cannot decide anything, e.g. when no team claims any graph or source.
        local = Q(**{f"{run}source_name": ""})
        claims = some(self.claimed_graphs) or some(self.claimed_sources)
        if unclaimed is True and not claims:
            return Q()  # every run is unclaimed (and nobody owns one)
        terms = []
        if unclaimed is not False:
            found = Q(unclaimed) if unclaimed is not True else None
            if claims:
                unclaimed_graph = local & ~Q(**{f"{run}graph__in": self.claimed_graphs})
                unclaimed_source = ~local & ~Q(**{f"{run}source_name__in": self.claimed_sources})
                unclaimed_name = unclaimed_graph | unclaimed_source
                found = unclaimed_name if found is None else found & unclaimed_name
            terms.append(found)
        if some(self.graphs):
            terms.append(local & Q(**{f"{run}graph__in": self.graphs}))
        if some(self.sources):
            terms.append(Q(**{f"{run}source_name__in": self.sources}))
        if not terms:
            return Q(Value(False))  # no run (compiles, where a lookup of no values would leave the query out)
        found = terms[0]
        for term in terms[1:]:
            found |= term
        return found


def some(names) -> bool:
    """Whether `names` (a subquery, or a list of values) may name anything."""
    return not isinstance(names, list) or bool(names)


UNCLAIMED = "unclaimed"  # the row of `Scope.resolved`'s query that says whether unclaimed runs are in scope


def resolution(teams: QuerySet[Team], unclaimed) -> compiled.CompiledValues:
    """`Scope.resolved`'s one query: (kind, name, mine) of every claimed graph and source, whether one of `teams`
    owns it, and a row of kind UNCLAIMED that says whether the runs no team claims are in scope."""
    unclaimed = Exists(teams.filter(owns_unclaimed=True)) if unclaimed is None else unclaimed
    mine = ExpressionWrapper(Q(team__in=teams), output_field=BooleanField())
    graphs = TeamGraph.objects.order_by().annotate(kind=Value("graph"), mine=mine)
    sources = TeamSource.objects.order_by().annotate(kind=Value("source"), mine=mine)
    rows = graphs.values_list("kind", "graph", "mine").union(
        sources.values_list("kind", "source_name", "mine"), all=True
    )
    sql, params = rows.query.sql_with_params()
    decided, decided_params = condition_sql(unclaimed)
    # Its answer in the name column ("y" or ""), whose type no team set changes (`mine` may be 0, not a bool).
    answer = f"SELECT %s, CASE WHEN {decided} THEN %s ELSE %s END, NULL"
    return compiled.CompiledValues(f"{answer} UNION ALL {sql}", (UNCLAIMED, *decided_params, "y", "", *params), ())


def condition_sql(condition) -> tuple[str, list]:
    """SQL and parameters of a condition that names no column of a row (its subqueries), to select as a value."""
    query = Query(Team)
    try:
        return query.get_compiler(DEFAULT_DB_ALIAS).compile(query.build_where(condition))
    except EmptyResultSet:  # a lookup of no values
        return "%s", [False]
    except FullResultSet:
        return "%s", [True]
