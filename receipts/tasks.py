"""Periodic work of the evidence domain (scheduled by Celery beat)."""

from __future__ import annotations

from celery import shared_task

from receipts import recording


@shared_task
def reclassify_overdue_waits() -> int:
    return recording.reclassify_overdue_waits()
