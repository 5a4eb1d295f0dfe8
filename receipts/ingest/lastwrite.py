"""The last statement of a transaction that ends with a recording batch, sent with its COMMIT (issue 32 §2).

The evidence writer commits right after its batch, whose last statement is the runs' UPDATE
(`receipts.ingest.runwrites`: health, sequence numbers). Sent alone it is a round trip, then the COMMIT
another: inside `committing()` the UPDATE is held (`update_last`) and goes to PostgreSQL with the COMMIT in one
(psycopg's pipeline, `sqlsets.together`). Elsewhere, and whenever the transaction is not the block's own, it
is sent as any statement.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence

from django.db import connection

from receipts.ingest import sqlsets
from receipts.queries import prepared


def update_last(model, objs: Iterable, names: Sequence[str], *, add: str | None, then: Callable[[dict], None]) -> None:
    """`update_rows`, its result given to `then`: inside a `committing` block held until the block ends and sent
    with the transaction's COMMIT (or before the next statement, if one comes first); elsewhere now."""
    objs = list(objs)
    if objs and getattr(_held, "open", False):
        _send_held(commit=False)  # one held before (none in a batch: its own statements sent it)
        _held.statement = (*sqlsets.update_statement(model, objs, names, add), add, then)
        return
    then(sqlsets.update_rows(model, objs, names, add=add))


@contextlib.contextmanager
def committing() -> Iterator[None]:
    """Around the work a transaction ends with (inside its `transaction.atomic()`, nothing after the block but
    the commit): the statement a recording batch holds (`update_last`: its runs' UPDATE) goes to PostgreSQL with
    the COMMIT, one round trip instead of two; Django's commit then finds nothing left to commit. Only when the
    block is the outermost atomic block's, which commits on exit, and nothing asked for a rollback (`_commits`);
    else it is sent at the block's end as any statement. A statement run inside the block meanwhile sends the
    held one first (the order stays the order written).
    """
    if connection.vendor != "postgresql":
        yield
        return
    _held.open, _held.statement = True, None
    try:
        with connection.execute_wrapper(_held_first):
            yield
        _send_held(commit=_commits())
    finally:
        _held.open, _held.statement = False, None


_held = threading.local()


def _held_first(execute, sql, params, many, context):
    """`committing`'s execute wrapper: the held statement goes before any other."""
    if getattr(_held, "statement", None) is not None:
        _send_held(commit=False)
    return execute(sql, params, many, context)


def _send_held(*, commit: bool) -> None:
    held, _held.statement = getattr(_held, "statement", None), None
    if held is None:
        return
    sql, params, add, then = held
    if not commit:
        with prepared.cursor(prepare=False) as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall() if add else []
        then(dict(rows))
        return
    with sqlsets.together():  # the UPDATE and the COMMIT, one Sync; its rows read after
        cursor = prepared.cursor(prepare=False)
        cursor.execute(sql, params)
        # On psycopg's own connection: Django's COMMIT, when the caller's block ends, finds nothing to commit
        # (one COMMIT on the wire, one in the statement counts).
        connection.connection.execute("COMMIT")
    with cursor:
        then(dict(cursor.fetchall()) if add else {})


def _commits() -> bool:
    """Whether committing now is what the caller's block does at its end: the one atomic block open is the
    outermost (its transaction its own), it commits on exit, and nothing asked for its rollback."""
    return (
        connection.in_atomic_block
        and connection.commit_on_exit
        and len(connection.atomic_blocks) == 1
        and not connection.needs_rollback
    )
