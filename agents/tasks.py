"""Thin Celery tasks: re-fetch by id, call one function. Retry policy lives here.

A run's task retries a busy lease (another worker drives the run) and, through
`execution.after_error`, a transient error; any other exception fails the run
with its class name. Backoff doubles from 1 s: up to 10 s for a busy lease, up
to 30 s for a lost connection (a database failover takes seconds).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from celery import Task, shared_task

from agents.host import execution
from receipts.workers.deliveries import Carrier

LEASE_BUSY_RETRIES = 60


@contextlib.contextmanager
def _policy(task: Task, *, run_id: int | None = None, decision_id: int | None = None) -> Iterator[None]:
    retries = task.request.retries
    try:
        yield
    except execution.LeaseBusy as exc:
        raise task.retry(exc=exc, countdown=min(2**retries, 10), max_retries=LEASE_BUSY_RETRIES) from exc
    except Exception as exc:
        if execution.after_error(exc, attempt=retries + 1, run_id=run_id, decision_id=decision_id):
            raise task.retry(exc=exc, countdown=min(2**retries, 30), max_retries=execution.MAX_DELIVERIES) from exc
        raise


def _carrier(task: Task) -> Carrier:
    # issue 21 §1: the delivery the run's history shows (an eager call has no worker name).
    request = task.request
    return Carrier(task_id=request.id or "", worker=request.hostname or "", retries=request.retries or 0)


@shared_task(bind=True)
def start_run(self: Task, run_id: int) -> str:
    with _policy(self, run_id=run_id):
        return execution.start(run_id, _carrier(self))


@shared_task(bind=True)
def resume_run(self: Task, decision_id: int) -> str:
    with _policy(self, decision_id=decision_id):
        return execution.resume(decision_id, _carrier(self))


@shared_task(bind=True)
def reverify(self: Task, run_id: int) -> str:
    with _policy(self, run_id=run_id):
        return execution.reverify(run_id, _carrier(self))


@shared_task
def take_over_stalled_runs() -> int:
    """Beat, every 15 s: re-enqueue runs whose worker vanished (rule in `execution.take_over_stalled`)."""
    return execution.take_over_stalled()
