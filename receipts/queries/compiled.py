"""A queryset compiled once per process and run again with other values: for a page's queries whose shape is
fixed and whose building (the ORM's filters, joins, ordering and SQL) cost more CPU than the database spent
answering them (the run history's per-source queries: about half of its 10 ms a render at 1M receipts).

The values that change between requests are slots (`slot("run")`): a `%s` parameter the compiled SQL keeps in
its place, filled by name when the query runs. The rows come back as the ORM gives them (`ModelIterable`'s
steps): model instances with their `select_related` relations, deferred fields and annotations.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.query import get_related_populators

from receipts.queries.prepared import cursor as bound_cursor

T = TypeVar("T")


@dataclass(frozen=True)
class _Slot:
    name: str


def parameter(name: str) -> _Slot:
    """A slot as a parameter of SQL written around a compiled query (a `%s` of its own)."""
    return _Slot(name)


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

    def send(self, *, bound: bool = False, **values):
        """Execute with each slot's value; the open cursor (in a pipeline, `sqlsets.together`, the rows arrive
        when fetched: `instances(cursor.fetchall())`). `bound` (PostgreSQL only): the values bound by the
        server, not quoted into the text (`receipts.queries.prepared`; not prepared: a read's plan depends on
        the tables)."""
        params = [values[p.name] if isinstance(p, _Slot) else p for p in self.params]
        cursor = bound_cursor(prepare=False) if bound else connections[DEFAULT_DB_ALIAS].cursor()
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


@dataclass(frozen=True)
class CompiledValues:
    """A `values()`/`values_list()` queryset's SQL with its slots: its rows as tuples, converted as the ORM would."""

    sql: str
    params: tuple
    converters: tuple

    @classmethod
    def of(cls, queryset: QuerySet, around: str = "") -> CompiledValues:
        """`around`: SQL the queryset's goes in, at `{}` (its columns are then not the queryset's: not converted)."""
        compiler = queryset.query.get_compiler(DEFAULT_DB_ALIAS)
        sql, params = compiler.as_sql()
        if around:
            return cls(sql=around.format(sql), params=tuple(params), converters=())
        converters = compiler.get_converters([column for column, _, _ in compiler.select[: compiler.col_count]])
        return cls(sql=sql, params=tuple(params), converters=tuple((i, *found) for i, found in converters.items()))

    def rows(self, **values) -> list[tuple]:
        params = [values[p.name] if isinstance(p, _Slot) else p for p in self.params]
        db = connections[DEFAULT_DB_ALIAS]
        with db.cursor() as cursor:
            cursor.execute(self.sql, params)
            fetched = cursor.fetchall()
        if not self.converters:
            return fetched
        found = []
        for row in fetched:
            row = list(row)
            for i, functions, expression in self.converters:
                for convert in functions:
                    row[i] = convert(row[i], expression, db)
            found.append(tuple(row))
        return found


KEPT_LIMIT = 512  # compiled queries kept per process: a few per page and scope (each team set has its own)
_kept: OrderedDict[tuple, object] = OrderedDict()
_kept_lock = threading.Lock()  # live renders run on several threads


def once(
    key: tuple | None, build: Callable[[], QuerySet], *, values: bool = False, around: str = ""
) -> Compiled | CompiledValues:
    """`build()`'s queryset compiled once per process for `key` (which names everything its SQL depends on but its
    slots: a page's query and its scope's `key`; see `kept`). `values`: rows as tuples (`around`:
    `CompiledValues.of`'s)."""
    return kept(key, lambda: CompiledValues.of(build(), around) if values else Compiled.of(build()))


def kept(key: tuple | None, make: Callable[[], T]) -> T:
    """What `make()` compiles, made once per process for `key` and kept while used (the least recently used go
    past KEPT_LIMIT); `key` None (a scope whose filter is a condition to compile): made on each call."""
    if key is None:
        return make()
    with _kept_lock:
        found = _kept.get(key)
        if found is not None:
            _kept.move_to_end(key)
            return found
    found = make()
    with _kept_lock:
        _kept[key] = found
        while len(_kept) > KEPT_LIMIT:
            _kept.popitem(last=False)
    return found


def forget() -> None:
    """Drop every kept query (a test that counts compiles starts from none)."""
    with _kept_lock:
        _kept.clear()
