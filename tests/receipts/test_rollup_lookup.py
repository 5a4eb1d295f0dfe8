"""The rollup's trigger on new handoffs finds their runs by key, never by scanning the runs (migration 0039).

PL/pgSQL plans the trigger's statement when it first fires on a connection and keeps the plan: made while the
runs table is small (a new database), a join scanning it was kept as the table grew. Scans are counted by
PostgreSQL per transaction (`pg_stat_xact_user_tables`) around an INSERT of handoffs on a new connection.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from receipts.models import Handoff, Run, VerdictBucket

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the statement-level trigger is PostgreSQL's"),
]


def scans_of_runs() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'receipts_run'")
        return cursor.fetchone()[0]


def test_new_handoffs_are_counted_under_their_runs_without_scanning_every_run():
    runs = [Run.objects.create(operation_id=f"op-{n}", thread_id=f"th-{n}", graph=f"graph-{n % 2}") for n in range(3)]
    connection.close()  # a new connection: the trigger's statement is planned below, the runs table small

    with transaction.atomic():
        before = scans_of_runs()
        Handoff.objects.bulk_create(Handoff(handoff_id=f"h-{n}", run=runs[n % 3], verdict="HEALTHY") for n in range(12))
        scanned = scans_of_runs() - before

    assert scanned == 0
    counted = {(row.graph, row.n) for row in VerdictBucket.objects.all()}
    assert counted == {("graph-0", 8), ("graph-1", 4)}
