"""The deadline sweep's system decisions (Celery beat): escalate an overdue wait once, or apply its safe default."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from receipts.actions.steps import iso, locked_handoff, promise, record_wait
from receipts.actions.waits import decision_for, decision_on_open_wait
from receipts.ingest.recording import reclassify, reclassify_overdue_waits
from receipts.models import AuditEntry, Decision, Handoff, OutboxIntent
from receipts.org import audit
from receipts.workers import runtime


def expire_overdue_waits(*, now: datetime | None = None) -> int:
    """Escalate or default every open wait past its deadline; returns how many were handled.

    With a backup owner (and `on_expiry: escalate`), the wait is given to the
    backup with a new deadline, once. Otherwise the safe default (reject) is
    applied as a system decision bound to the wait's token and the run resumes.
    """
    now = now or timezone.now()
    handled = 0
    due = Handoff.objects.filter(wait_open=True, wait_deadline__lte=now).select_related("run").order_by("pk")
    for candidate in due:
        escalation = runtime.current().escalation_for(candidate)
        with transaction.atomic():
            handoff = locked_handoff(candidate.pk)
            if not handoff.wait_open or handoff.wait_deadline is None or handoff.wait_deadline > now:
                continue  # decided or reassigned meanwhile
            handled += _expire(handoff, escalation, now)
    reclassify_overdue_waits(now=now)
    return handled


def _expire(handoff: Handoff, escalation: runtime.Escalation, now: datetime) -> int:
    wait = handoff.wait_part or {}
    token = wait.get("resume_token_id") or ""
    if decision_on_open_wait(handoff) is not None:
        return 0  # decided before its deadline: that decision is on its way (the outbox sends it until applied)
    if escalation.backup_owner and handoff.wait_owner != escalation.backup_owner:
        deadline = now + timedelta(minutes=escalation.deadline_minutes)
        before = handoff.wait_owner
        new = {**wait, "owner": escalation.backup_owner, "deadline_utc": iso(deadline), "resolved": False}
        handoff = record_wait(handoff, new, f"escalate-{iso(now)}", now)
        audit.log(
            actor=None,
            action="wait.escalate",
            object_type="handoff",
            object_id=handoff.pk,
            handoff=handoff,
            outcome=AuditEntry.Outcome.DONE,
            reason="deadline passed",
            detail={"from": before, "to": escalation.backup_owner, "deadline_utc": iso(deadline)},
        )
        return 1
    if not token or decision_for(handoff, token, any_handoff=True) is not None:
        return 0  # no token to answer with, or a decision is already on its way: nothing to apply
    if not runtime.current().can_resume(handoff.run):
        return 0  # no graph to resume: re-classification shows the wait as UNCERTAIN
    decision = Decision.objects.create(
        run=handoff.run,
        handoff=handoff,
        resume_token_id=token,
        kind=Decision.Kind.REJECT,
        message=f"Deadline passed: safe default ({escalation.safe_default}) applied.",
        decided_by=None,
        decided_at=now,
    )
    # Resolved now, as expired (spec §1 v1.1): the outcome verifier then proves the action did not happen.
    handoff = record_wait(handoff, {**wait, "resolved": True, "resolution": "expired"}, f"expire-{iso(now)}", now)
    reclassify(handoff, now=now)
    entry = audit.log(
        actor=None,
        action="wait.expire",
        object_type="handoff",
        object_id=handoff.pk,
        handoff=handoff,
        outcome=AuditEntry.Outcome.DONE,
        reason="deadline passed",
        detail={"decision": decision.pk, "safe_default": escalation.safe_default},
    )
    promise(OutboxIntent.Kind.RESUME, decision.pk, handoff.run, entry)
    return 1
