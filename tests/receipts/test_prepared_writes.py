"""The evidence writer's inserts prepared once per connection on PostgreSQL (issue 32 §2, receipts.queries.prepared).

A batch of parts for new handoffs (as an agent's steps hand them over under load: the recording bench's) inserts
its rows as JSON documents in one statement whose text repeats batch after batch: PostgreSQL parses and plans it
once per connection, then executes it by name with the documents as parameters. The batch's reads are bound by
the server too, never prepared (their plan depends on the tables' sizes). What the server holds is read from
`pg_prepared_statements` on the writer's own connection, after batches written as the writer thread writes them
(outside any test transaction).
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test import override_settings

from agents.observe.writer import LocalSink
from receipts.ingest.intake import PartEntry
from receipts.models import Receipt
from tests.factories import healthy_parts

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements are PostgreSQL's"),
]


def write_run(operation_id: str) -> None:
    """One batch: two new runs' handoffs, each with its five parts and its final status."""
    parts = [*healthy_parts().items(), ("final_status", "complete")]
    runs = [(f"{operation_id}-{i}", f"h-{operation_id}-{i}") for i in (1, 2)]
    LocalSink().write([PartEntry(run, handoff, part, value) for run, handoff in runs for part, value in parts])


def stored(operation_id: str) -> int:
    return Receipt.objects.filter(handoff__run__operation_id__startswith=f"{operation_id}-").count()


def prepared_on_this_connection() -> dict[str, int]:
    """Each statement the server holds prepared for this connection: how many times it was executed."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements")
        return dict(cursor.fetchall())


def receipt_inserts(prepared: dict[str, int]) -> dict[str, int]:
    return {sql: n for sql, n in prepared.items() if 'INSERT INTO "receipts_receipt"' in sql}


def test_two_batches_insert_their_receipts_through_one_statement_prepared_once(contracts):
    write_run("op-first")
    write_run("op-second")

    inserts = receipt_inserts(prepared_on_this_connection())
    assert list(inserts.values()) == [2], inserts  # one statement, executed by name for the second batch
    assert "$1::jsonb" in next(iter(inserts))  # the document is a parameter, not quoted into the text
    assert stored("op-second") == 10


def test_the_batch_reads_are_bound_by_the_server_but_never_prepared(contracts):
    write_run("op-first")
    write_run("op-second")

    prepared = prepared_on_this_connection()
    assert prepared
    assert not [sql for sql in prepared if sql.startswith(('SELECT "receipts_run"', 'SELECT "receipts_handoff"'))]


def test_with_prepared_writes_off_nothing_is_prepared(contracts):
    with override_settings(SIDEWISP_PREPARED_WRITES=False):
        write_run("op-first")
        write_run("op-second")

    assert prepared_on_this_connection() == {}
    assert stored("op-second") == 10


def test_a_rolled_back_transaction_leaves_nothing_psycopg_believes_prepared(contracts):
    write_run("op-first")
    with pytest.raises(RuntimeError), transaction.atomic():
        write_run("op-undone")
        raise RuntimeError  # ROLLBACK: psycopg deallocates every prepared statement

    write_run("op-after")

    assert list(receipt_inserts(prepared_on_this_connection()).values()) == [1]  # prepared again
    assert not stored("op-undone")
    assert stored("op-after") == 10


def test_a_new_connection_prepares_its_statements_again(contracts):
    write_run("op-first")
    connection.close()

    write_run("op-second")

    assert list(receipt_inserts(prepared_on_this_connection()).values()) == [1]
    assert stored("op-second") == 10
