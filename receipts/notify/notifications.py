"""Telling people: a wait's owner hears when it opens, before its deadline, and when it is escalated or
defaulted; alert rules (receipts.notify.alerts) speak through the same deliveries.

Every message is a `Delivery` promised through the outbox (`receipts.notify.outbox`) in the transaction of the
change it tells of: it is sent when that change commits and never when it rolls back. A Celery task
(`receipts.tasks.deliver_notification`) does the network I/O, with retries and backoff, so a dead
receiver never blocks recording or a page. The delivery key makes each message exactly once per event
and channel.

Payloads are minimized like events: ids, names, codes, times and a link to the page. Every string in
them passes `bundle.identifier_problem`; the link is built here from `SIDEWISP_BASE_URL` and a page path.

A webhook's body is signed: `X-Sidewisp-Signature: sha256=<hex>` is the HMAC-SHA256, under the
channel's secret, of `<X-Sidewisp-Timestamp>.<X-Sidewisp-Delivery>.<body>` (the timestamp header's
value, a dot, the delivery id header's value, a dot, the raw body bytes): a captured request replayed
under another delivery id fails the check.

Webhooks and Slack go only to the addresses `receipts.notify.destinations` allows (public ones, or the
networks of SIDEWISP_WEBHOOK_ALLOW_NETWORKS), to the address that was checked, and never follow a
redirect. A delivery's `last_error` says "address not allowed", "connection failed" or an HTTP status,
never the operating system's error text. Slack text escapes `&`, `<` and `>` in every value it
interpolates, so an agent-chosen name cannot mention `<!channel>` or a user.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import F, Q, QuerySet
from django.dispatch import receiver
from django.urls import reverse
from django.utils import timezone

from receipts.ingest.signals import Change, HandoffState, handoffs_changed
from receipts.models import Delivery, Handoff, NotificationChannel, OutboxIntent, Run
from receipts.notify import outbox, transport
from receipts.notify.transport import DeliveryError
from receipts.org import teams
from receipts.verdicts.bundle import identifier_problem

log = logging.getLogger(__name__)
UNREAD = object()  # an argument the caller did not read: the callee reads it

WAIT_OPENED = "wait.opened"
WAIT_DUE_SOON = "wait.due_soon"
WAIT_ESCALATED = "wait.escalated"
WAIT_DEFAULTED = "wait.defaulted"

SIGNATURE_HEADER = "X-Sidewisp-Signature"
TIMESTAMP_HEADER = "X-Sidewisp-Timestamp"
DELIVERY_HEADER = "X-Sidewisp-Delivery"
# A delivery's retries wait 2, 4, 8 … seconds, at most this long (below the broker's visibility timeout,
# so a waiting retry is never handed to a second worker).
MAX_RETRY_SECONDS = 16

# What deliver() did.
SENT = "sent"
RETRY = "retry"
FAILED = "failed"
SKIPPED = "skipped"  # already sent or failed, or another worker holds it
# Every try with its backoff is over well within this (five 5 s timeouts and 30 s of backoff by default).
STALLED_AFTER = timedelta(minutes=5)


# --- promising ----------------------------------------------------------------------------------


def promise(
    channel: NotificationChannel,
    event: str,
    payload: dict[str, Any],
    *,
    key: str,
    run: Run | None = None,
    recipient: str = "",
    now: datetime | None = None,
) -> Delivery | None:
    """Write a delivery of `payload` to `channel` and its outbox intent in the current transaction.

    None when `key` was promised before (exactly once per event and channel).
    """
    now = now or timezone.now()
    if Delivery.objects.filter(key=key).exists():
        return None
    try:
        with transaction.atomic():  # a racing promise of the same key must not break the caller's transaction
            delivery = Delivery.objects.create(
                channel=channel,
                event=event,
                recipient=recipient,
                key=key,
                payload=minimized(payload),
                created_at=now,
            )
    except IntegrityError:
        return None
    outbox.promise(OutboxIntent.Kind.DELIVER, delivery.pk, run=run, key=f"deliver:{delivery.pk}", now=now)
    return delivery


def minimized(payload: dict[str, Any]) -> dict[str, Any]:
    """`payload` with every string that fails `bundle.identifier_problem` emptied (logged by field name only).

    Its strings are ids, names and verdict codes from the database: held to the identifier rule (spec v1.3),
    not the free-text one, so a run named like a git SHA is still named."""
    kept: dict[str, Any] = {}
    for field, value in payload.items():
        if field != "link" and isinstance(value, str) and (problem := identifier_problem(value)) is not None:
            log.warning("notification field %s dropped: it %s", field, problem)
            value = ""
        kept[field] = value
    return kept


def link(path: str) -> str:
    """An absolute link to a page of this deployment (SIDEWISP_BASE_URL has no credentials: settings)."""
    return f"{settings.SIDEWISP_BASE_URL}{path}"


def key(*parts: object) -> str:
    """An idempotency key: the event in clear, the ids and names that make it unique as a short digest."""
    head, *rest = parts
    digest = hashlib.sha256("|".join(str(p) for p in rest).encode()).hexdigest()[:24]
    return f"{head}:{digest}"


# --- wait owners ------------------------------------------------------------------------------


def wait_events(before: HandoffState | None, after: HandoffState) -> list[tuple[str, str, str]]:
    """What a change to a handoff tells its wait's owners, as (event, owner, previous owner)."""
    events = []
    was_open = before is not None and before.wait_open
    previous = before.wait_owner if before is not None else ""
    if after.wait_open and after.wait_owner:
        if not was_open or not previous:
            events.append((WAIT_OPENED, after.wait_owner, ""))
        elif previous != after.wait_owner:
            events.append((WAIT_ESCALATED, after.wait_owner, previous))
    expired = after.wait_resolution == "expired"
    if expired and after.wait_owner and (before is None or before.wait_resolution != "expired"):
        events.append((WAIT_DEFAULTED, after.wait_owner, ""))
    return events


@receiver(handoffs_changed, dispatch_uid="receipts.notify.notifications.notify_wait_owners")
def notify_wait_owners(sender, changes: list[Change], **kwargs) -> None:
    """Promise the owners' messages for what these changes did to waits (in the recording transaction).

    Each owner's channels are read once for all the changes, and which owners are users in one query."""
    found = [(change, event) for change in changes for event in wait_events(change.before, change.after)]
    if not found:
        return
    users = _users_named({owner for _, (_, owner, _) in found})
    channels: dict[str, list[NotificationChannel]] = {}
    for change, (event, owner, previous) in found:
        if owner not in channels:
            channels[owner] = list(channels_of(owner))
        notify_owner(
            change.handoff,
            event,
            owner,
            previous_owner=previous,
            now=change.now,
            to=channels[owner],
            owner_user=users.get(owner),
        )


def notify_owner(
    handoff: Handoff,
    event: str,
    owner: str,
    *,
    previous_owner: str = "",
    now: datetime,
    to: list[NotificationChannel] | None = None,
    owner_user: object = UNREAD,
) -> int:
    """Promise `event` about `handoff`'s wait to every channel of `owner` (`to`, when read already); returns
    how many were new.

    An owner who is a user outside the run's team hears nothing of it (issue 22 §2: wait owners are per
    team); a name that is no user's (a group's) is told through that group's channels.
    """
    if not _owner_sees(owner, handoff.run, owner_user):
        log.warning("wait notification not sent: its owner is not in the run's team")
        return 0
    wait = handoff.wait_part or {}
    payload = {
        "event": event,
        "at": iso(now),
        "run": handoff.run_id,
        "operation_id": handoff.run.operation_id,
        "handoff": handoff.pk,
        "handoff_id": handoff.handoff_id,
        "sender": handoff.sender,
        "receiver": handoff.receiver,
        "verdict": handoff.verdict,
        "owner": owner,
        "previous_owner": previous_owner,
        "reason": str(wait.get("reason") or ""),
        "deadline_utc": iso(handoff.wait_deadline) if handoff.wait_deadline else None,
        "link": link(reverse("sidewisp:run-detail", args=[handoff.run_id]) + f"#handoff-{handoff.pk}"),
    }
    # One message per wait (its resume token), owner and deadline: a recorded-again part changes none of them.
    token = str(wait.get("resume_token_id") or "")
    deadline = payload["deadline_utc"] if event in (WAIT_DUE_SOON, WAIT_ESCALATED) else ""
    promised = 0
    for channel in channels_of(owner) if to is None else to:
        k = key(event, handoff.pk, token, owner, deadline, channel.pk)
        if promise(channel, event, payload, key=k, run=handoff.run, recipient=owner, now=now) is not None:
            promised += 1
    return promised


def _owner_sees(owner: str, run, user: object = UNREAD) -> bool:
    """Whether the wait's owner may hear of `run`: a name that is no user's (a group's) always may.

    `user` is the owner's user (None: no user has that name) when the caller read it already."""
    if user is UNREAD:
        user = _users_named({owner}).get(owner)
    return user is None or teams.sees_run(user, run)


def _users_named(names: set[str]) -> dict:
    """The users among `names`, by name (one query)."""
    name_field = get_user_model().USERNAME_FIELD
    users = get_user_model()._default_manager.filter(**{f"{name_field}__in": names})
    return {getattr(user, name_field): user for user in users}


def channels_of(owner: str) -> QuerySet[NotificationChannel]:
    """The active channels of a wait's owner: a user's own and their groups', or a group's (owned by a group)."""
    name_field = get_user_model().USERNAME_FIELD
    mine = Q(**{f"user__{name_field}": owner}) | Q(**{f"group__user__{name_field}": owner}) | Q(group__name=owner)
    return NotificationChannel.objects.filter(mine, active=True).distinct().order_by("pk")


def remind_due_waits(*, now: datetime | None = None) -> int:
    """Remind the owners of open waits due within the lead time (Celery beat); returns how many were new."""
    now = now or timezone.now()
    soon = now + timedelta(minutes=settings.SIDEWISP_NOTIFY_LEAD_MINUTES)
    due = Handoff.objects.filter(wait_open=True, wait_deadline__gt=now, wait_deadline__lte=soon).exclude(wait_owner="")
    promised = 0
    for handoff in due.select_related("run").order_by("wait_deadline", "pk"):
        with transaction.atomic():
            promised += notify_owner(handoff, WAIT_DUE_SOON, handoff.wait_owner, now=now)
    return promised


# --- sending (the Celery task calls deliver) ------------------------------------------------------


def deliver(delivery_id: int) -> str:
    """Try to send one delivery once; SENT, RETRY (try again later), FAILED (given up) or SKIPPED.

    The attempt is claimed first (a compare-and-set on the attempt count): two copies of the task never
    make the same attempt, and a sent delivery is never sent again. Sending stays at least once (a
    receiver may have taken a message whose answer was lost): receivers dedupe on the delivery id.
    """
    delivery = Delivery.objects.select_related("channel").filter(pk=delivery_id).first()
    if delivery is None or delivery.status != Delivery.Status.QUEUED:
        return SKIPPED
    attempt = delivery.attempts + 1
    claimed = Delivery.objects.filter(pk=delivery.pk, status=Delivery.Status.QUEUED, attempts=delivery.attempts)
    if not claimed.update(attempts=F("attempts") + 1):
        return SKIPPED
    try:
        _send(delivery)
    except DeliveryError as exc:
        given_up = attempt >= settings.SIDEWISP_NOTIFY_ATTEMPTS or exc.final
        status = Delivery.Status.FAILED if given_up else Delivery.Status.QUEUED
        Delivery.objects.filter(pk=delivery.pk).update(status=status, last_error=exc.reason)
        log.warning("delivery %s (%s) attempt %s failed: %s", delivery.pk, delivery.event, attempt, exc.reason)
        return FAILED if given_up else RETRY
    Delivery.objects.filter(pk=delivery.pk).update(status=Delivery.Status.SENT, sent_at=timezone.now(), last_error="")
    return SENT


def resend_stalled(*, now: datetime | None = None) -> int:
    """Promise again the deliveries still queued long after every retry should have run (Celery beat).

    A retry is a message the worker publishes; when the broker refused it, nothing else would send the
    delivery. Once per attempt count: the outbox key names it. Returns how many were promised.
    """
    now = now or timezone.now()
    stalled = Delivery.objects.filter(status=Delivery.Status.QUEUED, created_at__lt=now - STALLED_AFTER)
    promised = 0
    for delivery in stalled.order_by("pk")[:100]:
        resend_key = f"deliver:{delivery.pk}:after-{delivery.attempts}"
        if OutboxIntent.objects.filter(key=resend_key).exists():
            continue
        first = OutboxIntent.objects.filter(key=f"deliver:{delivery.pk}").select_related("run").first()
        with transaction.atomic():
            outbox.promise(OutboxIntent.Kind.DELIVER, delivery.pk, run=first.run if first else None, key=resend_key)
        promised += 1
    return promised


def retry_delay(retries: int) -> int:
    return min(2 ** (retries + 1), MAX_RETRY_SECONDS)


def signature(secret: str, timestamp: str, delivery_id: str, body: bytes) -> str:
    """The value of the signature header (how a receiver checks it: README, Notifications and alerts)."""
    signed = f"{timestamp}.{delivery_id}.".encode() + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def summary(payload: dict[str, Any], quote: Callable[[str], str] = str) -> str:
    """One line for people (e-mail subject and body, Slack text): the payload's codes and names.

    Every value taken from the payload passes through `quote` (Slack's escaping for Slack text).
    """
    event = payload.get("event", "")
    value = lambda name, default="": quote(str(payload.get(name) or default))  # noqa: E731
    if event.startswith("wait."):
        what = {
            WAIT_OPENED: "is waiting for your approval",
            WAIT_DUE_SOON: "is due soon",
            WAIT_ESCALATED: f"was escalated to you from {value('previous_owner', 'nobody')}",
            WAIT_DEFAULTED: "passed its deadline: the safe default was applied",
        }.get(event, quote(event))
        due = f", due {value('deadline_utc')}" if payload.get("deadline_utc") and event != WAIT_DEFAULTED else ""
        reason = f" ({value('reason')})" if payload.get("reason") else ""
        return f"Sidewisp: a wait of {value('operation_id')}{reason} {what}{due}."
    state = "FIRING" if event.endswith("fired") else "resolved"
    return f"Sidewisp alert {state}: {value('rule')} ({value('condition')})."


def slack_escaped(text: str) -> str:
    """Text as Slack shows it literally: `&`, `<` and `>` as entities, so `<!channel>` mentions nobody."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _send(delivery: Delivery) -> None:
    channel = delivery.channel
    if channel is None:
        raise DeliveryError("channel removed")
    if not channel.active:
        raise DeliveryError("channel inactive")
    if channel.kind == NotificationChannel.Kind.EMAIL:
        text = f"{summary(delivery.payload)}\n{delivery.payload.get('link', '')}"
        transport.send_email(channel, delivery.recipient, summary(delivery.payload), text)
    elif channel.kind == NotificationChannel.Kind.SLACK:
        text = f"{summary(delivery.payload, slack_escaped)}\n{slack_escaped(str(delivery.payload.get('link', '')))}"
        transport.post(channel.url, json.dumps({"text": text}).encode(), {})
    else:
        body = json.dumps(delivery.payload, sort_keys=True, separators=(",", ":")).encode()
        stamp, delivery_id = str(int(time.time())), str(delivery.pk)
        headers = {TIMESTAMP_HEADER: stamp, DELIVERY_HEADER: delivery_id}
        if channel.secret:
            headers[SIGNATURE_HEADER] = signature(channel.secret, stamp, delivery_id, body)
        transport.post(channel.url, body, headers)


def iso(moment: datetime) -> str:
    """ISO 8601 in UTC with a Z, as receipts write times."""
    return moment.isoformat().replace("+00:00", "Z")
