"""Issues 28 and 29 §4: runs and handoffs keyed by their source's namespace, and many runs on one thread.

- A run's operation id is unique within its source's namespace ("" for local apps and hosted runs), no longer
  alone; so is a handoff's id, whose namespace is its run's source (a new column, filled from the runs).
  A source can neither block nor probe a local run's ids or another source's.
- A run's thread id is not unique (a chat app's turns: a new operation id per user turn on one thread); it is
  indexed with the source for the run page's "other runs of this thread".

The unique indexes lead with the id, so a search by id across namespaces reads them too. SQLite rebuilds a
table to drop a unique column: migration 0027's rollup triggers, which name both tables, go before and come
back after (the rollup counted afresh, as 0027 does). PostgreSQL alters the tables in place.
"""

import importlib

from django.db import migrations, models

ROLLUP = importlib.import_module("receipts.migrations.0027_rollup_by_owner")
FILL = (
    "UPDATE receipts_handoff SET source_name = (SELECT r.source_name FROM receipts_run r WHERE r.id = run_id)"
    " WHERE run_id IN (SELECT id FROM receipts_run WHERE source_name <> '')"
)


def _on_sqlite(statements: list[str]):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "sqlite":
            for sql in statements:
                schema_editor.execute(sql, None)

    return run


class Migration(migrations.Migration):
    dependencies = [("receipts", "0027_rollup_by_owner")]

    operations = [
        migrations.RunPython(_on_sqlite(ROLLUP.SQLITE_DOWN), _on_sqlite(ROLLUP.SQLITE_UP)),
        migrations.AddField(
            model_name="handoff",
            name="source_name",
            field=models.CharField(blank=True, default="", editable=False, max_length=100),
        ),
        migrations.RunSQL(FILL, migrations.RunSQL.noop),
        migrations.AddConstraint(
            model_name="handoff",
            constraint=models.UniqueConstraint(fields=("handoff_id", "source_name"), name="handoff_id_source"),
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.UniqueConstraint(fields=("operation_id", "source_name"), name="run_operation_source"),
        ),
        migrations.AlterField(model_name="handoff", name="handoff_id", field=models.CharField(max_length=200)),
        migrations.AlterField(model_name="run", name="operation_id", field=models.CharField(max_length=200)),
        migrations.AlterField(model_name="run", name="thread_id", field=models.CharField(max_length=200)),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["source_name", "thread_id"], name="run_thread"),
        ),
        migrations.RunPython(_on_sqlite(ROLLUP.SQLITE_UP), _on_sqlite(ROLLUP.SQLITE_DOWN)),
    ]
