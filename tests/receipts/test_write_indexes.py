"""Issue 32 §2: every index of the tables a batch writes is one some query reads (migration 0038).

A new or changed row pays for each index of its table. `db_index=True` on a CharField also built, on PostgreSQL,
a `varchar_pattern_ops` index for `LIKE 'prefix%'` that no query asks; a receipt's handoff had an index of its own
beside the unique (handoff, part, attempt, …) that starts with it. The lookups keep an index each.
"""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db

WRITTEN = ("receipts_run", "receipts_handoff", "receipts_receipt")


def _indexes(table: str) -> dict[str, dict]:
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, table)
    return {name: spec for name, spec in found.items() if spec["index"] or spec["unique"]}  # a unique is one too


def _definitions(table: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s", [table])
        return [row[0] for row in cursor.fetchall()]


def test_no_index_of_a_written_table_is_a_like_prefix_index():
    if connection.vendor == "postgresql":
        for table in WRITTEN:
            assert not [d for d in _definitions(table) if "pattern_ops" in d], table
    # Elsewhere no such index was ever built: the plain lookups below are what counts there.


@pytest.mark.parametrize(
    ("table", "column"),
    [
        ("receipts_run", "graph"),
        ("receipts_run", "status"),
        ("receipts_run", "health"),
        ("receipts_handoff", "verdict"),
        ("receipts_handoff", "route_version"),
    ],
)
def test_a_column_the_pages_filter_by_keeps_one_plain_index(table, column):
    assert [name for name, spec in _indexes(table).items() if spec["columns"] == [column]] == [
        f"{table.removeprefix('receipts_')}_{column}"
    ]


@pytest.mark.parametrize(
    ("table", "column", "covering"),
    [("receipts_receipt", "handoff_id", "receipt_once_per_attempt"), ("receipts_run", "source_name", "run_thread")],
)
def test_a_column_that_leads_another_index_has_none_of_its_own(table, column, covering):
    indexes = _indexes(table)
    assert not [name for name, spec in indexes.items() if spec["columns"] == [column]]
    assert indexes[covering]["columns"][0] == column
