"""A run's event sequence numbers: taken in the transaction that writes the event, so pages can order them."""

from __future__ import annotations

from django.db import connection
from django.db.models import F

from receipts.models import Run


def next_seqs(counts: dict[int, int]) -> dict[int, int]:
    """Take `n` event sequence numbers for each run (pk -> n) in one UPDATE; pk -> the last of them."""
    if len(counts) == 1 or not connection.features.can_return_columns_from_insert:
        return {pk: next_seq(Run(pk=pk), n) for pk, n in counts.items()}
    table, seq, pk = (connection.ops.quote_name(n) for n in (Run._meta.db_table, "seq", Run._meta.pk.column))
    rows = ", ".join(["(%s, %s)"] * len(counts))
    cast = "::bigint" if connection.vendor == "postgresql" else ""
    sql = (
        f"UPDATE {table} SET {seq} = {seq} + v.column2{cast} FROM (VALUES {rows}) AS v "
        f"WHERE {table}.{pk} = v.column1{cast} RETURNING {table}.{pk}, {table}.{seq}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [value for item in sorted(counts.items()) for value in item])
        return dict(cursor.fetchall())


def next_seq(run: Run, n: int = 1) -> int:
    """Take the run's next `n` event sequence numbers; the last of them (locks the run row until commit)."""
    if connection.features.can_return_columns_from_insert:  # PostgreSQL, SQLite >= 3.35: UPDATE … RETURNING
        table, seq, pk = (connection.ops.quote_name(n) for n in (Run._meta.db_table, "seq", Run._meta.pk.column))
        with connection.cursor() as cursor:
            cursor.execute(f"UPDATE {table} SET {seq} = {seq} + %s WHERE {pk} = %s RETURNING {seq}", [n, run.pk])
            return cursor.fetchone()[0]
    Run.objects.filter(pk=run.pk).update(seq=F("seq") + n)
    return Run.objects.values_list("seq", flat=True).get(pk=run.pk)
