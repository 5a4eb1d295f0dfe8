"""Issue 32 §2 (ingest at a quarter of the floor): indexes that every new or changed row paid and no query reads.

- `db_index=True` on a CharField builds, on PostgreSQL, a second index with `varchar_pattern_ops` for
  `LIKE 'prefix%'`; no query asks that of a run's graph, status, health or source name, or of a handoff's verdict
  or route version (searches use the trigram indexes). Each keeps one plain index (Meta.indexes), but for the run's
  source name, which is the first column of run_thread.
- A receipt's handoff had an index of its own beside receipt_once_per_attempt (handoff, part, attempt, month),
  which starts with it and serves the same lookups (a handoff's receipts, the foreign key's checks).

The indexes are dropped and created by name (`DROP INDEX IF EXISTS`, `AddIndex`): an AlterField would rebuild
the tables on SQLite, losing their rollup triggers (migrations 0021, 0027); on PostgreSQL the receipts' index
is on the partitioned table, and dropping it there drops each partition's.
"""

from django.db import migrations, models

# (table, column, the name Django gave its index): the same name on every database.
OLD = [
    ("receipts_handoff", "route_version", "receipts_handoff_route_version_03edb2a4"),
    ("receipts_handoff", "verdict", "receipts_handoff_verdict_0759493f"),
    ("receipts_receipt", "handoff_id", "receipts_receipt_handoff_id_c6276ab5"),
    ("receipts_run", "graph", "receipts_run_graph_e1a633cd"),
    ("receipts_run", "health", "receipts_run_health_63d20acd"),
    ("receipts_run", "source_name", "receipts_run_source_name_57b1d500"),
    ("receipts_run", "status", "receipts_run_status_12ca34bf"),
]


def drop_old(apps, schema_editor):
    for _, _, name in OLD:
        schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f'DROP INDEX IF EXISTS "{name}_like"')


def create_old(apps, schema_editor):
    postgresql = schema_editor.connection.vendor == "postgresql"
    for table, column, name in OLD:
        schema_editor.execute(f'CREATE INDEX "{name}" ON "{table}" ("{column}")')
        if postgresql and column != "handoff_id":
            schema_editor.execute(f'CREATE INDEX "{name}_like" ON "{table}" ("{column}" varchar_pattern_ops)')


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0037_pages1m_wait_indexes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="handoff",
                    name="route_version",
                    field=models.CharField(blank=True, max_length=200),
                ),
                migrations.AlterField(
                    model_name="handoff",
                    name="verdict",
                    field=models.CharField(
                        choices=[
                            ("HEALTHY", "HEALTHY"),
                            ("ROUTE_REJECTED", "ROUTE_REJECTED"),
                            ("STALE_CONTROL", "STALE_CONTROL"),
                            ("OPEN_TOOL_PROTOCOL", "OPEN_TOOL_PROTOCOL"),
                            ("CONTEXT_INCOMPLETE", "CONTEXT_INCOMPLETE"),
                            ("DESTINATION_NOT_STARTED", "DESTINATION_NOT_STARTED"),
                            ("WAITING_ON_APPROVAL", "WAITING_ON_APPROVAL"),
                            ("UNCERTAIN", "UNCERTAIN"),
                            ("FALSE_COMPLETE", "FALSE_COMPLETE"),
                        ],
                        max_length=40,
                    ),
                ),
                migrations.AlterField(
                    model_name="receipt",
                    name="handoff",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=models.deletion.PROTECT,
                        related_name="receipts",
                        to="receipts.handoff",
                    ),
                ),
                migrations.AlterField(
                    model_name="run",
                    name="graph",
                    field=models.CharField(blank=True, max_length=100),
                ),
                migrations.AlterField(
                    model_name="run",
                    name="health",
                    field=models.CharField(blank=True, max_length=20),
                ),
                migrations.AlterField(
                    model_name="run",
                    name="source_name",
                    field=models.CharField(blank=True, default="", editable=False, max_length=100),
                ),
                migrations.AlterField(
                    model_name="run",
                    name="status",
                    field=models.CharField(
                        choices=[
                            ("queued", "Queued"),
                            ("running", "Running"),
                            ("waiting", "Waiting"),
                            ("complete", "Complete"),
                            ("failed", "Failed"),
                            ("parked", "Parked"),
                        ],
                        default="queued",
                        max_length=20,
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(drop_old, create_old)],
        ),
        migrations.AddIndex(model_name="handoff", index=models.Index(fields=["verdict"], name="handoff_verdict")),
        migrations.AddIndex(
            model_name="handoff", index=models.Index(fields=["route_version"], name="handoff_route_version")
        ),
        migrations.AddIndex(model_name="run", index=models.Index(fields=["graph"], name="run_graph")),
        migrations.AddIndex(model_name="run", index=models.Index(fields=["status"], name="run_status")),
        migrations.AddIndex(model_name="run", index=models.Index(fields=["health"], name="run_health")),
    ]
