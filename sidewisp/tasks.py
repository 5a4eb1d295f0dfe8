"""Beat's tasks for the pages: the workers' status (sidewisp.ops.health) and the overview's rollup (queries.rollups)."""

from __future__ import annotations

from celery import shared_task

from sidewisp.ops import health


@shared_task(bind=True, ignore_result=True)
def record_worker_status(self) -> int:
    """Ping the workers and store who answered (the worker running this counts itself); how many did."""
    return len(health.record_worker_status(me=self.request.hostname or "")["workers"])


@shared_task(ignore_result=True)
def compact_rollups() -> int:
    """Fold the overview rollup's deltas into one row per hour and verdict (receipts.queries.rollups); rows left."""
    from receipts.queries import rollups

    return rollups.compact()
