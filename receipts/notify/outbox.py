"""The transactional outbox: what an operator action promises a worker is written with the action, then sent.

`promise()` writes an intent (start a run, apply a decision, re-verify a task) in the action's own
transaction, beside its decision and audit entry, and sends it once that commits. A send that fails
(the broker is down, a connection broke) leaves the intent unsent, logs one line and never raises into the
action: the decision is taken either way. `send_overdue()`, run by Celery beat every few seconds, sends
again whatever is due.

Sent is not done (issue 19 §1): an intent is *applied* once the worker that carried it out has said so in
its own transaction (`mark_applied`, called by the worker when it takes the work on). A sent intent is due
again `SIDEWISP_INTENT_APPLY_SECONDS` after its send, so one that a broker lost, or a worker of another
deployment took, is sent again (later re-sends back off up to `MAX_RESEND_SECONDS`). Sending is at least
once, so the workers apply idempotently: a decision once (`Decision.applied_at` under the run's lease), a
start not again once the run settled.

Two senders never send one intent at the same time: each attempt first claims the intent by raising its
attempt count from the value it read (a compare-and-set that works on SQLite and PostgreSQL alike).
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta
from functools import partial

from celery import current_app
from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import QuerySet
from django.utils import timezone
from kombu.exceptions import KombuError
from redis import RedisError

from receipts.models import OutboxIntent, Run
from receipts.workers import runtime

log = logging.getLogger(__name__)

# The on-commit send has this long before the sweep may take an intent; also how long a claim holds.
CLAIM_SECONDS = 30
# After a failed send the sweep retries after 2, 4, 8 … seconds, at most this long.
MAX_RETRY_SECONDS = 60
# A sent intent no worker applied is sent again after the apply bound, then after twice that … at most this long.
MAX_RESEND_SECONDS = 300
# What a worker carries out for a run (a delivery is a message, not work on a run).
WORK_KINDS = (OutboxIntent.Kind.START, OutboxIntent.Kind.RESUME, OutboxIntent.Kind.REVERIFY)
SWEEP_BATCH = 200
# What a broken or unreachable broker raises: the sweep stops there instead of trying every intent.
BROKER_ERRORS = (KombuError, RedisError, OSError)
# The Celery task that sends a notification or alert message (receipts.tasks.deliver_notification).
DELIVER_TASK = "receipts.tasks.deliver_notification"
_USERINFO = re.compile(r"(\w+://)[^/@\s]*@")


def promise(kind: str, object_id: int, *, run: Run | None, key: str, now: datetime | None = None) -> OutboxIntent:
    """Write the intent in the current transaction and send it right after that commits.

    `key` names the action that promised it (unique): one action, one intent. `run` is None only for a
    delivery about no run (receipts.notify.notifications).
    """
    now = now or timezone.now()
    intent = OutboxIntent.objects.create(
        kind=kind, object_id=object_id, run=run, key=key[:200], created_at=now, due_at=now + _claim()
    )
    transaction.on_commit(partial(dispatch, intent.pk), robust=True)
    return intent


def is_sent(intent: OutboxIntent) -> bool:
    return OutboxIntent.objects.filter(pk=intent.pk, sent_at__isnull=False).exists()


def mark_applied(kind: str, object_id: int, *, now: datetime | None = None) -> int:
    """The worker carrying out `kind` for `object_id` says so: every unapplied such intent is applied.

    Call it in the worker's own transaction, with the write that takes the work on (the run's lease held,
    a decision's application counted): from then on the work is the worker's, and at-least-once delivery of
    its message (acks late) covers a worker that dies. Returns how many intents it applied.
    """
    return OutboxIntent.objects.filter(kind=kind, object_id=object_id, applied_at__isnull=True).update(
        applied_at=now or timezone.now()
    )


def unapplied(*, now: datetime | None = None) -> QuerySet[OutboxIntent]:
    """Work intents no worker applied within the apply bound of their promise (sent or not)."""
    now = now or timezone.now()
    late = now - apply_bound()
    return OutboxIntent.objects.filter(kind__in=WORK_KINDS, applied_at__isnull=True, created_at__lte=late)


def apply_bound() -> timedelta:
    return timedelta(seconds=settings.SIDEWISP_INTENT_APPLY_SECONDS)


def dispatch(intent_id: int) -> bool:
    """Send one intent now, if nobody has tried it yet; True when the broker took it. Never raises."""
    try:
        return _attempt(intent_id, seen_attempts=0) is True
    except DatabaseError as exc:
        log.warning("outbox: intent %s not sent: the database failed (%s); the sweep sends it", intent_id, _say(exc))
        return False


def send_overdue(*, now: datetime | None = None, limit: int = SWEEP_BATCH) -> int:
    """Send the unapplied intents that are due (unsent, or sent and not applied in time), oldest first;
    returns how many the broker took.

    Stops at the first broker failure (the broker is down: the next sweep tries again).
    """
    now = now or timezone.now()
    due = OutboxIntent.objects.filter(applied_at__isnull=True, due_at__lte=now).order_by("due_at", "pk")
    sent = 0
    for pk, attempts, sent_at in due.values_list("pk", "attempts", "sent_at")[:limit]:
        if sent_at is not None:
            log.warning("outbox: intent %s was sent but no worker applied it in time; sending it again", pk)
        outcome = _attempt(pk, seen_attempts=attempts, now=now)
        if outcome is BrokerDown:
            break
        if outcome is True:
            sent += 1
    return sent


class BrokerDown:
    """An attempt's outcome when the broker could not be reached."""


def _attempt(intent_id: int, *, seen_attempts: int, now: datetime | None = None) -> bool | type[BrokerDown] | None:
    """Claim the intent (None when someone else has it or it is applied), send it, record the outcome.

    `now` is the sweep's clock: the claim, a retry and the next check count from it.
    """
    now = now or timezone.now()
    claimed = OutboxIntent.objects.filter(pk=intent_id, applied_at__isnull=True, attempts=seen_attempts).update(
        attempts=seen_attempts + 1, due_at=now + _claim()
    )
    if not claimed:
        return None
    intent = OutboxIntent.objects.get(pk=intent_id)
    try:
        _sender(intent.kind)(intent.object_id)
    except Exception as exc:  # noqa: BLE001 - whatever the send raised, the intent stays for the sweep
        retry = now + timedelta(seconds=min(2**intent.attempts, MAX_RETRY_SECONDS))
        OutboxIntent.objects.filter(pk=intent_id).update(due_at=retry, last_error=_say(exc)[:200])
        log.warning(
            "outbox: %s %s not sent (attempt %s): %s; retried from %s",
            intent.kind,
            intent.object_id,
            intent.attempts,
            _say(exc),
            f"{retry:%H:%M:%S}",
        )
        return BrokerDown if isinstance(exc, BROKER_ERRORS) else False
    sent = timezone.now()
    # Due again if no worker applies it in time (the worker marks it applied: mark_applied).
    OutboxIntent.objects.filter(pk=intent_id, applied_at__isnull=True).update(
        sent_at=sent, due_at=max(sent, now) + _resend_after(intent), last_error=""
    )
    # A quick worker may have applied it before this line: it was sent all the same.
    OutboxIntent.objects.filter(pk=intent_id, applied_at__isnull=False, sent_at__isnull=True).update(sent_at=sent)
    return True


def _sender(kind: str):
    if kind == OutboxIntent.Kind.DELIVER:
        return _send_delivery
    agent_runtime = runtime.current()
    return {
        OutboxIntent.Kind.START: agent_runtime.enqueue_start,
        OutboxIntent.Kind.RESUME: agent_runtime.enqueue_resume,
        OutboxIntent.Kind.REVERIFY: agent_runtime.enqueue_reverify,
    }[kind]


def _send_delivery(delivery_id: int) -> None:
    # By the task's name through the Celery app, as its .delay() would: receipts.tasks imports this module
    # (its beat sweep), so this module does not import it.
    current_app.send_task(DELIVER_TASK, args=[delivery_id])


def _claim() -> timedelta:
    return timedelta(seconds=CLAIM_SECONDS)


def _resend_after(intent: OutboxIntent) -> timedelta:
    # The first send is checked after the bound; the next after twice the bound … (a worker busy for long).
    sends = max(intent.attempts, 1)
    seconds = settings.SIDEWISP_INTENT_APPLY_SECONDS * 2 ** min(sends - 1, 10)
    return timedelta(seconds=min(seconds, MAX_RESEND_SECONDS))


def _say(exc: BaseException) -> str:
    # One line, and no credentials a broker URL in the message might carry.
    text = _USERINFO.sub(r"\1", " ".join(str(exc).split()))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
