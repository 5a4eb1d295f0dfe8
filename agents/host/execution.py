"""Driving a run from a Celery task: deliveries, the lease, idempotent re-delivery.

Tasks are delivered at least once. A re-delivered task must neither run a
finished run again nor drive a thread another worker is driving, and a task
that keeps killing its worker must stop being re-delivered at some point
(brokers keep no delivery count, so we keep one).

Every run ends: an exception that escapes a run's task either retries it (a
transient error: a lost database or broker connection) or fails the run with
the exception's class name (`after_error`), and a periodic sweep re-enqueues
runs whose worker vanished without a word (`take_over_stalled`).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from agents.host import leases, runner
from agents.observe.transient import TRANSIENT
from receipts.ingest import runs
from receipts.models import AuditEntry, Decision, OutboxIntent, Run
from receipts.notify import outbox
from receipts.org import audit
from receipts.workers import deliveries, runtime

logger = logging.getLogger(__name__)

MAX_DELIVERIES = 5
SETTLED = {Run.Status.COMPLETE, Run.Status.FAILED, Run.Status.WAITING}
# A queued run whose start task has not begun after this long is taken over (its task
# was lost with a Redis that restarted without persistence, or never published).
QUEUED_STALL = timedelta(minutes=10)


MISSING = "missing"


def _missing(what: str, pk: int) -> str:
    # A task naming a row this database does not have (a stale message in a shared queue, a reset
    # database): nothing to drive, and retrying would not make it appear.
    logger.warning("task names %s %s, which this database does not have: dropped", what, pk)
    return MISSING


class LeaseBusy(Exception):
    """Another worker holds the run's lease; try again shortly."""


def start(run_id: int, carrier: deliveries.Carrier | None = None) -> str:
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        return _missing("run", run_id)
    if run.status in SETTLED:
        _taken(OutboxIntent.Kind.START, run.pk)
        return run.status  # a re-delivery after the run already settled
    with leases.hold(run.pk) as held:
        if not held:
            raise LeaseBusy(run.operation_id)
        run.refresh_from_db()
        _taken(OutboxIntent.Kind.START, run.pk)
        if run.status in SETTLED:
            return run.status
        # Counted under the lease, so waiting for a busy lease is not a delivery.
        if _count_delivery(run) > MAX_DELIVERIES:
            return _give_up(run)
        return _driven(run, OutboxIntent.Kind.START, run.pk, carrier, lambda: runner.start_run(run))


def resume(decision_id: int, carrier: deliveries.Carrier | None = None) -> str:
    decision = Decision.objects.select_related("run").filter(pk=decision_id).first()
    if decision is None:
        return _missing("decision", decision_id)
    if decision.applied_at is not None:
        _taken(OutboxIntent.Kind.RESUME, decision.pk)
        return decision.run.status  # the token was already used
    with leases.hold(decision.run_id) as held:
        if not held:
            raise LeaseBusy(decision.run.operation_id)
        decision.refresh_from_db()
        decision.run.refresh_from_db()
        if decision.applied_at is not None:
            _taken(OutboxIntent.Kind.RESUME, decision.pk)
            return decision.run.status
        if not decision.run.auto_continue:
            # Kept, not applied: resuming auto-continue applies it (receipts.actions) through a new intent.
            _taken(OutboxIntent.Kind.RESUME, decision.pk)
            return "held"
        with transaction.atomic():
            Decision.objects.filter(pk=decision.pk).update(applications=F("applications") + 1)
            _taken(OutboxIntent.Kind.RESUME, decision.pk)
        run = decision.run
        reopened = decision.kind == Decision.Kind.REOPEN
        status = _driven(run, OutboxIntent.Kind.RESUME, decision.pk, carrier, lambda: _apply(run, decision))
        Decision.objects.filter(pk=decision.pk).update(applied_at=timezone.now())
        action = "task.rework" if reopened else "wait.resume"
        _audit_system(action, decision.run, decision.handoff, {"decision": decision.pk, "status": status})
        return status


def _apply(run: Run, decision: Decision) -> str:
    if decision.kind != Decision.Kind.REOPEN:
        return runner.resume_run(run, decision.as_resume())
    # What the verifier found when the task was reopened: its name and result, never its text.
    found = decision.handoff.verification_part or {}
    verifier, result = str(found.get("verifier") or "unknown"), str(found.get("result") or "fail")
    try:
        return runner.reopen_run(run, decision.resume_token_id, decision.handoff.receiver, verifier, result)
    except ValueError as exc:  # the graph had not ended: nothing was driven; the audit entry says so
        logger.warning("reopen of run %s not applied: %s", run.operation_id, exc)
        return "not reopened"


def reverify(run_id: int, carrier: deliveries.Carrier | None = None) -> str:
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        return _missing("run", run_id)
    with leases.hold(run.pk) as held:
        if not held:
            raise LeaseBusy(run.operation_id)
        _taken(OutboxIntent.Kind.REVERIFY, run.pk)
        result = _driven(run, OutboxIntent.Kind.REVERIFY, run.pk, carrier, lambda: runner.reverify(run))
        _audit_system("task.reverify", run, run.handoffs.order_by("created_at", "pk").last(), {"result": result})
        return result


def after_error(exc: BaseException, *, attempt: int, run_id: int | None = None, decision_id: int | None = None) -> bool:
    """Settle what an exception escaping a run's task means; True when the task should be retried.

    A transient error (`TRANSIENT`) closes this thread's database connection (a
    terminated one would fail every later query) and asks for a retry while
    `attempt` (1 for the first delivery) is below `MAX_DELIVERIES`. Any other
    error, or a transient one on the last attempt, fails the run with the
    exception's class name, unless the run has ended already. The run is named
    by `run_id`, or by `decision_id` for a resume. If even that write fails, the
    run keeps its expired lease and `take_over_stalled` finds it.
    """
    transient = isinstance(exc, TRANSIENT)
    if transient:
        connection.close()
        if attempt < MAX_DELIVERIES:
            logger.warning("run task attempt %d failed (%s); retrying", attempt, type(exc).__name__)
            return True
    try:
        if run_id is None and decision_id is not None:
            run_id = Decision.objects.values_list("run_id", flat=True).filter(pk=decision_id).first()
        run = Run.objects.filter(pk=run_id).first() if run_id is not None else None
        if run is not None and run.status not in runs.ENDED:
            runs.set_status(run, Run.Status.FAILED, error=type(exc).__name__)
    except TRANSIENT as again:
        connection.close()
        logger.warning("run %s not marked failed (%s); the stall sweep will retry it", run_id, type(again).__name__)
    return False


def take_over_stalled(now=None) -> int:
    """Re-enqueue the hosted runs no worker is driving and no task will reach; returns how many.

    A run is taken over when

    - it is `running`, its lease is free or expired, and its heartbeat is older
      than the lease plus the broker's visibility timeout plus 5 s (every lease
      renewal stamps the heartbeat, so a live worker is never this late, and a
      dead worker's task had its chance to come back from Redis by itself); or
    - it is `queued`, holds no live lease, and was created (or last taken over)
      more than `QUEUED_STALL` ago.

    Taking over stamps the heartbeat (a compare-and-set, so two sweeps never
    both take the same run) and enqueues `resume_run` for a decision whose
    application began but did not finish, else `start_run`. Both tasks are
    idempotent. `start` counts the delivery, so a run that keeps stalling is
    failed after `MAX_DELIVERIES`; a taken-over resume is counted here.

    The tasks are enqueued through the registered agent runtime (agents.host.hosting.HostingRuntime,
    which the outbox sends through too), not by importing agents.tasks: those tasks call this module.
    """
    agent_runtime = runtime.current()
    now = now or timezone.now()
    grace = timedelta(seconds=settings.SIDEWISP_LEASE_SECONDS + settings.CELERY_BROKER_VISIBILITY_TIMEOUT + 5)
    free = Q(lease_until__isnull=True) | Q(lease_until__lt=now)
    running = Q(status=Run.Status.RUNNING) & (Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=now - grace))
    cutoff = now - QUEUED_STALL
    queued = Q(status=Run.Status.QUEUED) & (
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, created_at__lt=cutoff)
    )
    stalled = Run.objects.filter(free & (running | queued), mode=Run.Mode.HOSTED).exclude(graph="")
    taken = 0
    for run in stalled:
        if not Run.objects.filter(pk=run.pk, status=run.status, heartbeat_at=run.heartbeat_at).update(heartbeat_at=now):
            continue  # another sweep took it, or its worker came back
        taken += 1
        decision = Decision.objects.filter(run_id=run.pk, applied_at__isnull=True, applications__gt=0).first()
        if decision is None:
            logger.warning("taking over stalled run %s: start again", run.pk)
            agent_runtime.enqueue_start(run.pk)
        elif _count_delivery(run) > MAX_DELIVERIES:
            _give_up(run)
        else:
            logger.warning("taking over stalled run %s: resume decision %s again", run.pk, decision.pk)
            agent_runtime.enqueue_resume(decision.pk)
    return taken


def _driven(run: Run, task: str, object_id: int, carrier: deliveries.Carrier | None, drive) -> str:
    # issue 21 §1: the run's history shows each delivery (task id, worker, attempt) and how it ended; an
    # exception leaves it without an end, which the history shows as cut short.
    delivery = deliveries.begin(run, task, object_id, carrier)
    outcome = drive()
    deliveries.end(delivery, outcome)
    return outcome


def _taken(kind: str, object_id: int) -> None:
    # issue 19 §1: this worker has the work now (its lease held): the outbox stops sending it again.
    outbox.mark_applied(kind, object_id)


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
