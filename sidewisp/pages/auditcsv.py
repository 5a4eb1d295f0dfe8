"""The audit log as CSV, streamed straight from the database.

On PostgreSQL the database writes the CSV itself (`COPY (SELECT …) TO STDOUT WITH (FORMAT csv)`, one
statement, one snapshot) and the response passes its bytes on in chunks: no row is decoded into Python
values. Elsewhere (SQLite) the rows are read with a chunked iterator of plain values and written by
Python's csv module. Both write the same cells: the same columns, ISO times in UTC with microseconds, the
same quoting, and a cell that a spreadsheet would run as a formula (= + - @, a tab or a carriage return
first) prefixed with an apostrophe. Only the line ends differ: PostgreSQL's "\\n", Python's "\\r\\n".
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Iterator, Mapping

from django.db import connection
from django.db.models import Case, CharField, F, Func, Value, When
from django.db.models.functions import Coalesce, Concat, Left, NullIf
from django.db.models.lookups import In
from django.http import QueryDict

from receipts.verdicts.words import VERDICT_WORDS
from sidewisp.pages.audit import AuditQuery

# "verdict_words", last: the verdict as pages, alerts and notifications say it (issue 30 §4).
COLUMNS = ("at", "actor", "action", "object_type", "object_id", "run", "verdict", "outcome", "reason", "verdict_words")
# The text columns after `at`, as the ORM names them.
FIELDS = ("actor_name", "action", "object_type", "object_id", "run__operation_id", "verdict", "outcome", "reason")
_VERDICT_AT = FIELDS.index("verdict")  # its words are the last cell; an unknown code has none
LIMIT = 10_000
CHUNK_BYTES = 64 * 1024  # a streaming response writes each chunk once: a write per row costs more than the row
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def chunks(params: QueryDict | Mapping[str, str], user) -> Iterator[bytes]:
    """The CSV of the audit entries `params` selects that `user` may read (newest first, at most LIMIT),
    header first (issue 22 §2: the user's teams' entries only)."""
    entries = AuditQuery(params, user).entries
    if connection.vendor == "postgresql":
        yield (",".join(COLUMNS) + "\n").encode()
        yield from _gathered(_copied(entries))
    else:
        yield from _written(entries)


def safe(value: str) -> str:
    """`value` as a spreadsheet cell that is never a formula."""
    return f"'{value}" if value[:1] in FORMULA_STARTS else value


def _written(entries) -> Iterator[bytes]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)  # "\r\n" line ends: Python 3.11 quotes a lone "\r" only then
    writer.writerow(COLUMNS)
    for at, *values in entries.values_list("at", *FIELDS)[:LIMIT].iterator(chunk_size=2000):
        words = VERDICT_WORDS.get(values[_VERDICT_AT] or "", "")
        writer.writerow([at.isoformat(timespec="microseconds"), *(safe(value or "") for value in values), words])
        if buffer.tell() >= CHUNK_BYTES:
            yield buffer.getvalue().encode()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue().encode()


def _copied(entries) -> Iterator[bytes]:
    # The newest LIMIT entries first (narrow rows: the (at, id) index or a top-N sort), then their cells.
    newest = entries.model.objects.filter(pk__in=entries.values("pk")[:LIMIT]).order_by(*entries.query.order_by)
    sql, params = newest.values_list(*_cells()).query.sql_with_params()
    copy_sql = f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)"
    started = time.monotonic()
    with connection.cursor() as cursor, cursor.cursor.copy(copy_sql, params) as copy:
        yield from copy
    if connection.queries_logged:  # the query log (DEBUG, tests' query counts) sees the COPY like any query
        sql = connection.ops.compose_sql(copy_sql, params)
        connection.queries_log.append({"sql": sql, "time": f"{time.monotonic() - started:.3f}"})


def _cells() -> list:
    # The session's time zone is UTC (Django sets it): to_char writes the UTC time.
    at = Concat(
        Func(F("at"), Value('YYYY-MM-DD"T"HH24:MI:SS.US'), function="to_char", output_field=CharField()),
        Value("+00:00"),
    )
    words = Case(*(When(verdict=code, then=Value(text)) for code, text in VERDICT_WORDS.items()), default=None)
    return [at, *(_safe_sql(name) for name in FIELDS), words]


def _safe_sql(name: str):
    # NULLIF: an empty or missing value is an empty unquoted cell, as Python's csv writes it.
    text = Coalesce(F(name), Value(""), output_field=CharField())
    quoted = Case(
        When(In(Left(text, 1), FORMULA_STARTS), then=Concat(Value("'"), text)), default=text, output_field=CharField()
    )
    return NullIf(quoted, Value(""))


def _gathered(blocks: Iterator) -> Iterator[bytes]:
    buffer = bytearray()
    for block in blocks:
        buffer += block
        if len(buffer) >= CHUNK_BYTES:
            yield bytes(buffer)
            buffer.clear()
    if buffer:
        yield bytes(buffer)
