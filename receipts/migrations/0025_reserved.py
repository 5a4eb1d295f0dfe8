"""Issue 22 §3: receipts carry their handoff's month; on PostgreSQL the table is partitioned by it.

Every database gets `Receipt.handoff_month` (the first day of the UTC month of the handoff's created_at),
filled for the rows already there. On PostgreSQL `receipts_receipt` then becomes a table partitioned by range
of that month (one partition per month, plus a default partition that catches a month nobody created ahead),
so that retention drops a whole month's receipts as one cheap DROP TABLE (receipts.retention.partitions). A partitioned
table's primary key and unique constraints must contain the partition key, so they gain `handoff_month`; the
month depends on the handoff alone, which keeps "receipt_once_per_attempt" meaning exactly (handoff, part,
attempt). Every other index and constraint of the table is recreated as it was. SQLite keeps the plain table.
"""

from datetime import date

from django.db import migrations, models

TABLE = "receipts_receipt"
KEY = "handoff_month"
MONTHS_AHEAD = 3


def fill_months(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        month = "date_trunc('month', h.created_at AT TIME ZONE 'UTC')::date"
    else:
        month = "date(h.created_at, 'start of month')"
    schema_editor.execute(
        f"UPDATE {TABLE} SET {KEY} = (SELECT {month} FROM receipts_handoff h WHERE h.id = {TABLE}.handoff_id)"
    )


def partition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        constraints, indexes = _definitions(cursor)
        months = _months(cursor)
    run = schema_editor.execute
    run(f"ALTER TABLE {TABLE} RENAME TO {TABLE}_plain")
    for name, _ in constraints:
        run(f'ALTER TABLE {TABLE}_plain RENAME CONSTRAINT "{name}" TO "{_old(name)}"')
    for name, _ in indexes:
        run(f'ALTER INDEX "{name}" RENAME TO "{_old(name)}"')
    run(f"CREATE TABLE {TABLE} (LIKE {TABLE}_plain INCLUDING DEFAULTS INCLUDING IDENTITY) PARTITION BY RANGE ({KEY})")
    run(f"CREATE TABLE {TABLE}_default PARTITION OF {TABLE} DEFAULT")
    for month in months:
        run(_create_month(month))
    for name, definition in constraints:
        run(f'ALTER TABLE {TABLE} ADD CONSTRAINT "{name}" {_with_key(definition)}')
    for _, definition in indexes:
        run(definition)
    run(f"INSERT INTO {TABLE} SELECT * FROM {TABLE}_plain")
    run(f"SELECT setval(pg_get_serial_sequence('{TABLE}', 'id'), COALESCE(MAX(id), 0) + 1, false) FROM {TABLE}")
    run(f"DROP TABLE {TABLE}_plain")


def _definitions(cursor) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The table's constraints (name, definition) and the CREATE INDEX of every index no constraint owns."""
    cursor.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass "
        "AND contype IN ('p', 'u', 'f', 'c') ORDER BY contype DESC, conname",
        [TABLE],
    )
    constraints = cursor.fetchall()
    cursor.execute(
        "SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        "WHERE x.indrelid = %s::regclass AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.oid) "
        "ORDER BY i.relname",
        [TABLE],
    )
    indexes = cursor.fetchall()
    for name, definition in indexes:
        if definition.startswith("CREATE UNIQUE"):
            msg = f"unique index {name} would need {KEY} to partition {TABLE}: make it a constraint first"
            raise RuntimeError(msg)
    return constraints, indexes


def _months(cursor) -> list[date]:
    cursor.execute(
        "SELECT DISTINCT date_trunc('month', created_at AT TIME ZONE 'UTC')::date FROM receipts_handoff "
        "UNION SELECT (date_trunc('month', now() AT TIME ZONE 'UTC') + make_interval(months => n))::date "
        f"FROM generate_series(0, {MONTHS_AHEAD}) AS n ORDER BY 1"
    )
    return [row[0] for row in cursor.fetchall()]


def _create_month(month: date) -> str:
    following = date(month.year + month.month // 12, month.month % 12 + 1, 1)
    return (
        f"CREATE TABLE {TABLE}_p{month:%Y%m} PARTITION OF {TABLE} "
        f"FOR VALUES FROM ('{month.isoformat()}') TO ('{following.isoformat()}')"
    )


def _with_key(definition: str) -> str:
    """A primary key or unique constraint over the same columns and the partition key; others as they were."""
    for kind in ("PRIMARY KEY (", "UNIQUE ("):
        if definition.startswith(kind) and KEY not in definition:
            return definition.replace(")", f", {KEY})", 1)
    return definition


def _old(name: str) -> str:
    return f"plain_{name}"[:63]


def unpartition(apps, schema_editor):
    """Back to one plain table (migrating backwards, as the migration tests do): the rows, keys and indexes kept."""
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        constraints, indexes = _definitions(cursor)
    run = schema_editor.execute
    run(f"ALTER TABLE {TABLE} RENAME TO {TABLE}_parted")
    for name, _ in constraints:
        run(f'ALTER TABLE {TABLE}_parted RENAME CONSTRAINT "{name}" TO "{_old(name)}"')
    for name, _ in indexes:
        run(f'ALTER INDEX "{name}" RENAME TO "{_old(name)}"')
    run(f"CREATE TABLE {TABLE} (LIKE {TABLE}_parted INCLUDING DEFAULTS INCLUDING IDENTITY)")
    for name, definition in constraints:
        run(f'ALTER TABLE {TABLE} ADD CONSTRAINT "{name}" {_without_key(definition)}')
    for _, definition in indexes:
        run(definition.replace(" ON ONLY ", " ON "))
    run(f"INSERT INTO {TABLE} SELECT * FROM {TABLE}_parted")
    run(f"SELECT setval(pg_get_serial_sequence('{TABLE}', 'id'), COALESCE(MAX(id), 0) + 1, false) FROM {TABLE}")
    run(f"DROP TABLE {TABLE}_parted CASCADE")


def _without_key(definition: str) -> str:
    """`_with_key` undone: the primary key and unique constraints over their own columns again."""
    return definition.replace(f", {KEY})", ")", 1)


class Migration(migrations.Migration):
    dependencies = [("receipts", "0024_reserved")]
    operations = [
        migrations.AddField(
            model_name="receipt",
            name="handoff_month",
            field=models.DateField(editable=False, null=True),
        ),
        migrations.RunPython(fill_months, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="receipt",
            name="handoff_month",
            field=models.DateField(editable=False),
        ),
        migrations.RunPython(partition, unpartition),
    ]
