"""Operator actions on a false completion: reopen it, verify it again, accept it or resolve it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from receipts.actions.policy import (
    ACCEPT_TASK,
    REOPEN_TASK,
    RESOLVE_TASK,
    SETTLEMENTS,
    VERIFY_TASK,
    Outcome,
    Result,
    User,
    check,
    log_attempt,
    noop,
    refuse,
    replayed,
)
from receipts.actions.steps import locked_handoff, promise, sent_or_queued
from receipts.ingest.recording import note_settlement
from receipts.models import AuditEntry, Decision, Handoff, OutboxIntent, Run, VerdictChange
from receipts.org import audit
from receipts.workers import runtime

# --- FALSE_COMPLETE: reopen, or verify again -----------------------------------------------
#
# Reopen (spec §5 v1.3) gives the work back: a Decision of kind "reopen" on the false-complete handoff, which
# the run's driver claims like an approval (a worker for a hosted run, the app's await_decision for an
# observed one): the destination agent gets the task again from its last checkpoint with a note naming the
# verifier and its result, and its outcome is verified again when it ends. Verify again only runs the verifier.

IN_FLIGHT = "A reopen of this task is already under way; nothing changed."


def reopen(*, user: User, handoff_id: object, key: str, reason: str) -> Result:
    """Reopen a false-complete task: its destination agent works on it again, then it is verified again."""
    found = check(user, REOPEN_TASK, handoff_id)
    if not found.ok:
        return found
    agent_runtime = runtime.current()
    with transaction.atomic():
        handoff = locked_handoff(found.handoff.pk)
        if replayed(REOPEN_TASK, handoff, key):
            return noop(user, REOPEN_TASK, handoff, key, "This task was already reopened; nothing changed.")
        if reopen_in_flight(handoff.run):
            return noop(user, REOPEN_TASK, handoff, key, IN_FLIGHT)
        refusal = ""
        if handoff.verdict != "FALSE_COMPLETE":
            refusal = f"Only a false completion can be reopened (this handoff is {handoff.verdict})."
        elif not handoff.receiver:
            refusal = "This handoff names no destination agent to give the task back to."
        elif not agent_runtime.can_reopen(handoff.run):
            refusal = (
                "This run has no outcome verifier to check the task once its agent has worked on it again."
                if agent_runtime.can_drive(handoff.run)
                else "Nothing can give this task back to its agent here: " + agent_runtime.reopener(handoff.run)
            )
        if refusal:
            return refuse(user, REOPEN_TASK, handoff, key, refusal)
        entry = log_attempt(
            user, REOPEN_TASK.name, REOPEN_TASK, handoff, AuditEntry.Outcome.DONE, reason=reason, key=key
        )
        decision = Decision.objects.create(
            run=handoff.run,
            handoff=handoff,
            resume_token_id=f"reopen-{entry.pk}",
            kind=Decision.Kind.REOPEN,
            decided_by=user,
        )
        intent = promise(OutboxIntent.Kind.RESUME, decision.pk, handoff.run, entry)
    if not agent_runtime.can_drive(handoff.run):
        message = f"The task is reopened. {agent_runtime.reopener(handoff.run)}"
    else:
        message = sent_or_queued(
            intent,
            f"The task is reopened: {handoff.receiver} works on it again from its checkpoint, then it is verified.",
            "The task is reopened. It is queued: a worker gives it back to its agent as soon as one is reachable.",
        )
    return Result(Outcome.DONE, message, handoff.run, handoff, decision=decision)


def reopen_in_flight(run: Run) -> bool:
    """A reopen of the run was decided and its driver has not taken it yet, or it is being worked on."""
    reopens = Decision.objects.filter(run=run, kind=Decision.Kind.REOPEN)
    if reopens.filter(applied_at__isnull=True).exists():
        return True
    return reopens.exists() and run.status in (Run.Status.QUEUED, Run.Status.RUNNING)


def verify_again(*, user: User, handoff_id: object, key: str, reason: str) -> Result:
    """Only run the false-complete task's outcome verifier again, through Celery; audited."""
    found = check(user, VERIFY_TASK, handoff_id)
    if not found.ok:
        return found
    with transaction.atomic():
        handoff = locked_handoff(found.handoff.pk)
        if replayed(VERIFY_TASK, handoff, key):
            return noop(user, VERIFY_TASK, handoff, key, "This task was already verified again; nothing changed.")
        refusal = ""
        if handoff.verdict != "FALSE_COMPLETE":
            refusal = f"Only a false completion can be verified again (this handoff is {handoff.verdict})."
        elif not _has_verifier(handoff.run):
            refusal = "This run has no outcome verifier to run again."
        if refusal:
            return refuse(user, VERIFY_TASK, handoff, key, refusal)
        entry = log_attempt(
            user, VERIFY_TASK.name, VERIFY_TASK, handoff, AuditEntry.Outcome.DONE, reason=reason, key=key
        )
        intent = promise(OutboxIntent.Kind.REVERIFY, handoff.run_id, handoff.run, entry)
    message = sent_or_queued(
        intent,
        "Its outcome verifier runs again.",
        "The verification is queued: it runs as soon as a worker is reachable.",
    )
    return Result(Outcome.DONE, message, handoff.run, handoff)


def _has_verifier(run: Run) -> bool:
    return runtime.current().can_reverify(run)


# --- FALSE_COMPLETE: accept as is, or mark resolved ------------------------------------------
#
# Neither makes the handoff green: its verdict stays FALSE_COMPLETE (nothing proved the outcome) and its
# run's status is left alone. The settlement is a VerdictChange row (cause task.accept or task.resolve)
# beside the audit entry that says who and why; while it is the handoff's latest verdict change, the
# handoff is no longer an open failure. Evidence that changes the verdict again supersedes it.


@dataclass(frozen=True)
class Settlement:
    how: str  # "accept" or "resolve"
    by: str
    at: datetime
    reason: str


def settle(*, user: User, handoff_id: object, how: str, key: str, reason: str) -> Result:
    """Close a false completion without a new verification: "accept" (the outcome is fine as it is) or
    "resolve" (it was put right outside Sidewisp). A reason is required; both are audited."""
    policy = {"accept": ACCEPT_TASK, "resolve": RESOLVE_TASK}[how]
    found = check(user, policy, handoff_id)
    if not found.ok:
        return found
    now = timezone.now()
    with transaction.atomic():
        handoff = locked_handoff(found.handoff.pk)
        if replayed(policy, handoff, key):
            return noop(user, policy, handoff, key, "This was already done; nothing changed.")
        if (earlier := settlement(handoff)) is not None:
            done = "accepted as is" if earlier.how == "accept" else "marked resolved"
            message = f"Already {done} by {earlier.by} at {earlier.at:%Y-%m-%d %H:%M:%S} UTC; nothing changed."
            log_attempt(user, policy.name, policy, handoff, AuditEntry.Outcome.NOOP, reason=message, key=key)
            return Result(Outcome.NOOP, message, handoff.run, handoff)
        refusal = ""
        if handoff.verdict != "FALSE_COMPLETE":
            refusal = f"Only a false completion can be accepted or resolved (this handoff is {handoff.verdict})."
        elif not reason.strip():
            refusal = "A reason is required."
        if refusal:
            return refuse(user, policy, handoff, key, refusal)
        log_attempt(user, policy.name, policy, handoff, AuditEntry.Outcome.DONE, reason=reason, key=key)
        note_settlement(handoff, policy.name, now)
    done = "accepted as is" if how == "accept" else "marked resolved"
    message = f"The task is {done}. Its verdict stays false complete; it no longer counts as an open failure."
    return Result(Outcome.DONE, message, handoff.run, handoff)


def settlement(handoff: Handoff) -> Settlement | None:
    """The settlement in force for `handoff`, or None (see settlements)."""
    return settlements([handoff]).get(handoff.pk)


def settlements(
    handoffs: list[Handoff], history: Mapping[int, list[VerdictChange]] | None = None
) -> dict[int, Settlement]:
    """The settlements in force by handoff pk: where the latest verdict change is an accept or resolve.

    Two queries for any number of handoffs, one when the caller has their `history` (oldest first).
    """
    pks = [h.pk for h in handoffs if h.verdict == "FALSE_COMPLETE"]
    if not pks:
        return {}
    latest: dict[int, VerdictChange] = {}
    if history is not None:
        latest = {pk: history[pk][-1] for pk in pks if history.get(pk)}
    else:
        for change in VerdictChange.objects.filter(handoff_id__in=pks).order_by("at", "pk"):
            latest[change.handoff_id] = change
    settled = {pk: c for pk, c in latest.items() if c.cause in SETTLEMENTS}
    if not settled:
        return {}
    entries = AuditEntry.objects.filter(
        handoff_id__in=settled, action__in=SETTLEMENTS, outcome=AuditEntry.Outcome.DONE
    ).order_by("at", "pk")
    said = {(e.handoff_id, e.action): e for e in entries}
    found = {}
    for pk, change in settled.items():
        entry = said.get((pk, change.cause))
        found[pk] = Settlement(
            how=change.cause.split(".")[1],
            by=entry.actor_name if entry else audit.SYSTEM,
            at=change.at,
            reason=entry.reason if entry else "",
        )
    return found
