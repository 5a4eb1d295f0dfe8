"""Driving a run from a Celery task: deliveries, the lease, idempotent re-delivery.

Tasks are delivered at least once. A re-delivered task must neither run a
finished run again nor drive a thread another worker is driving, and a task
that keeps killing its worker must stop being re-delivered at some point
(brokers keep no delivery count, so we keep one).
"""

from __future__ import annotations

from django.db.models import F
from django.utils import timezone

from agents import leases, runner
from receipts import audit, runs
from receipts.models import AuditEntry, Decision, Run

MAX_DELIVERIES = 5
SETTLED = {Run.Status.COMPLETE, Run.Status.FAILED, Run.Status.WAITING}


class LeaseBusy(Exception):
    """Another worker holds the run's lease; try again shortly."""


def start(run_id: int) -> str:
    run = Run.objects.get(pk=run_id)
    if run.status in SETTLED:
        return run.status  # a re-delivery after the run already settled
    with leases.hold(run.pk) as held:
        if not held:
            raise LeaseBusy(run.operation_id)
        run.refresh_from_db()
        if run.status in SETTLED:
            return run.status
        # Counted under the lease, so waiting for a busy lease is not a delivery.
        if _count_delivery(run) > MAX_DELIVERIES:
            return _give_up(run)
        return runner.start_run(run)


def resume(decision_id: int) -> str:
    decision = Decision.objects.select_related("run").get(pk=decision_id)
    if decision.applied_at is not None:
        return decision.run.status  # the token was already used
    with leases.hold(decision.run_id) as held:
        if not held:
            raise LeaseBusy(decision.run.operation_id)
        decision.refresh_from_db()
        decision.run.refresh_from_db()
        if decision.applied_at is not None:
            return decision.run.status
        if not decision.run.auto_continue:
            # Kept, not applied: resuming auto-continue applies it (receipts.actions).
            return "held"
        Decision.objects.filter(pk=decision.pk).update(applications=F("applications") + 1)
        status = runner.resume_run(decision.run, decision.as_resume())
        Decision.objects.filter(pk=decision.pk).update(applied_at=timezone.now())
        _audit_system("wait.resume", decision.run, decision.handoff, {"decision": decision.pk, "status": status})
        return status


def reverify(run_id: int) -> str:
    run = Run.objects.get(pk=run_id)
    with leases.hold(run.pk) as held:
        if not held:
            raise LeaseBusy(run.operation_id)
        result = runner.reverify(run)
        _audit_system("task.reverify", run, run.handoffs.order_by("created_at", "pk").last(), {"result": result})
        return result


def _audit_system(action: str, run: Run, handoff, detail: dict) -> None:
    # The system's half of an operator action: the audit log shows what the worker did with it.
    audit.log(
        actor=None,
        action=action,
        object_type="run",
        object_id=run.pk,
        outcome=AuditEntry.Outcome.DONE,
        run=run,
        handoff=handoff,
        detail=detail,
    )


def _count_delivery(run: Run) -> int:
    Run.objects.filter(pk=run.pk).update(deliveries=F("deliveries") + 1)
    return Run.objects.values_list("deliveries", flat=True).get(pk=run.pk)


def _give_up(run: Run) -> str:
    runs.set_status(run, Run.Status.FAILED, error="TooManyDeliveries")
    return Run.Status.FAILED
