"""Operator control of a run: stop or resume its auto-continue, retry it from its last checkpoint."""

from __future__ import annotations

from django.db import transaction

from receipts.actions.policy import (
    FINISHED,
    RESUME_RUN,
    RETRY_RUN,
    STOP_RUN,
    STOPPABLE,
    Outcome,
    Result,
    User,
    check,
    log_attempt,
    noop,
    refuse,
    replayed,
)
from receipts.actions.steps import promise, sent_or_queued
from receipts.ingest import runs
from receipts.models import AuditEntry, OutboxIntent, Run
from receipts.workers import runtime

# --- STALE_CONTROL, OPEN_TOOL_PROTOCOL: stop and resume auto-continue ---------------------


def stop_auto_continue(*, user: User, run_id: object, key: str, reason: str) -> Result:
    """Stop driving the run: the worker checks before every step and parks the run."""
    found = check(user, STOP_RUN, run_id)
    if not found.ok:
        return found
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=found.run.pk)
        if not run.auto_continue:
            return noop(user, STOP_RUN, run, key, "Auto-continue is already stopped; nothing changed.")
        if run.status in FINISHED:
            return refuse(user, STOP_RUN, run, key, _ended(run, "stop"))
        if not run.handoffs.filter(verdict__in=STOPPABLE).exists():
            refusal = "Only a run with a stale-control or open-tool-protocol handoff can be stopped."
            return refuse(user, STOP_RUN, run, key, refusal)
        _set_auto_continue(run, False)
        log_attempt(user, STOP_RUN.name, STOP_RUN, run, AuditEntry.Outcome.DONE, reason=reason, key=key)
    return Result(Outcome.DONE, "Auto-continue is stopped; the worker parks the run before its next step.", run)


def resume_auto_continue(*, user: User, run_id: object, key: str, reason: str) -> Result:
    """The operator says the evidence is reconciled: drive the run again from its checkpoint."""
    found = check(user, RESUME_RUN, run_id)
    if not found.ok:
        return found
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=found.run.pk)
        if run.auto_continue:
            return noop(user, RESUME_RUN, run, key, "Auto-continue is already on; nothing changed.")
        if run.status in FINISHED:
            return refuse(user, RESUME_RUN, run, key, _ended(run, "continue"))
        _set_auto_continue(run, True)
        drivable = runtime.current().can_drive(run)
        # A decision that arrived while the run was stopped was kept, not applied: apply it now.
        pending = run.decisions.filter(applied_at__isnull=True).order_by("decided_at").first() if drivable else None
        work = "decision" if pending is not None else ("start" if drivable and run.status in _DRIVABLE else "none")
        entry = log_attempt(
            user,
            RESUME_RUN.name,
            RESUME_RUN,
            run,
            AuditEntry.Outcome.DONE,
            reason=reason,
            key=key,
            detail={"enqueued": work},
        )
        intent = None
        if pending is not None:
            intent = promise(OutboxIntent.Kind.RESUME, pending.pk, run, entry)
        elif work == "start":
            intent = promise(OutboxIntent.Kind.START, run.pk, run, entry)
    if not drivable:
        nothing = "Auto-continue is on again; no Sidewisp worker drives this run, so nothing was enqueued."
        return Result(Outcome.DONE, f"{nothing} {runtime.current().resumer(run)}", run)
    message = sent_or_queued(
        intent,
        "Auto-continue is on again; the run continues from its checkpoint.",
        "Auto-continue is on again. The run is queued: it continues from its checkpoint as soon as a worker is "
        "reachable.",
    )
    return Result(Outcome.DONE, message, run)


_DRIVABLE = (Run.Status.PARKED, Run.Status.QUEUED, Run.Status.RUNNING)


def _ended(run: Run, what: str) -> str:
    return f"This run has ended ({run.get_status_display().lower()}): there is nothing to {what}."


# --- parked runs and DESTINATION_NOT_STARTED: retry from the checkpoint ----------------------


def retry_refusal(run: Run) -> str:
    """Why retrying `run` from its checkpoint cannot work now, in words; "" when it can (pages offer it then)."""
    if not runtime.current().can_drive(run):
        return "No Sidewisp worker can drive this run here, so Sidewisp cannot retry it."
    if run.status not in _DRIVABLE:
        return f"{_ended(run, 'retry')[:-1]}; a worker does not start an ended run again."
    if not run.auto_continue:
        return "Auto-continue is stopped: resume it instead, which continues the run from its checkpoint."
    if run.status != Run.Status.PARKED and not run.handoffs.filter(verdict="DESTINATION_NOT_STARTED").exists():
        return "Only a parked run, or one whose destination did not start, is retried from its checkpoint."
    if run.intents.filter(kind=OutboxIntent.Kind.START, sent_at__isnull=True).exists():
        return "A start of this run is already queued; it goes out as soon as a worker is reachable."
    return ""


def retry(*, user: User, run_id: object, key: str, reason: str) -> Result:
    """Drive a parked or stuck run again from its last checkpoint: one start, promised through the outbox.

    The worker continues the interrupted step (agents.host.runner.start_run); it never starts an ended run.
    """
    found = check(user, RETRY_RUN, run_id)
    if not found.ok:
        return found
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=found.run.pk)
        if replayed(RETRY_RUN, run, key):
            return noop(user, RETRY_RUN, run, key, "This retry was already made; nothing changed.")
        if refusal := retry_refusal(run):
            return refuse(user, RETRY_RUN, run, key, refusal)
        entry = log_attempt(
            user,
            RETRY_RUN.name,
            RETRY_RUN,
            run,
            AuditEntry.Outcome.DONE,
            reason=reason,
            key=key,
            detail={"status_before": run.status},
        )
        intent = promise(OutboxIntent.Kind.START, run.pk, run, entry)
    message = sent_or_queued(
        intent,
        "The run is retried: a worker continues it from its last checkpoint.",
        "The retry is queued: a worker continues the run from its last checkpoint as soon as one is reachable.",
    )
    return Result(Outcome.DONE, message, run)


def _set_auto_continue(run: Run, value: bool) -> None:
    run.auto_continue = value
    run.save(update_fields=["auto_continue", "updated_at"])
    runs.announce(run)
