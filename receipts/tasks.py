"""Periodic work of the evidence domain (scheduled by Celery beat)."""

from __future__ import annotations

from celery import shared_task

from receipts import actions, outbox, recording


@shared_task
def reclassify_overdue_waits() -> int:
    return recording.reclassify_overdue_waits()


@shared_task
def expire_overdue_waits() -> int:
    """Escalate or apply the safe default to open waits past their deadline."""
    return actions.expire_overdue_waits()


@shared_task
def send_outbox_intents() -> int:
    """Send again what operator actions promised but the broker did not take (it was down)."""
    return outbox.send_overdue()
