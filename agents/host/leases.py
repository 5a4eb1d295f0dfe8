"""A per-run lease in the database: one worker drives a run's graph thread at a time.

LangGraph does not enforce one writer per thread (two concurrent resumes fork
the checkpoint chain), and a Redis visibility timeout can hand a slow task to a
second worker while the first still runs it. The lease is a compare-and-set on
the Run row, renewed by a heartbeat while the graph runs, and expires on its own
when its holder dies.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from receipts.models import Run


def acquire(run_id: int, owner: str) -> bool:
    now = timezone.now()
    seconds = settings.SIDEWISP_LEASE_SECONDS
    free = Q(lease_until__isnull=True) | Q(lease_until__lt=now) | Q(lease_owner=owner)
    updated = Run.objects.filter(free, pk=run_id).update(
        lease_owner=owner, lease_until=now + timedelta(seconds=seconds), heartbeat_at=now
    )
    return updated == 1


def release(run_id: int, owner: str) -> None:
    Run.objects.filter(pk=run_id, lease_owner=owner).update(lease_owner="", lease_until=None)


@contextlib.contextmanager
def hold(run_id: int) -> Iterator[bool]:
    """Yield True while this worker holds the run's lease, False if another does."""
    owner = uuid.uuid4().hex
    if not acquire(run_id, owner):
        yield False
        return
    stop = threading.Event()
    renewer = threading.Thread(target=_renew, args=(run_id, owner, stop), daemon=True)
    renewer.start()
    try:
        yield True
    finally:
        stop.set()
        renewer.join()
        release(run_id, owner)


def _renew(run_id: int, owner: str, stop: threading.Event) -> None:
    try:
        while not stop.wait(settings.SIDEWISP_LEASE_SECONDS / 3):
            acquire(run_id, owner)
    finally:
        connection.close()  # this thread's own connection
