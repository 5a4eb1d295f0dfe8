"""Pruning what the retention policy no longer keeps: in bounded batches, children before parents, audited.

The one deliberate path that removes append-only rows (`pruning()` opens it; `AppendOnlyQuerySet.prune`
refuses outside it). Every statement removes at most `batch_rows` rows of one table, chosen by a range of
primary keys, in its own short transaction; each statement re-checks the condition (a run reopened meanwhile
stops losing rows at the next statement). Open waits, runs that have not ended and runs with promised work no
worker applied are never pruned, nor anything they reference.

What goes, per kind (days from RetentionPolicy):

- receipts and verdict history of runs that ended more than `receipts_days` ago (on PostgreSQL a month's
  partition is dropped whole when every handoff of that month qualifies);
- middleware reports of runs that ended more than `reports_days` ago;
- deliveries: notification deliveries sent or given up more than `deliveries_days` ago, and the worker task
  deliveries and applied outbox intents of runs that ended that long ago;
- runs that ended more than `runs_days` ago, with their handoffs and everything recorded about them. Their
  audit entries stay (ids and text kept) and lose only the link: the foreign key is cleared by an UPDATE, which
  keeps the run's graph and source name on the entry (what decides its team: issue 29 §1);
- audit entries older than `audit_days` (never fewer than `audit_minimum_days`), except those a kept task
  delivery still names.

Each run writes one audit entry (`retention.pruned`): counts per kind, the seconds it took, and an error class
when it stopped early. Its newest entry is the "last run" /metrics and the System page show.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, IntegrityError
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from receipts.ingest.runs import ENDED
from receipts.models import (
    AppendOnlyQuerySet,
    AuditEntry,
    Decision,
    Delivery,
    Handoff,
    MiddlewareReport,
    OutboxIntent,
    Receipt,
    RetentionPolicy,
    Run,
    TaskDelivery,
    VerdictChange,
    _pruning,
)
from receipts.org import audit
from receipts.retention import partitions

PRUNED = "retention.pruned"
# The kinds a run reports, in the order they are pruned (children before parents).
KIND_LABELS = {
    "receipts": "receipts removed",
    "verdict_changes": "verdict history entries removed",
    "reports": "middleware reports removed",
    "deliveries": "notification deliveries removed",
    "task_deliveries": "task deliveries removed",
    "intents": "outbox intents removed",
    "decisions": "decisions removed",
    "handoffs": "handoffs removed",
    "runs": "runs removed",
    "audit_entries": "audit entries removed",
    "audit_entries_detached": "audit entries kept without their pruned run",
}
KINDS = tuple(KIND_LABELS)

logger = logging.getLogger("receipts.retention")  # the name its log lines had before the package split


@contextlib.contextmanager
def pruning() -> Iterator[None]:
    """Let this block remove append-only rows (receipts, verdict history, reports, audit entries)."""
    token = _pruning.set(True)
    try:
        yield
    finally:
        _pruning.reset(token)


@dataclass(frozen=True)
class LastRun:
    at: datetime
    seconds: float
    removed: dict[str, int]
    partitions_dropped: int
    error: str

    def lines(self) -> list[tuple[int, str]]:
        """(count, what) for each kind the run touched, in pruning order."""
        return [(count, KIND_LABELS[kind]) for kind, count in self.removed.items() if count]


def last_run() -> LastRun | None:
    """The newest pruning run, read from its audit entry."""
    entry = AuditEntry.objects.filter(action=PRUNED).order_by("-at", "-pk").first()
    if entry is None:
        return None
    detail = entry.detail
    return LastRun(
        at=entry.at,
        seconds=float(detail.get("seconds", 0.0)),
        removed={kind: int(detail.get("removed", {}).get(kind, 0)) for kind in KINDS},
        partitions_dropped=int(detail.get("partitions_dropped", 0)),
        error=str(detail.get("error", "")),
    )


def ended_before(cutoff: datetime) -> QuerySet[Run]:
    """Runs that ended before `cutoff` with no open wait and no promised work a worker has not applied."""
    ended = Q(finished_at__lt=cutoff) | Q(finished_at__isnull=True, updated_at__lt=cutoff)
    open_wait = Handoff.objects.filter(run=OuterRef("pk"), wait_open=True)
    unapplied = OutboxIntent.objects.filter(run=OuterRef("pk"), applied_at__isnull=True)
    return Run.objects.filter(ended, status__in=ENDED).filter(~Exists(open_wait), ~Exists(unapplied))


@dataclass
class _Pruner:
    now: datetime
    policy: RetentionPolicy
    batch_rows: int
    pause: float
    duty: float
    counts: Counter
    partitions_dropped: int = 0

    def cutoff(self, days: int) -> datetime:
        return self.now - timedelta(days=days)

    def remove(self, kind: str, rows: QuerySet) -> None:
        self.counts[kind] += self._in_batches(rows, _delete)

    def _in_batches(self, rows: QuerySet, act: Callable[[QuerySet], int]) -> int:
        """Apply `act` to `rows` `batch_rows` at a time, lowest primary keys first; returns the rows touched."""
        total, low = 0, None
        while True:
            started = time.monotonic()
            window = rows if low is None else rows.filter(pk__gt=low)
            pks = list(window.order_by("pk").values_list("pk", flat=True)[: self.batch_rows])
            if not pks:
                return total
            low = pks[-1]
            total += act(window.filter(pk__lte=low))
            self._rest(time.monotonic() - started)

    def _rest(self, busy: float) -> None:
        """Leave the database to the pages: at least `pause`, and long enough to keep to the duty cycle."""
        wait = max(self.pause, busy * (1 - self.duty) / self.duty)
        if wait:
            time.sleep(wait)

    def receipts(self) -> None:
        cutoff = self.cutoff(self.policy.receipts_days)
        if partitions.enabled():
            self._drop_months(cutoff)
        ended = ended_before(cutoff)
        self.remove("receipts", Receipt.objects.filter(handoff__run__in=ended))
        self.remove("verdict_changes", VerdictChange.objects.filter(handoff__run__in=ended))

    def _drop_months(self, cutoff: datetime) -> None:
        """Drop each month's partition whose handoffs all belong to runs pruned at `cutoff`."""
        ended = ended_before(cutoff)
        for month in partitions.months():
            start, end = _utc(month), _utc(partitions.following(month))
            if end > cutoff:
                break
            kept = Handoff.objects.filter(created_at__gte=start, created_at__lt=end).exclude(run__in=ended)
            if kept.exists():
                continue
            dropped = partitions.drop(month)
            if dropped is not None:
                self.counts["receipts"] += dropped
                self.partitions_dropped += 1

    def reports(self) -> None:
        ended = ended_before(self.cutoff(self.policy.reports_days))
        self.remove("reports", MiddlewareReport.objects.filter(run__in=ended))

    def deliveries(self) -> None:
        cutoff = self.cutoff(self.policy.deliveries_days)
        done = (Delivery.Status.SENT, Delivery.Status.FAILED)
        self.remove("deliveries", Delivery.objects.filter(status__in=done, created_at__lt=cutoff))
        ended = ended_before(cutoff)
        self.remove("task_deliveries", TaskDelivery.objects.filter(run__in=ended))
        applied = OutboxIntent.objects.filter(applied_at__isnull=False, created_at__lt=cutoff)
        self.remove("intents", applied.filter(Q(run__isnull=True) | Q(run__in=ended)))

    def runs(self) -> None:
        ended = ended_before(self.cutoff(self.policy.runs_days))
        low = 0
        while chunk := list(ended.filter(pk__gt=low).order_by("pk").values_list("pk", flat=True)[: self.batch_rows]):
            low = chunk[-1]
            self._remove_runs(ended.filter(pk__in=chunk))

    def _remove_runs(self, doomed: QuerySet[Run]) -> None:
        self.remove("receipts", Receipt.objects.filter(handoff__run__in=doomed))
        self.remove("verdict_changes", VerdictChange.objects.filter(handoff__run__in=doomed))
        self.remove("decisions", Decision.objects.filter(run__in=doomed))
        self.remove("reports", MiddlewareReport.objects.filter(run__in=doomed))
        self.remove("task_deliveries", TaskDelivery.objects.filter(run__in=doomed))
        self.remove("intents", OutboxIntent.objects.filter(run__in=doomed))
        for related in _cascading_from_runs():
            self._in_batches(related._base_manager.filter(run__in=doomed), _delete)
        named = AuditEntry.objects.filter(Q(run__in=doomed) | Q(handoff__run__in=doomed))
        self.counts["audit_entries_detached"] += self._in_batches(named, _detach)
        self.remove("handoffs", Handoff.objects.filter(run__in=doomed))
        try:
            self.remove("runs", doomed)
        except IntegrityError:
            # Something new names one of these runs (recorded after its children went): kept until next time.
            logger.warning("retention: a run gained records while it was pruned; it is kept for the next run")

    def audit(self) -> None:
        days = max(self.policy.audit_days, self.policy.audit_minimum_days)
        named_by_delivery = TaskDelivery.objects.filter(promised_by=OuterRef("pk"))
        old = AuditEntry.objects.filter(at__lt=self.cutoff(days)).filter(~Exists(named_by_delivery))
        self.remove("audit_entries", old)


def prune(
    *,
    now: datetime | None = None,
    policy: RetentionPolicy | None = None,
    batch_rows: int | None = None,
    pause: float | None = None,
) -> LastRun:
    """Prune every kind once, record the counts in the audit log, and return them."""
    started = time.monotonic()
    pruner = _Pruner(
        now=now or timezone.now(),
        policy=policy or RetentionPolicy.current(),
        batch_rows=batch_rows or settings.SIDEWISP_RETENTION_BATCH_ROWS,
        pause=settings.SIDEWISP_RETENTION_PAUSE_SECONDS if pause is None else pause,
        duty=1.0 if pause == 0 else settings.SIDEWISP_RETENTION_DUTY_CYCLE,
        counts=Counter(),
    )
    error = ""
    with pruning():
        try:
            if partitions.enabled():
                partitions.ensure(pruner.now)
            for step in (pruner.receipts, pruner.reports, pruner.deliveries, pruner.runs, pruner.audit):
                step()
        except DatabaseError as exc:
            error = type(exc).__name__
            logger.warning("retention: pruning stopped early (%s); the next run continues", error)
    return _record(pruner, round(time.monotonic() - started, 3), error)


def _record(pruner: _Pruner, seconds: float, error: str) -> LastRun:
    removed = {kind: pruner.counts[kind] for kind in KINDS}
    entry = audit.log(
        actor=None,
        action=PRUNED,
        object_type="retention",
        object_id="",
        outcome=AuditEntry.Outcome.REFUSED if error else AuditEntry.Outcome.DONE,
        reason=f"removed {sum(removed.values()) - removed['audit_entries_detached']} rows"
        + (f"; stopped early ({error})" if error else ""),
        detail={"removed": removed, "seconds": seconds, "partitions_dropped": pruner.partitions_dropped}
        | ({"error": error} if error else {}),
    )
    return LastRun(entry.at, seconds, removed, pruner.partitions_dropped, error)


def _delete(rows: QuerySet) -> int:
    if isinstance(rows, AppendOnlyQuerySet):
        return rows.prune()
    # One plain DELETE: the batches already removed every child, and no signal listens for these models.
    return rows._raw_delete(rows.db)


def _detach(rows: QuerySet) -> int:
    # The run the entry names, or its handoff's run: its owner stays on the entry (the team scope reads it).
    def owner(field: str):
        by_run = Run.objects.filter(pk=OuterRef("run_id")).values(field)[:1]
        by_handoff = Handoff.objects.filter(pk=OuterRef("handoff_id")).values(f"run__{field}")[:1]
        return Coalesce(Subquery(by_run), Subquery(by_handoff), Value(""))

    kept = {"run_pruned": True, "pruned_run_graph": owner("graph"), "pruned_run_source_name": owner("source_name")}
    return rows.detach(run=None, handoff=None, kept=kept)


def _cascading_from_runs() -> list[type]:
    """Models of other apps that belong to a run and go with it (the agents app's limits pin)."""
    return [
        rel.related_model
        for rel in Run._meta.related_objects
        if rel.related_model._meta.app_label != "receipts" and getattr(rel.on_delete, "__name__", "") == "CASCADE"
    ]


def _utc(month: date) -> datetime:
    return datetime(month.year, month.month, 1, tzinfo=UTC)
