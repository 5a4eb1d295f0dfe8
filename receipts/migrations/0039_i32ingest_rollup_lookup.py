"""Issue 32 §2: the rollup's trigger on new handoffs looks each one's run up by its key, whatever the tables' sizes.

The trigger (migration 0027) runs one statement per INSERT of handoffs: their transition table joined to their
runs. PL/pgSQL plans that statement once per connection, when it first fires, and keeps the plan: on a new
database (a new deployment, every benchmark) the runs table is small then, and the plan hashes a scan of all of
it; the writer's connection kept scanning every run once per batch as the table grew (until an ANALYZE replaced
the plan), a cost per receipt that grew with the number of runs (at 16,000 runs, PostgreSQL's CPU per receipt
stored was 41.5 us instead of 35). Each run is now looked up by its primary key: a LATERAL subquery (only a
nested loop can join it), planned without sequential scans (the function's `SET enable_seqscan = off`: a small
table's statistics would otherwise have it scan the runs once per handoff). The same rows are counted.

The deleted handoffs' trigger keeps its join: retention deletes thousands at once, for which a scan may be the
better plan. SQLite's triggers are per row already: unchanged.
"""

from django.db import migrations

HOUR = "date_trunc('hour', born.created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
OWNER = "COALESCE(r.graph, ''), COALESCE(r.source_name, '')"
BORN = """
CREATE OR REPLACE FUNCTION receipts_handoff_verdict_bucket_born() RETURNS trigger LANGUAGE plpgsql {setting} AS $$
BEGIN
    INSERT INTO receipts_verdictbucket (bucket, verdict, graph, source_name, n)
    SELECT {hour}, born.verdict, {owner}, COUNT(*)
    FROM born {run} GROUP BY 1, 2, 3, 4;
    RETURN NULL;
END
$$;
"""
LOOKED_UP = "LEFT JOIN LATERAL (SELECT graph, source_name FROM receipts_run WHERE id = born.run_id LIMIT 1) r ON true"
JOINED = "LEFT JOIN receipts_run r ON r.id = born.run_id"  # migration 0027's


def _born(run: str, setting: str):
    def replace(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            sql = BORN.format(hour=HOUR, owner=OWNER, run=run, setting=setting)
            schema_editor.execute(sql, None)  # sent as written

    return replace


class Migration(migrations.Migration):
    dependencies = [("receipts", "0038_i32ingest_fewer_indexes")]

    # Backwards, CREATE OR REPLACE without a SET clause leaves the function no setting.
    operations = [migrations.RunPython(_born(LOOKED_UP, "SET enable_seqscan = off"), _born(JOINED, ""))]
