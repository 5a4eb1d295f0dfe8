"""Monthly partitions of the receipts table on PostgreSQL (migration 0025); nothing on SQLite.

A receipt lands in the partition of its handoff's month (`Receipt.handoff_month`). The beat task creates the
coming months ahead of time (`ensure`); a month nobody created lands in the default partition, so recording
never fails for want of one. Retention drops a month whose receipts are all prunable (`drop`): one short
DROP TABLE instead of a million deletes. Both wait at most LOCK_TIMEOUT_MS for their lock and otherwise leave
the work to the next run, so a page's query never queues behind them for long.
"""

from __future__ import annotations

import logging
import re
from datetime import date, datetime

from django.db import DatabaseError, connection, transaction

TABLE = "receipts_receipt"
MONTHS_AHEAD = 3
LOCK_TIMEOUT_MS = 500
_MONTH_NAME = re.compile(rf"^{TABLE}_p(\d{{4}})(\d{{2}})$")

logger = logging.getLogger(__name__)


def enabled() -> bool:
    """True when the receipts table is partitioned (PostgreSQL after migration 0025)."""
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [TABLE])
        row = cursor.fetchone()
    return row is not None and row[0] == "p"


def months() -> list[date]:
    """The months that have a partition of their own, oldest first."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass",
            [TABLE],
        )
        names = [row[0] for row in cursor.fetchall()]
    found = (_MONTH_NAME.match(name) for name in names)
    return sorted(date(int(m[1]), int(m[2]), 1) for m in found if m)


def following(month: date) -> date:
    return date(month.year + month.month // 12, month.month % 12 + 1, 1)


def ensure(now: datetime) -> list[date]:
    """Create the partitions of this month and the next MONTHS_AHEAD that are missing; returns those made."""
    have = set(months())
    month = date(now.year, now.month, 1)
    made = []
    for _ in range(MONTHS_AHEAD + 1):
        if month not in have and create(month):
            made.append(month)
        month = following(month)
    return made


def drop(month: date) -> int | None:
    """Drop a month's partition; returns how many receipts it held, or None when its lock was not free."""
    name = partition_name(month)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            _wait_briefly(cursor)
            # Deferred foreign-key checks still pending in this transaction would refuse the DROP.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(f"SELECT count(*) FROM {name}")
            count = cursor.fetchone()[0]
            cursor.execute(f"DROP TABLE {name}")
    except DatabaseError as exc:
        logger.warning("retention: partition %s not dropped (%s); the next run tries again", name, type(exc).__name__)
        return None
    return count


def partition_name(month: date) -> str:
    return f"{TABLE}_p{month:%Y%m}"


def create(month: date) -> bool:
    """Create the partition of `month`; False when busy or when the default partition holds its receipts."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            _wait_briefly(cursor)
            cursor.execute(
                f"CREATE TABLE {partition_name(month)} PARTITION OF {TABLE} "
                f"FOR VALUES FROM ('{month.isoformat()}') TO ('{following(month).isoformat()}')"
            )
    except DatabaseError as exc:
        # Busy, or the default partition already holds receipts of that month (they stay there).
        logger.warning("retention: partition for %s not created (%s)", month, type(exc).__name__)
        return False
    return True


def _wait_briefly(cursor) -> None:
    cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{LOCK_TIMEOUT_MS}ms"])
