"""The steps an allowed action shares: lock its row, record a wait part, promise its work through the outbox."""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser

from receipts.ingest.recording import record, writing_as
from receipts.models import AuditEntry, Handoff, OutboxIntent, Run
from receipts.notify import outbox
from receipts.org import audit


def promise(kind: str, object_id: int, run: Run, entry: AuditEntry) -> OutboxIntent:
    """The one way an action enqueues work: an outbox intent written in the action's transaction, beside its
    audit entry (which the intent's key names), and sent after commit; the beat sweep sends it again if the
    broker did not take it."""
    return outbox.promise(kind, object_id, run=run, key=f"{kind}:{object_id}:audit-{entry.pk}")


def sent_or_queued(intent: OutboxIntent | None, sent: str, queued: str) -> str:
    # The action is done either way; the message says when the work only waits in the outbox (the broker
    # was unreachable, or the caller's transaction has not committed yet).
    return queued if intent is not None and not outbox.is_sent(intent) else sent


def locked_handoff(pk: int) -> Handoff:
    return Handoff.objects.select_for_update().select_related("run").get(pk=pk)


def record_wait(handoff: Handoff, wait: dict, attempt: str, now: datetime) -> Handoff:
    # As the run's own side: its operation id is looked up in that side's namespace (issue 29 §4).
    with writing_as(handoff.run.source_name):
        return record(
            handoff_id=handoff.handoff_id,
            operation_id=handoff.run.operation_id,
            part="wait",
            value=wait,
            attempt=attempt[:200],
            now=now,
        ).handoff


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def actor_name(user: AbstractBaseUser | None) -> str:
    return user.get_username() if user is not None else audit.SYSTEM
