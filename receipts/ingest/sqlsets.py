"""Set-based writes the ORM does not offer cheaply: many rows in one INSERT, many rows' values in one UPDATE.

On PostgreSQL the rows travel as one JSON document, read back by `jsonb_populate_recordset` with the table's
own row type (each value converted to its column's type by the server, lengths checked as on INSERT):
one parameter to send instead of one per value. The ORM's `bulk_create` sends `UNNEST` arrays that the
client-side cursor quotes element by element, and `bulk_update` a CASE WHEN per field and row: either
costs the recording process more CPU than PostgreSQL spends storing the rows. Other databases keep
`bulk_create` and `bulk_update` (correct, slower).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import date

from django.db import DEFAULT_DB_ALIAS, connection, connections
from psycopg.types.json import Jsonb


def insert_rows(model, objs: Iterable, *, ignore_conflicts: bool = False) -> None:
    """Insert `objs` (new rows of `model`, their primary keys left to the database) in one statement.

    As `bulk_create` stores them, except that the objects' primary keys stay unset on PostgreSQL.
    """
    objs = list(objs)
    if not objs:
        return
    if connection.vendor != "postgresql":
        model.objects.bulk_create(objs, ignore_conflicts=ignore_conflicts)
        return
    _insert(model, objs, " ON CONFLICT DO NOTHING" if ignore_conflicts else "")


def insert_new(model, objs: Iterable, key: str) -> list:
    """Insert those of `objs` (new rows of `model`) no unique field of which is taken yet, in one statement;
    the objects inserted, their primary keys set (matched by `key`, a unique field): as a read back would give
    them, for models whose every column the insert writes (no database default, no trigger changing the row).

    On PostgreSQL (`INSERT … ON CONFLICT DO NOTHING RETURNING`). Elsewhere `bulk_create` ignores the
    conflicts and sets no primary key: no object is returned, read them back.
    """
    objs = list(objs)
    if not objs:
        return []
    if connection.vendor != "postgresql":
        model.objects.bulk_create(objs, ignore_conflicts=True)
        return []
    meta = model._meta
    column, pk = _quoted(meta.get_field(key).column), _quoted(meta.pk.column)
    inserted = dict(_insert(model, objs, f" ON CONFLICT DO NOTHING RETURNING {column}, {pk}"))
    found = []
    for obj in objs:
        if (value := inserted.get(getattr(obj, key))) is not None:
            obj.pk = value
            obj._state.adding, obj._state.db = False, DEFAULT_DB_ALIAS  # as `from_db` leaves a row read back
            found.append(obj)
    return found


def _insert(model, objs: list, suffix: str) -> list[tuple]:
    """INSERT the objects' rows (every concrete field but the primary key) on PostgreSQL; the rows returned."""
    meta = model._meta
    fields = [field for field in meta.concrete_fields if not field.generated and field is not meta.pk]
    rows = [[field.pre_save(obj, True) for field in fields] for obj in objs]
    table, columns = _quoted(meta.db_table), ", ".join(_quoted(field.column) for field in fields)
    sql = (
        f"INSERT INTO {table} ({columns}) SELECT {columns} FROM jsonb_populate_recordset(NULL::{table}, %s::jsonb)"
        + suffix
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [_document(fields, rows)])
        return cursor.fetchall() if cursor.description else []


def update_rows(model, objs: Iterable, names: Sequence[str]) -> None:
    """Write the fields `names` of every object in `objs` (rows of `model`, by primary key) in one statement."""
    objs = list(objs)
    if not objs:
        return
    if connection.vendor != "postgresql":
        model.objects.bulk_update(objs, names)
        return
    meta = model._meta
    fields = [meta.pk, *(meta.get_field(name) for name in names)]
    rows = [[getattr(obj, field.attname) for field in fields] for obj in objs]
    table, pk = _quoted(meta.db_table), _quoted(meta.pk.column)
    assignments = ", ".join(f"{_quoted(field.column)} = v.{_quoted(field.column)}" for field in fields[1:])
    sql = (
        f"UPDATE {table} SET {assignments} FROM jsonb_populate_recordset(NULL::{table}, %s::jsonb) AS v"
        f" WHERE {table}.{pk} = v.{pk}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [_document(fields, rows)])


def _document(fields: Sequence, rows: Iterable[Sequence]) -> str:
    """The rows as one JSON array of objects keyed by column, each value as the field prepares it for saving."""
    db = connections[DEFAULT_DB_ALIAS]  # not the `connection` proxy: it costs a thread-local lookup per use
    columns = [field.column for field in fields]
    plain = [_PLAIN.get(field.get_internal_type()) for field in fields]
    found = [
        {
            # None is SQL NULL for every field; a plain value is written as it is (`_PLAIN`).
            column: value if value is None or type(value) is kind else _json_value(field, value, db)
            for column, field, kind, value in zip(columns, fields, plain, row, strict=True)
        }
        for row in rows
    ]
    return json.dumps(found, ensure_ascii=False, separators=(",", ":"))


# Fields whose value of exactly this type is prepared for saving as itself (an int as psycopg's Int4 or
# Int8 of it): the same JSON either way.
_PLAIN = {
    "CharField": str,
    "TextField": str,
    "BooleanField": bool,
    "IntegerField": int,
    "BigIntegerField": int,
    "PositiveIntegerField": int,
    "PositiveBigIntegerField": int,
}


def _json_value(field, value: object, db) -> object:
    prepared = field.get_db_prep_save(value, db)
    if isinstance(prepared, Jsonb):  # a JSONField's value: SQL NULL stays None, anything else is the document
        if field.encoder is not None:
            msg = f"{field} has its own JSON encoder: write it with the ORM"
            raise TypeError(msg)
        return prepared.obj
    if isinstance(prepared, date):  # datetime too: ISO 8601 with its offset, read back to the microsecond
        return prepared.isoformat()
    return prepared


def _quoted(name: str) -> str:
    return connection.ops.quote_name(name)
