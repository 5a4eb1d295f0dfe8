"""The runs list's search finds a run by its scenario, the name every row shows (issue 21 §3).

PostgreSQL only: a pg_trgm GIN index on `UPPER(scenario)`, the expression `icontains` compiles to (as in
0012, whose multi-column index covers the operation id and graph). SQLite skips it.
"""

from django.db import migrations

INDEX = "run_scenario_trgm"


def add_index(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    schema_editor.execute(
        f'CREATE INDEX IF NOT EXISTS "{INDEX}" ON "receipts_run" USING gin (UPPER("scenario"::text) gin_trgm_ops)'
    )


def drop_index(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f'DROP INDEX IF EXISTS "{INDEX}"')


class Migration(migrations.Migration):
    dependencies = [("receipts", "0019_security_and_delivery")]

    operations = [migrations.RunPython(add_index, drop_index)]
