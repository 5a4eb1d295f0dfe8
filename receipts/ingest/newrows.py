"""New rows that may exist already: `INSERT … ON CONFLICT DO NOTHING RETURNING`, and new keys from a sequence.

A batch creates the runs and handoffs it did not find; another writer may have created some meanwhile
(`receipts.ingest.setwise` reads those back). The same statement can take the keys of rows the batch will
insert later, whole (`sqlsets.write_together`'s `new`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

from django.db import DEFAULT_DB_ALIAS, connection, router
from django.db.models import NOT_PROVIDED, ForeignKey
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from receipts.ingest import sqlsets  # its row statements (`_insert_sql`, `_quoted`): the same INSERT, more to it
from receipts.queries import prepared

_KEYS = "SELECT NULL, nextval(pg_get_serial_sequence(%s, %s)), {} FROM generate_series(1, %s)"


def built(model, **values):
    """`model(**values)`, a new row not saved yet (values by field name, a related object by its relation's name),
    made as `Model.from_db` makes a row read back: its fields' values put in place at once, the defaults of those
    not given taken as the constructor takes them. Where something listens to the model's construction
    (`pre_init`, `post_init`) or a router chooses databases, the constructor itself makes it.

    A batch makes a run and a handoff per handoff it creates: the constructor's work per field was a twentieth of
    the writer's CPU.
    """
    fixed, called, related, names = _blank(model)
    if related is None or pre_init.has_listeners(model) or post_init.has_listeners(model) or router.routers:
        return model(**values)
    obj = model.__new__(model)
    obj._state = state = ModelState()
    attrs = obj.__dict__
    attrs.update(fixed)
    for name, default in called:
        if name not in values:
            attrs[name] = default()
    for name, value in values.items():
        if name in related:
            # As the relation's descriptor sets it: the key, the object cached, the database its object's.
            key, target = related[name]
            attrs[key] = None if value is None else getattr(value, target)
            state.fields_cache[name] = value
            if value is not None:
                state.db = value._state.db or DEFAULT_DB_ALIAS
                value._state.db = value._state.db or DEFAULT_DB_ALIAS
        elif name in names:
            attrs[name] = value
        else:
            raise TypeError(f"{model.__name__}() got an unexpected keyword argument {name!r}")
    return obj


@functools.cache
def _blank(model) -> tuple[dict, tuple, dict | None, frozenset]:
    """`built`'s plan for `model`: its fields' fixed defaults (attname -> value), those it calls ((name,
    callable), …), its forward relations (name -> (attname, the related field's)), every attname; None for
    the relations when a field's kind is not one `built` makes as the constructor does (a database default, a
    relation other than a foreign key, one with a default)."""
    fixed, called, related = {}, [], {}
    names = frozenset(field.attname for field in model._meta.concrete_fields)
    for field in model._meta.concrete_fields:
        if field.db_default is not NOT_PROVIDED or field.generated:
            return {}, (), None, names
        if field.is_relation:
            if type(field) is not ForeignKey or field.has_default():
                return {}, (), None, names
            related[field.name] = (field.attname, field.target_field.attname)
        if field.has_default() and callable(field.default):
            called.append((field.attname, field.default))
        else:
            fixed[field.attname] = field.get_default()
    return fixed, tuple(called), related, names


def _keys_params(model, count: int) -> list:
    return [model._meta.db_table, model._meta.pk.column, count]


def insert_new(model, objs: Iterable, key: str, *, keys: tuple | None = None) -> list | tuple[list, list[int]]:
    """Insert those of `objs` (new rows of `model`) no unique field of which is taken yet, in one statement;
    the objects inserted, their primary keys set (matched by `key`, a unique field): as a read back would give
    them, for models whose every column the insert writes (no database default, no trigger changing the row).

    On PostgreSQL (`INSERT … ON CONFLICT DO NOTHING RETURNING`). Elsewhere `bulk_create` ignores the
    conflicts and sets no primary key: no object is returned, read them back. `keys` ((a model, a count), …),
    PostgreSQL only: the same statement also takes that many new primary keys of each model, and
    the result is (the objects inserted, a list of the keys of each).
    """
    return send_new(model, objs, key, keys=keys)()


def send_new(model, objs: Iterable, key: str, *, keys: tuple | None = None) -> Callable[[], list | tuple]:
    """`insert_new`, sent now: a function giving its result once read (after the statements sent with it in a
    `together` block: reading it inside would wait for its answer alone)."""
    objs = list(objs)
    wanted = [(i, model_, count) for i, (model_, count) in enumerate(keys or ()) if count]
    if not objs and not wanted:
        return lambda: ([], [[] for _ in keys]) if keys is not None else []
    if connection.vendor != "postgresql":
        model.objects.bulk_create(objs, ignore_conflicts=True)
        return list
    meta = model._meta
    column, pk = sqlsets._quoted(meta.get_field(key).column), sqlsets._quoted(meta.pk.column)
    returning = f" ON CONFLICT DO NOTHING RETURNING {column}, {pk}"
    sql, params = "", []
    if objs:
        sql, document = sqlsets._insert_sql(model, objs)
        sql, params = sql + returning, [document]
    if wanted:
        keyed = " UNION ALL ".join(_KEYS.format(i) for i, _, _ in wanted)
        sql = f"WITH w AS ({sql}) SELECT {column}, {pk}, NULL::int FROM w UNION ALL {keyed}" if objs else keyed
        for _, model_, count in wanted:
            params += _keys_params(model_, count)
    cursor = prepared.cursor()  # its plan cannot depend on the tables' sizes: prepared once per connection
    cursor.execute(sql, params)

    def found() -> list | tuple:
        with cursor:
            rows = cursor.fetchall()
        inserted = {row[0]: row[1] for row in rows if row[0] is not None}
        made = []
        for obj in objs:
            if (value := inserted.get(getattr(obj, key))) is not None:
                obj.pk = value
                obj._state.adding, obj._state.db = False, DEFAULT_DB_ALIAS  # as `from_db` leaves a row read back
                made.append(obj)
        if keys is None:
            return made
        taken: list[list[int]] = [[] for _ in keys]
        for name, value, which in rows if wanted else ():
            if name is None:
                taken[which].append(value)
        return made, taken

    return found
