"""Issue 20 §4 with issue 22's teams: the overview's rollup also keyed by the run's graph and source name.

A run's team is decided by its graph (a local run) or its source name (a remote one), and the owner of a graph
or source can change: so the rollup keeps the run's (graph, source_name) and a team's scope filters the rollup's
rows at read time, as it filters runs (`receipts.org.teams.owns_q`). The triggers of migration 0021 are rebuilt
to write them, reading the handoff's run:

- a new handoff: +1 (its hour, verdict, run's graph and source name); on PostgreSQL one statement per INSERT,
  grouped, from its transition table;
- a handoff whose verdict, creation time or run changes: -1 for the old key, +1 for the new;
- deleted handoffs (retention deletes them before their runs): their -1s;
- a run whose graph or source name changes (nothing does today; kept exact anyway): its handoffs' counts move.

A handoff whose run is not found (it cannot be: the key is enforced) is counted under ("", "") rather than lost.
The rollup is counted afresh here from the handoffs.
"""

import importlib

from django.db import migrations, models

HOUR = "date_trunc('hour', {}.created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
OWNER = "COALESCE(r.graph, ''), COALESCE(r.source_name, '')"
POSTGRES_UP = f"""
CREATE FUNCTION receipts_handoff_verdict_bucket_born() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO receipts_verdictbucket (bucket, verdict, graph, source_name, n)
    SELECT {HOUR.format("born")}, born.verdict, {OWNER}, COUNT(*)
    FROM born LEFT JOIN receipts_run r ON r.id = born.run_id GROUP BY 1, 2, 3, 4;
    RETURN NULL;
END
$$;
CREATE TRIGGER receipts_handoff_verdict_bucket_insert AFTER INSERT ON receipts_handoff
    REFERENCING NEW TABLE AS born FOR EACH STATEMENT EXECUTE FUNCTION receipts_handoff_verdict_bucket_born();
CREATE FUNCTION receipts_handoff_verdict_bucket_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO receipts_verdictbucket (bucket, verdict, graph, source_name, n)
    SELECT {HOUR.format("OLD")}, OLD.verdict, {OWNER}, -1
    FROM (SELECT 1) AS one LEFT JOIN receipts_run r ON r.id = OLD.run_id
    UNION ALL
    SELECT {HOUR.format("NEW")}, NEW.verdict, {OWNER}, 1
    FROM (SELECT 1) AS one LEFT JOIN receipts_run r ON r.id = NEW.run_id;
    RETURN NULL;
END
$$;
CREATE TRIGGER receipts_handoff_verdict_bucket_update AFTER UPDATE OF verdict, created_at, run_id ON receipts_handoff
    FOR EACH ROW WHEN (OLD.verdict IS DISTINCT FROM NEW.verdict OR OLD.created_at IS DISTINCT FROM NEW.created_at
        OR OLD.run_id IS DISTINCT FROM NEW.run_id)
    EXECUTE FUNCTION receipts_handoff_verdict_bucket_moved();
CREATE FUNCTION receipts_handoff_verdict_bucket_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO receipts_verdictbucket (bucket, verdict, graph, source_name, n)
    SELECT {HOUR.format("gone")}, gone.verdict, {OWNER}, -COUNT(*)
    FROM gone LEFT JOIN receipts_run r ON r.id = gone.run_id GROUP BY 1, 2, 3, 4;
    RETURN NULL;
END
$$;
CREATE TRIGGER receipts_handoff_verdict_bucket_delete AFTER DELETE ON receipts_handoff
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION receipts_handoff_verdict_bucket_gone();
CREATE FUNCTION receipts_run_verdict_bucket_owner() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO receipts_verdictbucket (bucket, verdict, graph, source_name, n)
    SELECT {HOUR.format("h")}, h.verdict, OLD.graph, OLD.source_name, -COUNT(*)
    FROM receipts_handoff h WHERE h.run_id = OLD.id GROUP BY 1, 2
    UNION ALL
    SELECT {HOUR.format("h")}, h.verdict, NEW.graph, NEW.source_name, COUNT(*)
    FROM receipts_handoff h WHERE h.run_id = NEW.id GROUP BY 1, 2;
    RETURN NULL;
END
$$;
CREATE TRIGGER receipts_run_verdict_bucket_owner AFTER UPDATE OF graph, source_name ON receipts_run
    FOR EACH ROW WHEN (OLD.graph IS DISTINCT FROM NEW.graph OR OLD.source_name IS DISTINCT FROM NEW.source_name)
    EXECUTE FUNCTION receipts_run_verdict_bucket_owner();
DELETE FROM receipts_verdictbucket;
INSERT INTO receipts_verdictbucket (bucket, verdict, graph, source_name, n)
    SELECT {HOUR.format("h")}, h.verdict, r.graph, r.source_name, COUNT(*)
    FROM receipts_handoff h JOIN receipts_run r ON r.id = h.run_id GROUP BY 1, 2, 3, 4;
"""
POSTGRES_DOWN = """
DROP TRIGGER IF EXISTS receipts_run_verdict_bucket_owner ON receipts_run;
DROP FUNCTION IF EXISTS receipts_run_verdict_bucket_owner();
DROP TRIGGER IF EXISTS receipts_handoff_verdict_bucket_delete ON receipts_handoff;
DROP FUNCTION IF EXISTS receipts_handoff_verdict_bucket_gone();
DROP TRIGGER IF EXISTS receipts_handoff_verdict_bucket_update ON receipts_handoff;
DROP FUNCTION IF EXISTS receipts_handoff_verdict_bucket_moved();
DROP TRIGGER IF EXISTS receipts_handoff_verdict_bucket_insert ON receipts_handoff;
DROP FUNCTION IF EXISTS receipts_handoff_verdict_bucket_born();
DELETE FROM receipts_verdictbucket;
"""
# Django stores SQLite times as 'YYYY-MM-DD HH:MM:SS[.ffffff]' in UTC (as in migration 0021).
SQLITE_HOUR = "strftime('%Y-%m-%d %H:00:00', {}.created_at)"
SQLITE_OWNER = (
    "COALESCE((SELECT graph FROM receipts_run WHERE id = {0}.run_id), ''), "
    "COALESCE((SELECT source_name FROM receipts_run WHERE id = {0}.run_id), '')"
)
SQLITE_COLUMNS = "receipts_verdictbucket (bucket, verdict, graph, source_name, n)"


def _sqlite_delta(row: str, n: int) -> str:
    return (
        f"INSERT INTO {SQLITE_COLUMNS} "
        f"SELECT {SQLITE_HOUR.format(row)}, {row}.verdict, {SQLITE_OWNER.format(row)}, {n};"
    )


def _sqlite_run_handoffs(row: str, sign: str) -> str:
    return (
        f"INSERT INTO {SQLITE_COLUMNS} SELECT {SQLITE_HOUR.format('h')}, h.verdict, {row}.graph, "
        f"{row}.source_name, {sign}COUNT(*) FROM receipts_handoff h WHERE h.run_id = {row}.id GROUP BY 1, 2;"
    )


SQLITE_TRIGGERS = ["insert", "update", "delete"]
SQLITE_UP = [
    f"""CREATE TRIGGER receipts_handoff_verdict_bucket_insert AFTER INSERT ON receipts_handoff BEGIN
        {_sqlite_delta("NEW", 1)}
    END""",
    f"""CREATE TRIGGER receipts_handoff_verdict_bucket_update AFTER UPDATE OF verdict, created_at, run_id
    ON receipts_handoff WHEN OLD.verdict IS NOT NEW.verdict OR OLD.created_at IS NOT NEW.created_at
        OR OLD.run_id IS NOT NEW.run_id BEGIN
        {_sqlite_delta("OLD", -1)}
        {_sqlite_delta("NEW", 1)}
    END""",
    # Only while the rollup holds rows, as in migration 0021 (a test database's flush).
    f"""CREATE TRIGGER receipts_handoff_verdict_bucket_delete AFTER DELETE ON receipts_handoff
    WHEN EXISTS (SELECT 1 FROM receipts_verdictbucket) BEGIN
        {_sqlite_delta("OLD", -1)}
    END""",
    f"""CREATE TRIGGER receipts_run_verdict_bucket_owner AFTER UPDATE OF graph, source_name ON receipts_run
    WHEN OLD.graph IS NOT NEW.graph OR OLD.source_name IS NOT NEW.source_name BEGIN
        {_sqlite_run_handoffs("OLD", "-")}
        {_sqlite_run_handoffs("NEW", "")}
    END""",
    "DELETE FROM receipts_verdictbucket",
    f"""INSERT INTO {SQLITE_COLUMNS} SELECT {SQLITE_HOUR.format("h")}, h.verdict, r.graph, r.source_name, COUNT(*)
    FROM receipts_handoff h JOIN receipts_run r ON r.id = h.run_id GROUP BY 1, 2, 3, 4""",
]
SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS receipts_run_verdict_bucket_owner",
    *(f"DROP TRIGGER IF EXISTS receipts_handoff_verdict_bucket_{name}" for name in SQLITE_TRIGGERS),
    "DELETE FROM receipts_verdictbucket",
]


# Migration 0021's triggers go before the table changes (SQLite rebuilds the table, and a trigger naming it must
# not be there meanwhile); backwards they come back, with 0021's count, after the columns are gone.
OLD = importlib.import_module("receipts.migrations.0021_reserved")


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
    dependencies = [("receipts", "0026_reserved")]

    operations = [
        migrations.RunPython(
            _run({"postgresql": [OLD.POSTGRES_DOWN], "sqlite": OLD.SQLITE_DOWN}),
            _run({"postgresql": [OLD.POSTGRES_UP], "sqlite": OLD.SQLITE_UP}),
        ),
        migrations.RemoveIndex(model_name="verdictbucket", name="verdict_bucket_time"),
        migrations.AddField(
            model_name="verdictbucket",
            name="graph",
            field=models.CharField(blank=True, db_default="", max_length=100),
        ),
        migrations.AddField(
            model_name="verdictbucket",
            name="source_name",
            field=models.CharField(blank=True, db_default="", max_length=100),
        ),
        migrations.AddIndex(
            model_name="verdictbucket",
            index=models.Index(fields=["bucket", "verdict", "graph", "source_name", "n"], name="verdict_bucket_owner"),
        ),
        migrations.RunPython(
            _run({"postgresql": [POSTGRES_UP], "sqlite": SQLITE_UP}),
            _run({"postgresql": [POSTGRES_DOWN], "sqlite": SQLITE_DOWN}),
        ),
    ]
