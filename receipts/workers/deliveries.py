"""Worker deliveries of a run's tasks: which task, which worker, which attempt, and how it ended.

Brokers keep no delivery history, so the worker writes one row when it takes a run's lease to carry out a
task (`begin`) and gives it its outcome when the task returns (`end`). A row without an end was cut short:
its worker died or an error had the task retried, and the next row with the same task id is that task
delivered again. The run's history (receipts.queries.history) shows them; ids, names and codes only.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils import timezone

from receipts.ingest import runs
from receipts.models import OutboxIntent, Run, TaskDelivery


@dataclass(frozen=True)
class Carrier:
    """What a task's request says about its delivery (Celery's `task.request`)."""

    task_id: str = ""
    worker: str = ""
    retries: int = 0


def begin(run: Run, task: str, object_id: int, carrier: Carrier | None) -> TaskDelivery:
    """Record that this worker drives `run` for `task` (an OutboxIntent kind) on `object_id`'s behalf."""
    carrier = carrier or Carrier()
    earlier = TaskDelivery.objects.filter(run=run, task_id=carrier.task_id) if carrier.task_id else None
    seen = list(earlier.values_list("attempt", "redelivered")) if earlier is not None else []
    return TaskDelivery.objects.create(
        run=run,
        task=task,
        task_id=carrier.task_id[:200],
        worker=carrier.worker[:200],
        attempt=len(seen) + 1,
        # A Celery retry counts up `retries`; the broker handing the same message again does not.
        redelivered=len(seen) > carrier.retries,
        promised_by_id=_promiser(task, object_id),
    )


def end(delivery: TaskDelivery, outcome: str) -> None:
    """The task returned `outcome` (a run status, or a verification's pass or fail); open pages are told."""
    run = Run.objects.filter(pk=delivery.run_id).first()
    if run is None:
        return
    TaskDelivery.objects.filter(pk=delivery.pk).update(
        ended_at=timezone.now(), outcome=str(outcome)[:40], verdict=run.latest_verdict
    )
    runs.announce(run)  # the run page's history shows how the delivery ended without waiting for a repair


def _promiser(task: str, object_id: int) -> int | None:
    # An action's intent key names its audit entry: "start:12:audit-34" (receipts.actions.steps.promise).
    keys = OutboxIntent.objects.filter(kind=task, object_id=object_id).order_by("-created_at", "-pk")
    key = keys.values_list("key", flat=True).first() or ""
    _, found, pk = key.rpartition(":audit-")
    return int(pk) if found and pk.isdigit() else None
