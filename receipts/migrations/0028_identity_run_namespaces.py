"""Issues 28 and 29 §4: a run is keyed by its source and its operation id, and many runs may share a thread.

The operation id is unique within its source's namespace ("" for local apps and hosted runs) and no longer
alone; the thread id is not unique (a chat app's turns: a new operation id per user turn on one thread) and
is indexed with the source for the run page's "other runs of this thread".

SQLite rebuilds the run table to drop a unique column: migration 0027's rollup triggers, which name it, go before
and come back after (with the rollup counted afresh, as 0027 does). PostgreSQL alters the table in place.
"""

import importlib

from django.db import migrations, models

ROLLUP = importlib.import_module("receipts.migrations.0027_rollup_by_owner")


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
        migrations.AddConstraint(
            model_name="run",
            constraint=models.UniqueConstraint(fields=("source_name", "operation_id"), name="run_source_operation"),
        ),
        migrations.AlterField(
            model_name="run",
            name="operation_id",
            field=models.CharField(db_index=True, max_length=200),
        ),
        migrations.AlterField(
            model_name="run",
            name="thread_id",
            field=models.CharField(max_length=200),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["source_name", "thread_id"], name="run_thread"),
        ),
        migrations.RunPython(_on_sqlite(ROLLUP.SQLITE_UP), _on_sqlite(ROLLUP.SQLITE_DOWN)),
    ]
