"""The evidence writer's statements bound by the server, its inserts prepared once per connection (issue 32 §2).

Django's psycopg backend binds parameters on the client (`ClientCursor`): a statement travels as SQL text with its
values quoted into it, and PostgreSQL lexes, parses, analyzes and plans it anew each time. A recording batch's
statements carry its rows as one JSON document (`receipts.ingest.sqlsets`) and their texts repeat batch after
batch: parsing, analyzing and planning them was a quarter of PostgreSQL's CPU per receipt stored, and quoting the
document into the text a few per cent of the writer's.

`cursor()` gives a Django cursor (its error wrapping, its execute wrappers and query log, the connection's
transaction and pipeline) over psycopg's server-binding cursor: the values travel as parameters, never quoted into
the text (placeholders stay `%s`). With `prepare` (the default) each statement is prepared on its first execution
on the connection (a named statement, also inside a pipeline: `sqlsets.together`), then executed by name; without,
it is sent unnamed and planned with its values each time.

Prepare only a statement whose plan cannot depend on how big the tables are: an INSERT of the rows of a JSON
document (`jsonb_populate_recordset`, `ON CONFLICT DO NOTHING`), a count of a small table. PostgreSQL plans a
prepared statement with its values five times, then keeps one generic plan while it is not costlier: made while a
table is small (a new deployment's, a benchmark's) that plan scans it and keeps scanning it as it grows, until an
ANALYZE replaces the plan (a read of runs by `operation_id = ANY($1)` took the index by source name and filtered
every run of the source: 35.5 us of PostgreSQL's CPU per receipt at 4,000 runs instead of 32.5, growing; an UPDATE
from a document hashed a scan of the whole table). The reads and UPDATEs (an index or a join to choose) are sent
unnamed. Forcing custom plans instead (`plan_cache_mode`) is no cure: it is per session, and the foreign-key
checks at COMMIT are prepared statements too (planned per checked row: half as much CPU again).

Which statements are prepared is psycopg's bookkeeping, per connection (`Connection._prepared`), so a connection
Django closes (on an error, at `CONN_MAX_AGE`, after a failed health check) takes it along: the next one starts
with none. A ROLLBACK through psycopg (`connection.rollback()`, a failed atomic block) has psycopg deallocate them
all (DEALLOCATE ALL); they are prepared again when next executed. Django leaves `prepare_threshold` None (nothing
prepared, for the poolers' sake): `cursor()`'s statements raise it only while they are sent, so no other statement
(the ORM's, all client-bound) is counted or prepared by psycopg. psycopg keeps at most `prepared_max` (100)
statements per connection, deallocating the least recently used.

Connection poolers: one in transaction mode that does not track prepared statements (PgBouncer before 1.21, or
later ones without `max_prepared_statements`) gives a transaction another server connection, where the name
prepared on the first does not exist. `SIDEWISP_PREPARED_WRITES=off` then sends every statement unnamed, still
server-bound (only the quoting saved), which any pooler passes.
"""

from __future__ import annotations

import psycopg
from django.conf import settings
from django.db import connection
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper

_ONLY_WHEN_ASKED = 2**62  # a prepare_threshold no statement reaches by being repeated


class _PreparedCursor(psycopg.Cursor):
    """psycopg's server-binding cursor executing each statement prepared (`cursor`'s), or unnamed when
    `prepare` is False."""

    prepare = True

    def execute(self, query, params=None, *, prepare=None, binary=None):
        if not self.prepare:
            return super().execute(query, params, prepare=False, binary=binary)
        conn = self.connection
        threshold = conn.prepare_threshold
        if threshold is None:  # psycopg prepares nothing at None, even when asked
            conn.prepare_threshold = _ONLY_WHEN_ASKED
        try:
            return super().execute(query, params, prepare=True, binary=binary)
        finally:
            conn.prepare_threshold = threshold


class _Logged(CursorDebugWrapper):
    """Django's query log (`DEBUG`, `CaptureQueriesContext`) of `cursor()`'s statements: their text as written,
    `%s` where the values go (Django's own asks psycopg for the text sent, which a server-bound cursor has not)."""

    def execute(self, sql, params=None):
        with self.debug_sql(sql, params):
            return CursorWrapper.execute(self, sql, params)


def cursor(*, prepare: bool = True):
    """A cursor of this thread's connection whose statements are bound by the server and, with `prepare`, prepared
    once per connection (only statements whose plan cannot depend on the tables' sizes: see the module docstring);
    wrapped as `connection.cursor()` wraps Django's own. PostgreSQL only."""
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        found = _PreparedCursor(connection.connection)
    found.prepare = prepare and settings.SIDEWISP_PREPARED_WRITES
    connection.validate_thread_sharing()
    return _Logged(found, connection) if connection.queries_logged else connection.make_cursor(found)
