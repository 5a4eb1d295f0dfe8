"""Beat's tasks of the web side: the workers' status that pages and /healthz read (sidewisp.health)."""

from __future__ import annotations

from celery import shared_task

from sidewisp import health


@shared_task(bind=True, ignore_result=True)
def record_worker_status(self) -> int:
    """Ping the workers and store who answered (the worker running this counts itself); how many did."""
    return len(health.record_worker_status(me=self.request.hostname or "")["workers"])
