"""New rows that may exist already: `INSERT … ON CONFLICT DO NOTHING RETURNING`, and new keys from a sequence.

A batch creates the runs and handoffs it did not find; another writer may have created some meanwhile
(`receipts.ingest.setwise` reads those back). The same statement can take the keys of rows the batch will
insert later, whole (`sqlsets.write_together`'s `new`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.db import DEFAULT_DB_ALIAS, connection

from receipts.ingest import sqlsets  # its row statements (`_insert_sql`, `_quoted`): the same INSERT, more to it

_KEYS = "SELECT NULL, nextval(pg_get_serial_sequence(%s, %s)), {} FROM generate_series(1, %s)"


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
    cursor = connection.cursor()
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
