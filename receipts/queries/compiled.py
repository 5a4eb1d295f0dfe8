"""A queryset compiled once per process and run again with other values: for a page's queries whose shape is
fixed and whose building (the ORM's filters, joins, ordering and SQL) cost more CPU than the database spent
answering them (the run history's per-source queries: about half of its 10 ms a render at 1M receipts).

The values that change between requests are slots (`slot("run")`): a `%s` parameter the compiled SQL keeps in
its place, filled by name when the query runs. The rows come back as the ORM gives them (`ModelIterable`'s
steps): model instances with their `select_related` relations, deferred fields and annotations.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.query import get_related_populators


@dataclass(frozen=True)
class _Slot:
    name: str


def slot(name: str, sql: str = "%s") -> RawSQL:
    """A value given when the compiled query runs (`Compiled.rows(name=value)`), in a filter or a comparison;
    `sql` places it (`"%s::text[]"`: an array of ids)."""
    return RawSQL(sql, [_Slot(name)])


@dataclass(frozen=True)
class Compiled:
    """A queryset's SQL with its slots, and what turns its rows into the ORM's instances."""

    model: type
    sql: str
    params: tuple
    init_list: tuple[str, ...]  # the model's columns, [start:end] of each row
    start: int
    end: int
    populators: tuple  # select_related's
    annotations: tuple[tuple[str, int], ...]
    converters: tuple  # (position, converters, expression): the ORM's conversion of a column's value

    @classmethod
    def of(cls, queryset: QuerySet) -> Compiled:
        compiler = queryset.query.get_compiler(DEFAULT_DB_ALIAS)
        sql, params = compiler.as_sql()
        info, select = compiler.klass_info, compiler.select
        start, end = info["select_fields"][0], info["select_fields"][-1] + 1
        converters = compiler.get_converters([column for column, _, _ in select[: compiler.col_count]])
        return cls(
            model=info["model"],
            sql=sql,
            params=tuple(params),
            init_list=tuple(column[0].target.attname for column in select[start:end]),
            start=start,
            end=end,
            populators=tuple(get_related_populators(info, select, DEFAULT_DB_ALIAS)),
            annotations=tuple(compiler.annotation_col_map.items()),
            converters=tuple((i, *found) for i, found in converters.items()),
        )

    def rows(self, **values) -> list:
        """The instances the queryset gives with each slot's value (a datetime adapted as the ORM would)."""
        with self.send(**values) as cursor:
            return self.instances(cursor.fetchall())

    def send(self, **values):
        """Execute with each slot's value; the open cursor (in a pipeline, `sqlsets.together`, the rows arrive
        when fetched: `instances(cursor.fetchall())`)."""
        params = [values[p.name] if isinstance(p, _Slot) else p for p in self.params]
        cursor = connections[DEFAULT_DB_ALIAS].cursor()
        cursor.execute(self.sql, params)
        return cursor

    def instances(self, fetched: list, *, related: bool = True) -> list:
        """The fetched rows as the ORM's instances: converted, with `select_related` and annotations set;
        without `related`, only the model's own columns are converted and its `select_related` are not built
        (the caller sets one shared instance: the run page's handoffs are all of one run)."""
        db = connections[DEFAULT_DB_ALIAS]
        converters = self.converters if related else [c for c in self.converters if self.start <= c[0] < self.end]
        populators = self.populators if related else ()
        found = []
        for row in fetched:
            row = list(row)
            for i, functions, expression in converters:
                for convert in functions:
                    row[i] = convert(row[i], expression, db)
            obj = self.model.from_db(DEFAULT_DB_ALIAS, self.init_list, row[self.start : self.end])
            for populator in populators:
                populator.populate(row, obj)
            for name, at in self.annotations:
                setattr(obj, name, row[at])
            found.append(obj)
        return found
