"""Set-based writes the ORM does not offer cheaply: many rows' different values in one UPDATE.

`bulk_update` builds a CASE WHEN per field and row (its expressions cost more CPU than the statement);
on PostgreSQL `update_rows` sends `UPDATE … FROM (VALUES …)` instead, each value cast to its column's
type. Other databases keep `bulk_update` (correct, slower).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.db import connection


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
    quote = connection.ops.quote_name
    row = "(" + ", ".join(f"%s::{field.cast_db_type(connection)}" for field in fields) + ")"
    params = [field.get_db_prep_save(getattr(obj, field.attname), connection) for obj in objs for field in fields]
    table, pk = quote(meta.db_table), quote(meta.pk.column)
    columns = ", ".join(quote(field.column) for field in fields)
    assignments = ", ".join(f"{quote(field.column)} = v.{quote(field.column)}" for field in fields[1:])
    sql = (
        f"UPDATE {table} SET {assignments} FROM (VALUES {', '.join([row] * len(objs))}) AS v ({columns}) "
        f"WHERE {table}.{pk} = v.{pk}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
