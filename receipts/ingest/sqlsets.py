"""Set-based writes the ORM does not offer cheaply: many rows in one INSERT, many rows' values in one UPDATE.

On PostgreSQL the rows travel as one JSON document, read back by `jsonb_populate_recordset` with the table's
own row type (each value converted to its column's type by the server, lengths checked as on INSERT):
one parameter to send instead of one per value. The ORM's `bulk_create` sends `UNNEST` arrays that the
client-side cursor quotes element by element, and `bulk_update` a CASE WHEN per field and row: either
costs the recording process more CPU than PostgreSQL spends storing the rows. Other databases keep
`bulk_create` and `bulk_update` (correct, slower).

A row only written (never used as an object afterwards) may be given as a mapping of its fields' attnames to
their values as stored, every field given, instead of a model instance: building a Django instance of a model
costs more than the rest of the row's way to the database (`insert_rows`, `update_rows`, `write_together`).
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import date, datetime

from django.db import DEFAULT_DB_ALIAS, connection, connections
from psycopg.types.json import Jsonb


@contextlib.contextmanager
def together() -> Iterator[None]:
    """Send the statements executed inside to PostgreSQL without waiting for each one's answer (psycopg's
    pipeline mode): statements that do not need each other's rows cost one round trip (the transaction's BEGIN
    with them), in the order sent. A statement's rows arrive when fetched (waiting for those before it too);
    its errors are Django's. Elsewhere each statement runs as it is executed.

    On a loaded machine each round trip waits for both processes to be scheduled: a batch's wall time went
    more to its round trips than to what PostgreSQL did in them.
    """
    if connection.vendor != "postgresql":
        yield
        return
    connection.ensure_connection()
    with connection.wrap_database_errors, connection.connection.pipeline():
        yield


def insert_rows(model, objs: Iterable, *, ignore_conflicts: bool = False) -> None:
    """Insert `objs` (new rows of `model`, their primary keys left to the database) in one statement.

    As `bulk_create` stores them, except that the objects' primary keys stay unset on PostgreSQL.
    """
    objs = list(objs)
    if not objs:
        return
    if connection.vendor != "postgresql":
        model.objects.bulk_create(_instances(model, objs), ignore_conflicts=ignore_conflicts)
        return
    _insert(model, objs, " ON CONFLICT DO NOTHING" if ignore_conflicts else "")


def _insert(model, objs: list, suffix: str) -> list[tuple]:
    """INSERT the objects' rows (every concrete field but the primary key) on PostgreSQL; the rows returned."""
    sql, document = _insert_sql(model, objs)
    with connection.cursor() as cursor:
        cursor.execute(sql + suffix, [document])
        return cursor.fetchall() if cursor.description else []


def _insert_sql(model, objs: list, *, keyed: bool = False) -> tuple[str, str]:
    sql, shape = _insert_statement(model, keyed)
    fields = shape.fields
    rows = [
        [obj[field.attname] for field in fields]
        if isinstance(obj, Mapping)
        else [field.pre_save(obj, True) for field in fields]
        for obj in objs
    ]
    return sql, shape.document(rows)


@functools.cache
def _insert_statement(model, keyed: bool = False) -> tuple[str, _Shape]:
    """`_insert_sql`'s statement and the rows' shape (every concrete field but the primary key, unless `keyed`),
    built once."""
    meta = model._meta
    shape = _Shape([field for field in meta.concrete_fields if not field.generated and (keyed or field is not meta.pk)])
    table, columns = _quoted(meta.db_table), ", ".join(_quoted(field.column) for field in shape.fields)
    sql = f"INSERT INTO {table} ({columns}) SELECT {columns} FROM jsonb_populate_recordset(NULL::{table}, %s::jsonb)"
    return sql, shape


def write_together(updates: Sequence[tuple], inserts: Sequence[tuple], new: tuple | None = None) -> Callable[[], set]:
    """`update_rows(model, objs, names)` for each of `updates`, then `insert_rows(model, objs)` for each of
    `inserts`: on PostgreSQL in one statement (data-modifying WITH queries, one round trip), elsewhere one each.

    `new` (model, objs), PostgreSQL only: rows inserted whole, their primary keys given (`newrows.send_new`), those a
    unique field of which another row holds already skipped (`ON CONFLICT DO NOTHING`). The result is a function
    giving the set of the primary keys inserted (the caller tells the skipped ones by their absence): read it after
    the statements sent with this one (`together`: reading it inside would wait for its answer alone).

    The parts see the same snapshot, not each other's rows: none may read what another writes (an UPDATE of
    rows and INSERTs of rows that refer to them is fine; foreign keys are checked at commit).
    """
    updates = [(model, list(objs), names) for model, objs, names in updates if objs]
    inserts = [(model, list(objs)) for model, objs in inserts if objs]
    new_model, new_objs = new if new is not None else (None, [])
    new_objs = list(new_objs)
    if connection.vendor != "postgresql":
        if new_objs:
            msg = "rows with their keys given are inserted together on PostgreSQL only"
            raise NotImplementedError(msg)
        for model, objs, names in updates:
            update_rows(model, objs, names)
        for model, objs in inserts:
            insert_rows(model, objs)
        return set
    parts = [_update_sql(model, objs, names) for model, objs, names in updates]
    parts += [_insert_sql(model, objs) for model, objs in inserts]
    if new_objs:
        pk = _quoted(new_model._meta.pk.column)
        sql, document = _insert_sql(new_model, new_objs, keyed=True)
        parts.append((f"{sql} ON CONFLICT DO NOTHING RETURNING {pk}", document))
        parts.append((f"SELECT {pk} FROM w{len(parts) - 1}", None))
    if not parts:
        return set
    *first, (sql, _) = parts
    if first:
        sql = "WITH " + ", ".join(f"w{i} AS ({part})" for i, (part, _) in enumerate(first)) + " " + sql
    params = [document for _, document in parts if document is not None]
    cursor = connection.cursor()
    cursor.execute(sql, params)
    if not new_objs:
        cursor.close()
        return set

    def inserted() -> set:
        with cursor:
            return {key for (key,) in cursor.fetchall()}

    return inserted


def update_rows(model, objs: Iterable, names: Sequence[str], *, add: str | None = None) -> dict:
    """Write the fields `names` of every object in `objs` (rows of `model`, by primary key) in one statement.

    `add` names an integer field each object holds an increment of (0: none): the row's field grows by it,
    and the result maps each primary key to the field's new value (`UPDATE … RETURNING`; elsewhere a second
    statement, `receipts.ingest.sequence.next_seqs`, which only knows the runs' `seq`).
    """
    objs = list(objs)
    if not objs:
        return {}
    if connection.vendor != "postgresql":
        objs = _instances(model, objs)
        if names:
            model.objects.bulk_update(objs, names)
        if add is None:
            return {}
        from receipts.ingest.sequence import next_seqs

        return next_seqs({obj.pk: getattr(obj, add) for obj in objs})
    with connection.cursor() as cursor:
        cursor.execute(*update_statement(model, objs, names, add))
        return dict(cursor.fetchall()) if add else {}


def update_statement(model, objs: list, names: Sequence[str], add: str | None) -> tuple[str, list]:
    """`update_rows`' statement and parameters on PostgreSQL (for a caller that sends it itself)."""
    sql, document = _update_sql(model, objs, names, add)
    return sql, [document]


def _instances(model, objs: list) -> list:
    """The objects, a row given as a mapping made a `model` instance (for the ORM's bulk methods)."""
    return [model(**obj) if isinstance(obj, Mapping) else obj for obj in objs]


def _update_sql(model, objs: list, names: Sequence[str], add: str | None = None) -> tuple[str, str]:
    sql, shape = _update_statement(model, tuple(names), add)
    attnames = [field.attname for field in shape.fields]
    rows = [
        [obj[name] for name in attnames] if isinstance(obj, Mapping) else [getattr(obj, name) for name in attnames]
        for obj in objs
    ]
    return sql, shape.document(rows)


@functools.cache
def _update_statement(model, names: tuple[str, ...], add: str | None) -> tuple[str, _Shape]:
    """`_update_sql`'s statement and the rows' shape (the primary key, `names`, then `add`), built once."""
    meta = model._meta
    fields = [meta.pk, *(meta.get_field(name) for name in names), *([meta.get_field(add)] if add else [])]
    table, pk = _quoted(meta.db_table), _quoted(meta.pk.column)
    assignments = [f"{_quoted(field.column)} = v.{_quoted(field.column)}" for field in fields[1 : 1 + len(names)]]
    returning = ""
    if add:
        column = _quoted(meta.get_field(add).column)
        assignments.append(f"{column} = {table}.{column} + v.{column}")
        returning = f" RETURNING {table}.{pk}, {table}.{column}"
    sql = (
        f"UPDATE {table} SET {', '.join(assignments)} FROM jsonb_populate_recordset(NULL::{table}, %s::jsonb) AS v"
        f" WHERE {table}.{pk} = v.{pk}{returning}"
    )
    return sql, _Shape(fields)


class _Shape:
    """The fields of a statement's rows, and how each value of them is written into its JSON document."""

    def __init__(self, fields: Sequence) -> None:
        self.fields = list(fields)
        self._columns = [field.column for field in fields]
        self._converters = [_converter(field) for field in fields]

    def document(self, rows: Iterable[Sequence]) -> str:
        """The rows as one JSON array of objects keyed by column, each value as its field prepares it for saving."""
        columns, converters = self._columns, self._converters
        found = [
            {
                # None is SQL NULL for every field.
                column: value if value is None else convert(value)
                for column, convert, value in zip(columns, converters, row, strict=True)
            }
            for row in rows
        ]
        return json.dumps(found, ensure_ascii=False, separators=(",", ":"))


# Fields whose value of exactly this type is prepared for saving as itself (an int as psycopg's Int4 or
# Int8 of it, a foreign key's int as the key): the same JSON either way.
_PLAIN = {
    "CharField": str,
    "TextField": str,
    "BooleanField": bool,
    "IntegerField": int,
    "BigIntegerField": int,
    "PositiveIntegerField": int,
    "PositiveBigIntegerField": int,
    "ForeignKey": int,
    "AutoField": int,
    "BigAutoField": int,
}


def _converter(field):
    """The field's value as `_json_value` gives it, without the field's whole preparation for the values that
    need none (a batch converts thousands): a plain value as it is, an aware datetime or a date as ISO 8601, a
    JSON document as itself (what `Jsonb` wraps); anything else through `_json_value`."""
    kind = field.get_internal_type()
    plain = _PLAIN.get(kind)

    def slow(value):
        # This thread's connection (statements are built once for every thread); not the `connection` proxy.
        return _json_value(field, value, connections[DEFAULT_DB_ALIAS])

    if plain is not None:
        return lambda value: value if type(value) is plain else slow(value)
    if kind == "DateTimeField":
        return lambda value: value.isoformat() if type(value) is datetime and value.tzinfo is not None else slow(value)
    if kind == "DateField":
        return lambda value: value.isoformat() if type(value) is date else slow(value)
    if kind == "JSONField" and field.encoder is None:
        return lambda value: value if type(value) in (dict, list, str, int, bool) else slow(value)
    return slow


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
