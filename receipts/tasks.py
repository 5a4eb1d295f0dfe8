"""Periodic work of the evidence domain (scheduled by Celery beat)."""

from __future__ import annotations

import time

from celery import shared_task
from django.conf import settings
from django.core.cache import cache

from receipts import actions, retention
from receipts.ingest import recording, silence
from receipts.models import OutboxIntent
from receipts.notify import alerts, notifications, outbox


@shared_task
def reclassify_overdue_waits() -> int:
    return recording.reclassify_overdue_waits()


@shared_task
def mark_silent_runs() -> int:
    """Mark running observed runs that sent no receipt for SIDEWISP_SILENT_AFTER silent (issue 29 item 5)."""
    return silence.mark_silent()


@shared_task
def expire_overdue_waits() -> int:
    """Escalate or apply the safe default to open waits past their deadline."""
    return actions.expire_overdue_waits()


@shared_task
def send_outbox_intents() -> int:
    """Send again what operator actions promised but the broker did not take (it was down)."""
    return outbox.send_overdue()


BEAT_HEARTBEAT_SECONDS = 2.0


def beat_heartbeat_key() -> str:
    # Per deployment (its queue name): deployments or test runs sharing a Redis never see each other's beat.
    return f"system:beat:{settings.CELERY_TASK_DEFAULT_QUEUE}"


@shared_task
def beat_heartbeat() -> None:
    """Beat is alive: record when (the system banner reports beat stopped when this goes quiet)."""
    cache.set(beat_heartbeat_key(), time.time(), 3600)


# --- Notifications and alerts (issue 14 §1) -------------------------------------------------------


@shared_task(bind=True, max_retries=None)
def deliver_notification(self, delivery_id: int) -> str:
    """Send one promised message; retried with backoff until it is sent or given up (both recorded)."""
    # This worker has the delivery now (its own retries follow): the outbox stops sending it again.
    outbox.mark_applied(OutboxIntent.Kind.DELIVER, delivery_id)
    outcome = notifications.deliver(delivery_id)
    if outcome == notifications.RETRY:
        raise self.retry(countdown=notifications.retry_delay(self.request.retries))
    return outcome


@shared_task
def remind_due_waits() -> int:
    """Remind wait owners of deadlines within the lead time."""
    return notifications.remind_due_waits()


@shared_task
def resend_stalled_deliveries() -> int:
    """Promise again deliveries whose retry the broker did not take."""
    return notifications.resend_stalled()


@shared_task
def evaluate_alert_rules() -> int:
    """Fire or resolve alert rules whose condition changed (window, overdue, heartbeat; verdict ones too)."""
    return alerts.evaluate_all()


# --- Retention (issue 22 §3) ------------------------------------------------------------------------

PRUNE_LOCK_SECONDS = 6 * 3600


def prune_lock_key() -> str:
    return f"system:retention-prune:{settings.CELERY_TASK_DEFAULT_QUEUE}"


@shared_task
def prune_retention() -> dict[str, int] | None:
    """Prune what the retention policy no longer keeps; one run at a time per deployment (None: one is on)."""
    if not cache.add(prune_lock_key(), time.time(), PRUNE_LOCK_SECONDS):
        return None
    try:
        return retention.prune().removed
    finally:
        cache.delete(prune_lock_key())
