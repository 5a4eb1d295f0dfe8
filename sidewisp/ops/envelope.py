"""Every task message names its deployment; a worker runs only its own deployment's messages.

Publishing (`stamp`, on Celery's before_task_publish) adds the header `sidewisp_deployment` with this
database's deployment id (receipts.workers.deployment) to every task message this process sends: operator work,
beat's sweeps, retries. A worker (`DeploymentTask`, every task's base class) checks it before the task
runs. A message of another deployment is rejected *with* requeue, never acked: it goes back to the
queue for its owner's workers, and this worker logs one line naming the task and the foreign id (never
the message's arguments). The worker holds a refused message for a pause first, which doubles with each
foreign message in a row (0.5 s, 1 s, 2 s … up to 8 s) and is back to 0.5 s once one of its own runs: a worker
whose queue holds only another deployment's messages backs off rather than taking and requeueing them twice a
second for ever (issue 29 §7); the owners' workers take them meanwhile. A message without the header (sent
by a version before this check) is dropped with a log line: nobody can say which database its row ids mean,
and what an operator promised is sent again by the outbox sweep, which counts work done only once a worker
applied it. A worker that cannot read its own id yet (the database is not up) leaves the message in the
queue as well.
"""

from __future__ import annotations

import logging
import time

from celery import Task
from celery.exceptions import Reject
from django.db import DatabaseError

HEADER = "sidewisp_deployment"
# A refused message goes straight back to the queue: this pause keeps a worker whose queue holds only
# other deployments' messages from spinning on them. It doubles with each refusal in a row, up to the most.
REFUSAL_PAUSE_SECONDS = 0.5
MOST_REFUSAL_PAUSE_SECONDS = 8.0
# One log line per task and foreign deployment per this many seconds: a shared queue does not flood the log.
LOG_EVERY_SECONDS = 60.0

log = logging.getLogger(__name__)
_logged: dict[tuple[str, str], float] = {}
_refused_in_a_row = 0  # foreign messages this process refused since it last ran one of its own


class ForeignMessage(Reject):
    """A message this worker leaves to another deployment (requeued) or to nobody (unnamed: dropped)."""


def stamp(sender: str | None = None, headers: dict | None = None, **kwargs) -> None:
    """before_task_publish: name this deployment in the message (kept when the sender named one)."""
    if headers is not None:
        headers.setdefault(HEADER, _deployment().current_id())


class DeploymentTask(Task):
    """The base of every Sidewisp task: refuse a message that is not this deployment's before running it."""

    def __call__(self, *args, **kwargs):
        if not self.request.called_directly and not self.request.is_eager:
            check(self.name, getattr(self.request, HEADER, None))
        return super().__call__(*args, **kwargs)


def check(task: str, named: object) -> None:
    """Raise ForeignMessage unless `named` is this deployment's id."""
    deployment = _deployment()
    try:
        own = deployment.current_id()
    except DatabaseError as exc:
        # Read once per process: only a worker's first task can meet this (the database is not up yet).
        why = type(exc).__name__
        _log_once(task, "?", "task %s left in the queue: this deployment's id is unreadable (%s)", task, why)
        time.sleep(REFUSAL_PAUSE_SECONDS)
        raise ForeignMessage("deployment id unreadable", requeue=True) from exc
    if named == own:
        _backed_off(reset=True)
        return
    if not isinstance(named, str) or not named:
        _log_once(task, "", "task %s names no deployment (sent before deployments were named): dropped", task)
        raise ForeignMessage("names no deployment", requeue=False)
    _log_once(
        task,
        named,
        "task %s belongs to deployment %s, not this one (%s): left in the queue for its workers",
        task,
        deployment.short(named),
        deployment.short(own),
    )
    time.sleep(_backed_off())
    raise ForeignMessage(f"deployment {deployment.short(named)}", requeue=True)


def _backed_off(*, reset: bool = False) -> float:
    """The pause before this refusal (0.5 s doubling per refusal in a row, at most 8 s); `reset`: one of ours ran."""
    global _refused_in_a_row  # per worker process, like the log's memory
    if reset:
        _refused_in_a_row = 0
        return 0.0
    _refused_in_a_row += 1
    return min(REFUSAL_PAUSE_SECONDS * 2 ** min(_refused_in_a_row - 1, 16), MOST_REFUSAL_PAUSE_SECONDS)


def _log_once(task: str, named: str, message: str, *args: object) -> None:
    now = time.monotonic()
    if now - _logged.get((task, named), -LOG_EVERY_SECONDS) >= LOG_EVERY_SECONDS:
        _logged[(task, named)] = now
        log.warning(message, *args)


def _deployment():
    # Imported when first used: this module is imported with the Celery app, before Django's apps are ready.
    from receipts.workers import deployment

    return deployment


class QuietRefusals(logging.Filter):
    """Celery logs a rejected task with its traceback; a refusal is already said in one line (check)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], ForeignMessage))
