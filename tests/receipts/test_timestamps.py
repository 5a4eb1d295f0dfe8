"""PostgreSQL timestamps are read by psycopg's compiled parser (receipts.timestamps), with the values Django's
own loader gives: aware, in Django's zone, to the microsecond."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.backends.postgresql.psycopg_any import register_tzloader
from psycopg.pq import Format

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's loader; SQLite has its own path"),
]

STORED = (
    "2026-12-05 14:17:37.234574+00",
    "2026-01-02 03:04:05.123456+02",
    "1999-12-31 23:59:59-05:30",
    "0001-01-01 00:00:00+00",
    "9999-12-31 23:59:59.999999+00",
)
SELECT = "SELECT " + ", ".join(f"'{value}'::timestamptz" for value in STORED)


def _read(cursor) -> tuple:
    cursor.execute(SELECT)
    return cursor.fetchone()


def test_a_connection_reads_timestamps_with_psycopgs_compiled_loader():
    with connection.cursor():
        loader = connection.connection.adapters.get_loader(1184, Format.TEXT)
    parse = loader(1184, connection.connection)._parse
    assert type(parse.__self__).__module__.startswith(("psycopg_binary", "psycopg_c"))
    assert loader.timezone == connection.timezone  # no loader of Django's own registered per cursor


def test_the_values_are_those_djangos_loader_reads():
    with connection.cursor() as cursor:
        fast = _read(cursor)
    with connection.cursor() as cursor:
        register_tzloader(connection.timezone, cursor.cursor)  # Django's own, on this cursor only
        django_read = _read(cursor)
    assert fast == django_read
    assert all(value.tzinfo is connection.timezone for value in fast)
    assert [value.microsecond for value in fast] == [234574, 123456, 0, 0, 999999]
