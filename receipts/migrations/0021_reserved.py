"""Issue 20 §4, the overview's rollups: the VerdictBucket table and the handoff triggers that keep it.

A handoff inserted appends (its creation hour, its verdict, +1); a handoff whose verdict or creation time
changes appends (old hour, old verdict, -1) and (new hour, new verdict, +1); deleted handoffs (retention)
append their -1s (on PostgreSQL one statement per DELETE, from its transition table). The triggers are the database's
own, so every write path keeps the rollup exact. The existing handoffs are counted into it once here.
"""

from django.db import migrations, models

POSTGRES_UP = """
CREATE FUNCTION receipts_handoff_verdict_bucket() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        INSERT INTO receipts_verdictbucket (bucket, verdict, n)
        VALUES (date_trunc('hour', OLD.created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', OLD.verdict, -1);
    END IF;
    INSERT INTO receipts_verdictbucket (bucket, verdict, n)
    VALUES (date_trunc('hour', NEW.created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', NEW.verdict, 1);
    RETURN NULL;
END
$$;
CREATE TRIGGER receipts_handoff_verdict_bucket_insert AFTER INSERT ON receipts_handoff
    FOR EACH ROW EXECUTE FUNCTION receipts_handoff_verdict_bucket();
CREATE TRIGGER receipts_handoff_verdict_bucket_update AFTER UPDATE OF verdict, created_at ON receipts_handoff
    FOR EACH ROW WHEN (OLD.verdict IS DISTINCT FROM NEW.verdict OR OLD.created_at IS DISTINCT FROM NEW.created_at)
    EXECUTE FUNCTION receipts_handoff_verdict_bucket();
CREATE FUNCTION receipts_handoff_verdict_bucket_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO receipts_verdictbucket (bucket, verdict, n)
    SELECT date_trunc('hour', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', verdict, -COUNT(*)
    FROM gone GROUP BY 1, 2;
    RETURN NULL;
END
$$;
CREATE TRIGGER receipts_handoff_verdict_bucket_delete AFTER DELETE ON receipts_handoff
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION receipts_handoff_verdict_bucket_gone();
INSERT INTO receipts_verdictbucket (bucket, verdict, n)
    SELECT date_trunc('hour', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', verdict, COUNT(*)
    FROM receipts_handoff GROUP BY 1, 2;
"""
POSTGRES_DOWN = """
DROP TRIGGER IF EXISTS receipts_handoff_verdict_bucket_delete ON receipts_handoff;
DROP FUNCTION IF EXISTS receipts_handoff_verdict_bucket_gone();
DROP TRIGGER IF EXISTS receipts_handoff_verdict_bucket_update ON receipts_handoff;
DROP TRIGGER IF EXISTS receipts_handoff_verdict_bucket_insert ON receipts_handoff;
DROP FUNCTION IF EXISTS receipts_handoff_verdict_bucket();
"""
# Django stores SQLite times as 'YYYY-MM-DD HH:MM:SS[.ffffff]' in UTC: the hour is the text's first 13 characters.
SQLITE_HOUR = "strftime('%Y-%m-%d %H:00:00', {}.created_at)"
SQLITE_UP = [
    f"""CREATE TRIGGER receipts_handoff_verdict_bucket_insert AFTER INSERT ON receipts_handoff BEGIN
        INSERT INTO receipts_verdictbucket (bucket, verdict, n) VALUES ({SQLITE_HOUR.format("NEW")}, NEW.verdict, 1);
    END""",
    f"""CREATE TRIGGER receipts_handoff_verdict_bucket_update AFTER UPDATE OF verdict, created_at ON receipts_handoff
    WHEN OLD.verdict IS NOT NEW.verdict OR OLD.created_at IS NOT NEW.created_at BEGIN
        INSERT INTO receipts_verdictbucket (bucket, verdict, n) VALUES ({SQLITE_HOUR.format("OLD")}, OLD.verdict, -1);
        INSERT INTO receipts_verdictbucket (bucket, verdict, n) VALUES ({SQLITE_HOUR.format("NEW")}, NEW.verdict, 1);
    END""",
    # Only while the rollup holds rows (it does whenever a handoff exists): a test database's flush, which may
    # empty the rollup before the handoffs, then leaves it empty rather than negative.
    f"""CREATE TRIGGER receipts_handoff_verdict_bucket_delete AFTER DELETE ON receipts_handoff
    WHEN EXISTS (SELECT 1 FROM receipts_verdictbucket) BEGIN
        INSERT INTO receipts_verdictbucket (bucket, verdict, n) VALUES ({SQLITE_HOUR.format("OLD")}, OLD.verdict, -1);
    END""",
    f"""INSERT INTO receipts_verdictbucket (bucket, verdict, n)
    SELECT {SQLITE_HOUR.format("receipts_handoff")}, verdict, COUNT(*) FROM receipts_handoff GROUP BY 1, 2""",
]
SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS receipts_handoff_verdict_bucket_delete",
    "DROP TRIGGER IF EXISTS receipts_handoff_verdict_bucket_update",
    "DROP TRIGGER IF EXISTS receipts_handoff_verdict_bucket_insert",
]


def _run(statements: dict):
    def run(apps, schema_editor):
        vendor = schema_editor.connection.vendor
        if vendor not in statements:
            msg = f"the overview's rollup triggers are written for PostgreSQL and SQLite, not {vendor}"
            raise RuntimeError(msg)
        for sql in statements[vendor]:
            schema_editor.execute(sql, None)  # no parameters: the SQL is sent as written ("%" included)

    return run


class Migration(migrations.Migration):
    dependencies = [("receipts", "0020_run_scenario_search")]
    operations = [
        migrations.CreateModel(
            name="VerdictBucket",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("bucket", models.DateTimeField()),
                ("verdict", models.CharField(max_length=40)),
                ("n", models.IntegerField()),
            ],
            options={
                "indexes": [models.Index(fields=["bucket", "verdict", "n"], name="verdict_bucket_time")],
            },
        ),
        migrations.RunPython(
            _run({"postgresql": [POSTGRES_UP], "sqlite": SQLITE_UP}),
            _run({"postgresql": [POSTGRES_DOWN], "sqlite": SQLITE_DOWN}),
        ),
    ]
