"""Receipts partitioned by their handoff's month on PostgreSQL (issue 22 §3, migration 0025)."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.db import IntegrityError, connection, transaction

from receipts import retention
from receipts.ingest.recording import record
from receipts.models import Receipt, Run, handoff_month
from receipts.retention import partitions
from tests.factories import healthy_parts
from tests.receipts.test_retention import NOW, a_run, policy

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="partitioning is PostgreSQL's; SQLite keeps the plain table"
    ),
]
OLD = NOW - timedelta(days=400)
OLD_MONTH = handoff_month(OLD)


def partition_of(receipt: Receipt) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM receipts_receipt WHERE id = %s", [receipt.pk])
        return cursor.fetchone()[0]


def test_the_receipts_table_is_partitioned_with_the_coming_months_made():
    assert partitions.enabled()
    this_month = handoff_month(NOW)
    assert this_month in partitions.months() and partitions.following(this_month) in partitions.months()


def test_a_receipt_lands_in_its_handoffs_month_and_an_uncreated_month_in_the_default():
    recent = a_run(ended_days_ago=0, parts=1)
    old = a_run(ended_days_ago=400, parts=1)
    assert partition_of(Receipt.objects.get(handoff__run=recent)) == partitions.partition_name(handoff_month(NOW))
    assert partition_of(Receipt.objects.get(handoff__run=old)) == "receipts_receipt_default"


def test_a_month_whose_runs_all_ended_long_ago_is_dropped_whole():
    assert partitions.create(OLD_MONTH)
    a_run(ended_days_ago=400, handoffs=3, parts=2)
    kept = a_run(ended_days_ago=1)
    last = retention.prune(now=NOW, policy=policy(runs_days=500, receipts_days=30), pause=0)
    assert OLD_MONTH not in partitions.months()
    assert last.partitions_dropped == 1 and last.removed["receipts"] == 6
    assert Receipt.objects.filter(handoff__run=kept).count() == 3 and Run.objects.count() == 2


def test_a_month_with_a_run_still_going_is_kept_and_only_the_ended_runs_receipts_go():
    assert partitions.create(OLD_MONTH)
    ended = a_run(ended_days_ago=400)
    running = a_run(ended_days_ago=None, status=Run.Status.RUNNING)
    Run.objects.filter(pk=running.pk).update(created_at=OLD)
    running.handoffs.update(created_at=OLD)
    # The running run's handoff was created in the old month: move its receipts there too (made after the update).
    with retention.pruning():
        Receipt.objects.filter(handoff__run=running).prune()
    Receipt.objects.create(handoff=running.handoffs.get(), part="created", attempt="1")
    last = retention.prune(now=NOW, policy=policy(runs_days=500), pause=0)
    assert OLD_MONTH in partitions.months() and last.partitions_dropped == 0
    assert not Receipt.objects.filter(handoff__run=ended).exists()
    assert partition_of(Receipt.objects.get(handoff__run=running)) == partitions.partition_name(OLD_MONTH)


def test_recording_the_same_part_twice_stores_it_once_after_partitioning(contracts):
    for _ in range(2):
        record(handoff_id="h-1", operation_id="op-1", part="created", value=healthy_parts()["created"])
    assert Receipt.objects.filter(handoff__handoff_id="h-1", part="created").count() == 1
    receipt = Receipt.objects.get()
    with pytest.raises(IntegrityError), transaction.atomic():
        Receipt.objects.create(handoff=receipt.handoff, part="created", attempt=receipt.attempt)


def test_the_beat_makes_the_months_ahead_when_a_month_begins():
    later = NOW + timedelta(days=200)
    retention.prune(now=later, policy=policy(), pause=0)
    month = date(later.year, later.month, 1)
    assert {month, partitions.following(month)} <= set(partitions.months())


def test_migrating_keeps_the_receipts_already_there_each_in_its_month():
    """0025 on a database that holds receipts: every row is kept, in its handoff's month, and ids go on."""
    import os
    import subprocess
    import sys

    import psycopg

    from tests.conftest import database_url_for_subprocess

    base = database_url_for_subprocess()
    name = f"{connection.settings_dict['NAME']}_m25"
    url = base.rsplit("/", 1)[0] + f"/{name}"
    admin = psycopg.connect(base.rsplit("/", 1)[0] + "/postgres", autocommit=True)
    admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
    admin.execute(f'CREATE DATABASE "{name}"')
    env = {**os.environ, "DATABASE_URL": url}

    def migrate(*target: str) -> None:
        subprocess.run([sys.executable, "manage.py", "migrate", *target, "-v", "0"], env=env, check=True)

    try:
        migrate("receipts", "0024")
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(
                "INSERT INTO receipts_run (operation_id, thread_id, graph, scenario, source, mode, status, dry_run, "
                "auto_continue, seq, deliveries, lease_owner, error, created_at, updated_at, health, health_reasons, "
                "source_name, handoff_count, problem_count, open_false_count, latest_verdict) VALUES ('op-m', 'th-m', "
                "'', '', 'agent', 'observed', 'complete', false, true, 0, 0, '', '', now(), now(), '', '[]', '', 0, 0, "
                "0, '')"
            )
            db.execute(
                "INSERT INTO receipts_handoff (handoff_id, run_id, sender, receiver, route_version, final_status, "
                "verdict, boundary, next_move, reason, boundaries, wait_open, wait_owner, created_at, updated_at) "
                "SELECT 'h-' || n, (SELECT id FROM receipts_run), '', '', '', '', 'HEALTHY', '', '', '', '{}', false, "
                "'', timestamptz '2026-03-15 12:00Z' - make_interval(months => n), now() FROM generate_series(0, 2) n"
            )
            db.execute(
                "INSERT INTO receipts_receipt (handoff_id, part, attempt, payload, recorded_at) "
                "SELECT h.id, 'created', a::text, '{}', now() FROM receipts_handoff h, generate_series(1, 2) a"
            )
        migrate()
        with psycopg.connect(url, autocommit=True) as db:
            placed = db.execute(
                "SELECT tableoid::regclass::text, count(*) FROM receipts_receipt GROUP BY 1 ORDER BY 1"
            ).fetchall()
            new_id = db.execute(
                "INSERT INTO receipts_receipt (handoff_id, part, attempt, payload, recorded_at, handoff_month) "
                "SELECT id, 'reduced', '1', '{}', now(), '2026-03-01' FROM receipts_handoff WHERE handoff_id = 'h-0' "
                "RETURNING id"
            ).fetchone()[0]
        assert placed == [(f"receipts_receipt_p2026{m:02d}", 2) for m in (1, 2, 3)]
        assert new_id == 7
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
