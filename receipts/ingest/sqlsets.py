"""Set-based writes the ORM does not offer cheaply: many rows in one INSERT, many rows' values in one UPDATE.

On PostgreSQL the rows travel as one JSON document (written by orjson, column by column where the values need
no preparation: `_Shape.document`), read back by `jsonb_populate_recordset` with the table's own row type (each
value converted to its column's type by the server, lengths checked as on INSERT): one parameter to send instead
of one per value, bound by the server (an INSERT's statement prepared once per connection:
`receipts.queries.prepared`). The ORM's `bulk_create` sends `UNNEST` arrays that the client-side cursor quotes
element by element, and `bulk_update` a CASE WHEN per field and row: either costs the recording process more
CPU than PostgreSQL spends storing the rows. Other databases keep
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
from operator import attrgetter, itemgetter

import orjson
from django.db import DEFAULT_DB_ALIAS, connection, connections
from psycopg.types.json import Jsonb

from receipts.queries import prepared


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
    with prepared.cursor() as cursor:
        cursor.execute(sql + suffix, [document])
        return cursor.fetchall() if cursor.description else []


def _insert_sql(model, objs: list, *, keyed: bool = False) -> tuple[str, str]:
    sql, shape = _insert_statement(model, keyed)
    fields = shape.fields
    if not any(isinstance(obj, model) for obj in objs) and (document := shape.mapped(objs)) is not None:
        return sql, document
    rows = [shape.inserted(obj) if isinstance(obj, model) else [obj[field.attname] for field in fields] for obj in objs]
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


def write_together(updates: Sequence[tuple], inserts: Sequence[tuple], new: Sequence[tuple] = ()) -> Callable[[], list]:
    """`update_rows(model, objs, names)` for each of `updates`, then `insert_rows(model, objs)` for each of
    `inserts`: on PostgreSQL in one statement (data-modifying WITH queries, one round trip), elsewhere one each.

    `new` ((model, objs), …), PostgreSQL only: rows inserted whole, their primary keys given (`newrows.send_new`),
    those a unique field of which another row holds already skipped (`ON CONFLICT DO NOTHING`). The result is a
    function giving, for each of `new`, the set of the primary keys inserted (the caller tells the skipped ones by
    their absence): read it after the statements sent with this one (`together`: reading it inside would wait for
    its answer alone).

    The parts see the same snapshot, not each other's rows: none may read what another writes (an UPDATE of
    rows and INSERTs of rows that refer to them is fine; foreign keys are checked at commit).
    """
    updates = [(model, list(objs), names) for model, objs, names in updates if objs]
    inserts = [(model, list(objs)) for model, objs in inserts if objs]
    new = [(model, list(objs)) for model, objs in new]

    def nothing() -> list[set]:
        return [set() for _ in new]

    if connection.vendor != "postgresql":
        if any(objs for _, objs in new):
            msg = "rows with their keys given are inserted together on PostgreSQL only"
            raise NotImplementedError(msg)
        for model, objs, names in updates:
            update_rows(model, objs, names)
        for model, objs in inserts:
            insert_rows(model, objs)
        return nothing
    parts = [_update_sql(model, objs, names) for model, objs, names in updates]
    parts += [_insert_sql(model, objs) for model, objs in inserts]
    returned = []  # (which of `new`, the WITH query returning its keys)
    for which, (model, objs) in enumerate(new):
        if objs:
            sql, document = _insert_sql(model, objs, keyed=True)
            returned.append((which, len(parts)))
            parts.append((f"{sql} ON CONFLICT DO NOTHING RETURNING {_quoted(model._meta.pk.column)}", document))
    if returned:
        parts.append((" UNION ALL ".join(f"SELECT {which}, * FROM w{i}" for which, i in returned), None))
    if not parts:
        return nothing
    *first, (sql, _) = parts
    if first:
        sql = "WITH " + ", ".join(f"w{i} AS ({part})" for i, (part, _) in enumerate(first)) + " " + sql
    params = [document for _, document in parts if document is not None]
    cursor = prepared.cursor(prepare=not updates)  # only inserts: one plan for every table size
    cursor.execute(sql, params)
    if not returned:
        cursor.close()
        return nothing

    def inserted() -> list:
        found = nothing()
        with cursor:
            for which, key in cursor.fetchall():
                found[which].add(key)
        return found

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
    with prepared.cursor(prepare=False) as cursor:  # an UPDATE's join depends on the table: not prepared
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
    values, attributes = shape.values, shape.attributes
    return sql, shape.document([attributes(obj) if isinstance(obj, model) else values(obj) for obj in objs])


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
        from django.db.models import Field

        self.fields = list(fields)
        self._columns = [field.column for field in fields]
        self._converters = [_converter(field) for field in fields]
        self._kept = [_kept(field) for field in fields]
        self._aware = [field.get_internal_type() == "DateTimeField" for field in fields]
        attnames = [field.attname for field in fields]
        # A row's values in the fields' order, from a mapping of attnames or from an object's attributes.
        self._named_as_columns = attnames == self._columns
        self.values = _each(itemgetter, attnames)
        self.attributes = _each(attrgetter, attnames)
        # The fields whose value as saved is not simply the attribute's (auto_now, auto_now_add): `inserted`.
        self._saved = [(i, field) for i, field in enumerate(fields) if type(field).pre_save is not Field.pre_save]

    def inserted(self, obj) -> list:
        """The object's row as an INSERT saves it: each field's `pre_save` value (which may set the attribute)."""
        row = list(self.attributes(obj))
        for i, field in self._saved:
            row[i] = field.pre_save(obj, True)
        return row

    def mapped(self, rows: Sequence[Mapping]) -> str | None:
        """`document` of rows given as mappings of every field's attname, written as they are (no row rebuilt)
        where that is the same document: each mapping a dict of exactly the fields, their attnames the columns'
        names, every value kept as it is (`_kept`); None otherwise. A missing field raises KeyError, as there."""
        if not self._named_as_columns or any(type(row) is not dict or len(row) != len(self.fields) for row in rows):
            return None
        for name, kept, aware in zip(self._columns, self._kept, self._aware, strict=True):
            values = list(map(itemgetter(name), rows))
            if not kept(frozenset(map(type, values))) or (aware and not _all_aware(values)):
                return None
        try:
            return orjson.dumps(rows).decode()
        except orjson.JSONEncodeError:
            return None

    def document(self, rows: Iterable[Sequence]) -> str:
        """The rows as one JSON array of objects keyed by column, each value as its field prepares it for saving.

        Column by column: a column whose every value goes into JSON as it is (`_kept`: what `_converter` would
        give unchanged, or an aware datetime or a date, which orjson writes in ISO 8601 as `_converter` does) is
        taken whole; any other goes value by value through its converter. A document orjson cannot write (an
        integer beyond 64 bits, a key that is not text) is written by the standard library's encoder instead.
        """
        rows = list(rows)
        columns = list(zip(*rows, strict=True)) or [() for _ in self._columns]
        for i, (values, convert, kept, aware) in enumerate(
            zip(columns, self._converters, self._kept, self._aware, strict=True)
        ):
            if not kept(frozenset(map(type, values))) or (aware and not _all_aware(values)):
                columns[i] = [value if value is None else convert(value) for value in values]
        found = [dict(zip(self._columns, row, strict=True)) for row in zip(*columns, strict=True)] if rows else []
        try:
            return orjson.dumps(found).decode()
        except orjson.JSONEncodeError:
            return json.dumps(found, ensure_ascii=False, separators=(",", ":"), default=_iso)


def _each(getter: Callable, names: Sequence[str]) -> Callable[[object], tuple]:
    """`getter(*names)`, giving a tuple for one name too."""
    found = getter(*names)
    return found if len(names) > 1 else lambda obj: (found(obj),)


def _all_aware(values: Sequence) -> bool:
    return None not in set(map(_tzinfo, filter(None, values)))  # None is SQL NULL; a datetime is never false


_tzinfo = attrgetter("tzinfo")


def _iso(value: object) -> str:
    """What orjson writes for the values `_kept` lets through that the standard library's encoder cannot."""
    if isinstance(value, date):  # an aware datetime (`_all_aware`) or a date
        return value.isoformat()
    msg = f"Object of type {type(value).__name__} is not JSON serializable"
    raise TypeError(msg)


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
_DOCUMENT = (dict, list, str, int, bool)  # a JSON field's value that is its document as it is


def _kept(field) -> Callable[[frozenset[type]], bool]:
    """Whether values of these types go into the JSON document as they are (None is SQL NULL for every field):
    those `_converter` returns unchanged, datetimes (aware ones: `_Shape.document` checks) and dates, which
    orjson writes as `_converter` does, and for a text field any text (a choice's enum member is prepared for
    saving as itself, and written as its text)."""
    kind = field.get_internal_type()
    kept = {type(None)}
    if kind in _PLAIN:
        kept.add(_PLAIN[kind])
    elif kind == "DateTimeField":
        kept.add(datetime)
    elif kind == "DateField":
        kept.add(date)
    elif kind == "JSONField" and field.encoder is None:
        kept.update(_DOCUMENT)
    text = kind in ("CharField", "TextField")

    @functools.cache
    def kept_as_they_are(types: frozenset[type]) -> bool:
        return types <= kept or (text and all(issubclass(found, str) or found in kept for found in types))

    return kept_as_they_are


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
        return lambda value: value if type(value) in _DOCUMENT else slow(value)
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
