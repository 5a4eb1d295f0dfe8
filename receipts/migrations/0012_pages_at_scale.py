"""Pages at scale (issue 13): the run's stored summary, the indexes the pages use, and no others.

- `Run.handoff_count`, `problem_count`, `open_false_count`, `latest_verdict`, filled here for existing runs
  and kept by `receipts.ingest.health.refresh` from then on.
- Keyset pagination indexes (runs newest first, audit newest first), partial indexes for open waits, the
  overview's window (handoffs by creation, wait receipts by time) and runs with open false completions.
- Handoff's single-column indexes no page query uses (sender, receiver, the wait columns) are dropped:
  recording rewrites every index of a handoff row on each receipt.
- PostgreSQL only: pg_trgm GIN indexes for the runs list's substring search (`icontains` compiles to
  `UPPER(col::text) LIKE UPPER(%s)`, so the indexes are on those expressions). SQLite skips them.
"""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

TRIGRAM_INDEXES = (
    (
        "run_search_trgm",
        "receipts_run",
        'UPPER("operation_id"::text) gin_trgm_ops, UPPER("graph"::text) gin_trgm_ops',
    ),
    (
        "handoff_search_trgm",
        "receipts_handoff",
        'UPPER("handoff_id"::text) gin_trgm_ops, UPPER("sender"::text) gin_trgm_ops, '
        'UPPER("receiver"::text) gin_trgm_ops',
    ),
)


def fill_summaries(apps, schema_editor) -> None:
    from receipts.ingest.health import fill_summaries

    fill_summaries(
        run_model=apps.get_model("receipts", "Run"),
        handoffs=apps.get_model("receipts", "Handoff"),
        reports=apps.get_model("receipts", "MiddlewareReport"),
    )


def add_trigram_indexes(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    for name, table, columns in TRIGRAM_INDEXES:
        schema_editor.execute(f'CREATE INDEX IF NOT EXISTS "{name}" ON "{table}" USING gin ({columns})')


def drop_trigram_indexes(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, _, _ in TRIGRAM_INDEXES:
        schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')


class Migration(migrations.Migration):
    dependencies = [("receipts", "0011_recording_at_scale")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="handoff_count",
            field=models.PositiveIntegerField(default=0, editable=False),
        ),
        migrations.AddField(
            model_name="run",
            name="latest_verdict",
            field=models.CharField(blank=True, editable=False, max_length=40),
        ),
        migrations.AddField(
            model_name="run",
            name="open_false_count",
            field=models.PositiveIntegerField(default=0, editable=False),
        ),
        migrations.AddField(
            model_name="run",
            name="problem_count",
            field=models.PositiveIntegerField(default=0, editable=False),
        ),
        migrations.AlterField(
            model_name="auditentry",
            name="at",
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        migrations.AlterField(
            model_name="handoff",
            name="receiver",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AlterField(
            model_name="handoff",
            name="sender",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AlterField(
            model_name="handoff",
            name="wait_deadline",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="handoff",
            name="wait_open",
            field=models.BooleanField(default=False),
        ),
        migrations.AlterField(
            model_name="handoff",
            name="wait_owner",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AlterField(
            model_name="handoff",
            name="run",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="handoffs",
                to="receipts.run",
            ),
        ),
        migrations.AlterField(
            model_name="run",
            name="created_at",
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        migrations.AddIndex(
            model_name="auditentry",
            index=models.Index(fields=["at", "id"], name="audit_newest"),
        ),
        migrations.AddIndex(
            model_name="handoff",
            index=models.Index(
                condition=models.Q(("wait_open", True)), fields=["wait_deadline", "id"], name="handoff_open_waits"
            ),
        ),
        migrations.AddIndex(
            model_name="handoff",
            index=models.Index(
                condition=models.Q(("wait_open", True)), fields=["wait_owner"], name="handoff_open_waits_owner"
            ),
        ),
        migrations.AddIndex(
            model_name="handoff",
            index=models.Index(fields=["created_at", "verdict"], name="handoff_created_verdict"),
        ),
        migrations.AddIndex(
            model_name="handoff",
            index=models.Index(fields=["run", "verdict"], name="handoff_run_verdict"),
        ),
        migrations.AddIndex(
            model_name="receipt",
            index=models.Index(
                condition=models.Q(("part", "wait")), fields=["recorded_at"], name="receipt_waits_by_time"
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["created_at", "id"], name="run_newest"),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("open_false_count__gt", 0)), fields=["open_false_count"], name="run_open_false"
            ),
        ),
        migrations.RunPython(add_trigram_indexes, drop_trigram_indexes),
        migrations.RunPython(fill_summaries, migrations.RunPython.noop),
    ]
