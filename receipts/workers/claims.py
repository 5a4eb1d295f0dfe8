"""Claiming an operator's decision: the one process that resumes the graph takes it, exactly once.

An observing app claims the decisions on its run, in the order they were made,
either in this process (`sidewisp_agent.decisions.await_decision`) or from another
host over the API (`sidewisp.api`). A claim is atomic: two callers never both
get one decision. Each claim is audited as a resume by the app.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from receipts.ingest import recording
from receipts.models import AuditEntry, Decision, OutboxIntent, Run
from receipts.notify import outbox
from receipts.org import audit

# A wait's `resolution` (spec §1 v1.1) after a decision of each kind.
RESOLUTION_OF = {Decision.Kind.APPROVE: "approved", Decision.Kind.EDIT: "edited", Decision.Kind.REJECT: "rejected"}


def unclaimed(run: Run) -> QuerySet[Decision]:
    """The run's decisions no process has applied yet, oldest first."""
    return (
        Decision.objects.filter(run=run, applied_at__isnull=True).select_related("handoff").order_by("decided_at", "pk")
    )


def claim(decision: Decision, *, resumed_by: str, source: str | None = None) -> bool:
    """Mark `decision` applied and audit the resume; False when another caller claimed it first.

    Only the run's own side claims: a local app (`source` None) a local run, a source its own runs;
    anyone else gets `recording.RunNotOwned` naming the run's owner (issue 19).
    """
    if problem := recording.owner_problem(decision.run, source or "", act="claim its decisions"):
        raise recording.RunNotOwned("operation_id", problem)
    with transaction.atomic():
        claimed = Decision.objects.filter(pk=decision.pk, applied_at__isnull=True).update(
            applied_at=timezone.now(), applications=F("applications") + 1
        )
        if not claimed:
            return False
        # issue 19 §1: the app that claims the decision is the one that carries it out.
        outbox.mark_applied(OutboxIntent.Kind.RESUME, decision.pk)
        detail: dict = {"decision": decision.pk, "resumed_by": resumed_by}
        if source is not None:
            detail["source"] = source
        audit.log(
            actor=None,
            # A reopen's claim is the task given back to its agent (agents.host.execution audits a worker's alike).
            action="task.rework" if decision.kind == Decision.Kind.REOPEN else "wait.resume",
            object_type="run",
            object_id=decision.run_id,
            outcome=AuditEntry.Outcome.DONE,
            run=decision.run,
            handoff=decision.handoff,
            detail=detail,
        )
    return True


def record_resolution(decision: Decision) -> None:
    """Record the decided wait as resolved, as the observer does when the app resumes (the same attempt).

    For apps on another host, whose observer cannot see the server's receipts: the claim is their resume.
    """
    handoff = decision.handoff
    token = (handoff.wait_part or {}).get("resume_token_id")
    if not handoff.wait_part or token != decision.resume_token_id:
        return  # a later wait replaced the decided one
    # Recorded as the run's own side: its operation id is looked up in that side's namespace (issue 29 §4).
    with recording.writing_as(decision.run.source_name):
        recording.record(
            handoff_id=handoff.handoff_id,
            operation_id=decision.run.operation_id,
            part="wait",
            value={**handoff.wait_part, "resolved": True, "resolution": RESOLUTION_OF[decision.kind]},
            attempt=f"resolved-{recording.digest(token)}",
        )
