"""A run's lifecycle: the one place that changes a run's status and announces it."""

from __future__ import annotations

import uuid
from datetime import datetime
from functools import partial

from django.db import transaction
from django.utils import timezone

from receipts.ingest import batches, broadcast, health
from receipts.ingest.settling import settle_run
from receipts.models import Run
from receipts.verdicts import bundle

# The statuses a run ends in: its handoffs are settled then (spec v1.2), nothing more is due. Queued, running,
# waiting and parked runs go on.
ENDED = (Run.Status.COMPLETE, Run.Status.FAILED)


def set_status(run: Run, status: str, *, error: str = "", now: datetime | None = None) -> Run:
    """Move `run` to `status` (stamping start, end and heartbeat) and publish `run.changed` after commit.

    A status in ENDED settles every handoff of the run (`settling.settle_run`): in-progress verdicts become
    final and are announced. `error` is a class name or a short code, never an exception's text.
    """
    now = now or timezone.now()
    run.status = status
    run.heartbeat_at, run.silent_at = now, None  # a status the app sent: heard from (receipts.ingest.silence)
    run.error = error[:200]
    fields = ["status", "heartbeat_at", "silent_at", "error", "updated_at"]
    if status != Run.Status.QUEUED and run.started_at is None:
        run.started_at = now
        fields.append("started_at")
    if status in ENDED:
        run.finished_at = now
        fields.append("finished_at")
    if status in (*ENDED, Run.Status.WAITING):
        # A hosted run's input (a prompt) is kept only for a graph that has not taken it yet.
        run.input = None
        fields.append("input")
    if batches.changed_run(run, fields):
        # Inside a recording batch the row, the health and the event's sequence number are written at its end
        # (receipts.ingest.runwrites), the event announcing the health judged then.
        run.updated_at = now
        batches.changed_run(run, ["updated_at"])
        if status in ENDED:
            settle_run(run, now)
        batches.refresh_health(run, now)
        announce(run, now=now)
        return run
    with transaction.atomic():
        run.save(update_fields=fields)
        if status in ENDED:
            settle_run(run, now)
        health.refresh(run, now=now, publish=False)  # announce carries it
        announce(run, now=now)
    return run


def announce(run: Run, *, now: datetime | None = None) -> None:
    """Publish the run's current status (after commit) with the run's next sequence number."""
    event: broadcast.RunEvent = {
        "type": "run.changed",
        "run": run.pk,
        "operation_id": run.operation_id,
        "seq": 0,  # set below, or at the end of the current batch (batches.sequenced)
        "status": str(run.status),
        "health": run.health,
        "dry_run": run.dry_run,
        "at": (now or timezone.now()).isoformat(),
    }
    batches.sequenced(run, event)
    transaction.on_commit(partial(broadcast.publish, event))


def create_hosted(
    graph: str, graph_input: dict | None, *, operation_id: str | None = None, scenario: str = "", dry_run: bool = False
) -> Run:
    """A new queued hosted run of the registered `graph` (the caller enqueues its start after commit).

    Fresh unique operation and thread ids unless `operation_id` is given; a
    given one that is not a valid id (`bundle.BundleError`) or exists already raises `ValueError` naming it.
    """
    token = uuid.uuid4().hex[:16]
    operation_id = operation_id or f"op-{token}"
    # The identifier rule (type, length, no control characters, paths or credentials), refused rather than
    # redacted: a person chose this id and can choose another.
    bundle.parse_required_text(operation_id, "operation_id")
    if Run.objects.for_operation(operation_id).exists():  # hosted runs live in the local namespace
        msg = f"a run with operation id {operation_id!r} exists already"
        raise ValueError(msg)
    return Run.objects.create(
        operation_id=operation_id,
        thread_id=f"th-{token}",
        graph=graph,
        scenario=scenario,
        mode=Run.Mode.HOSTED,
        input=graph_input,
        dry_run=dry_run,
    )
