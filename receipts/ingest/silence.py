"""Observed runs that go silent (issue 29 item 5): the app stopped sending receipts, the run still says running.

A hosted run whose worker dies is taken over (`agents.host.execution`); an observed run's process is the
user's, so Sidewisp can only say what it sees. Every batch of entries stamps `Run.heartbeat_at` of the
observed runs it carries (`heard_from`, at most once a second per run); Celery beat marks a running
observed run with nothing for `SIDEWISP_SILENT_AFTER` seconds silent (`mark_silent`: `Run.silent_at`,
announced). Its pages show it "silent since" its last receipt, neither running nor failed, with the safe
next move; /metrics counts it and a "silent" alert rule fires on it. Its next receipt clears the mark
(announced again): it is running as before. `conclude` from the app ends it, like any observed run.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from receipts.ingest import batches
from receipts.ingest.runs import announce
from receipts.models import Run

# A run's heartbeat is written at most this often by its receipts (a batch every few ms must not rewrite it).
STAMP_EVERY = timedelta(seconds=1)
# What the overview counts and the runs filter selects a silent run as: a task status of the pages only (the
# run is still RUNNING in the database, so its app's next receipt or `conclude` needs no status change first).
SILENT = "silent"
NEXT_MOVE = "check the app that drives it (is its process alive?); conclude from the app ends the run"


def bound() -> timedelta:
    return timedelta(seconds=settings.SIDEWISP_SILENT_AFTER)


def silent_condition() -> Q:
    """The runs shown silent now: running observed runs marked silent (`Run.is_silent`, in SQL)."""
    return Q(mode=Run.Mode.OBSERVED, status=Run.Status.RUNNING, silent_at__isnull=False)


def silent_runs() -> QuerySet[Run]:
    return Run.objects.filter(silent_condition())


def heard_from(runs: Iterable[Run], now: datetime | None = None) -> int:
    """The observed `runs` sent entries (call inside their batch's transaction): stamp their heartbeat, and
    wake those marked silent (announced after commit). How many were woken."""
    now = now or timezone.now()
    due = [
        run
        for run in runs
        if run.mode == Run.Mode.OBSERVED
        and (run.silent_at is not None or run.heartbeat_at is None or run.heartbeat_at < now - STAMP_EVERY)
    ]
    if not due:
        return 0
    if batches.current() is None:
        Run.objects.filter(pk__in=[run.pk for run in due]).update(heartbeat_at=now, silent_at=None)
    woken = 0
    for run in due:
        if run.silent_at is not None:
            woken += 1
            run.heartbeat_at, run.silent_at = now, None
            announce(run, now=now)
        run.heartbeat_at, run.silent_at = now, None
        batches.changed_run(run, ["heartbeat_at", "silent_at"])  # in a batch: written with its runs at its end
    return woken


def mark_silent(now: datetime | None = None) -> int:
    """Mark the running observed runs that sent nothing for the bound silent, each announced; how many."""
    now = now or timezone.now()
    cutoff = now - bound()
    quiet = Run.objects.filter(mode=Run.Mode.OBSERVED, status=Run.Status.RUNNING, silent_at__isnull=True).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, created_at__lt=cutoff)
    )
    marked = 0
    for run in quiet.order_by("pk")[:500]:
        with transaction.atomic():
            # Compare-and-set: a receipt that arrived meanwhile (a newer heartbeat) keeps it running.
            same = Run.objects.filter(pk=run.pk, status=Run.Status.RUNNING, silent_at__isnull=True)
            if not same.filter(heartbeat_at=run.heartbeat_at).update(silent_at=now):
                continue
            run.silent_at = now
            announce(run, now=now)
            marked += 1
    return marked
