"""Retention (issue 22 §3): what the policy no longer keeps goes, in bounded batches; nothing open or running does."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import QuerySet
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from receipts.models import (
    AppendOnlyError,
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
)
from receipts.org import audit
from receipts.retention import pruner as retention
from receipts.tasks import prune_lock_key, prune_retention

pytestmark = pytest.mark.django_db
NOW = timezone.now()
_ids = itertools.count(1)


def a_run(*, ended_days_ago: float | None, status: str = Run.Status.COMPLETE, handoffs: int = 1, parts: int = 3):
    """A run (ended that many days ago, or not ended) with handoffs, receipts, history, a report and its audit."""
    n = next(_ids)
    finished = NOW - timedelta(days=ended_days_ago) if ended_days_ago is not None else None
    run = Run.objects.create(
        operation_id=f"op-{n}", thread_id=f"th-{n}", status=status, finished_at=finished, created_at=finished or NOW
    )
    for h in range(handoffs):
        handoff = Handoff.objects.create(handoff_id=f"h-{n}-{h}", run=run, verdict="HEALTHY", created_at=run.created_at)
        for p in range(parts):
            Receipt.objects.create(handoff=handoff, part="created", attempt=str(p), payload={"n": p})
        VerdictChange.objects.create(handoff=handoff, verdict="HEALTHY", cause="created")
    MiddlewareReport.objects.create(run=run, agent="triage", kind="tool_error", attempt="1")
    audit.log(actor=None, action="run.stop", object_type="run", object_id=run.operation_id, outcome="done", run=run)
    return run


def backdate(entry: AuditEntry, *, days: int) -> None:
    # Test setup only: an entry written that long ago (the append-only queryset refuses update()).
    QuerySet.update(AuditEntry.objects.filter(pk=entry.pk), at=NOW - timedelta(days=days))


def policy(**days) -> RetentionPolicy:
    defaults = {"receipts_days": 30, "reports_days": 30, "deliveries_days": 30, "runs_days": 60}
    defaults |= {"audit_days": 400, "audit_minimum_days": 365}
    return RetentionPolicy(pk=1, **(defaults | days))


def prune(**days) -> retention.LastRun:
    return retention.prune(now=NOW, policy=policy(**days), pause=0)


# --- what goes and what stays ----------------------------------------------------------------------


def test_it_prunes_an_old_ended_run_with_everything_about_it():
    old = a_run(ended_days_ago=90)
    Decision.objects.create(run=old, handoff=old.handoffs.get(), resume_token_id="t-1", kind="approve")
    TaskDelivery.objects.create(run=old, task="start")
    OutboxIntent.objects.create(kind="start", object_id=old.pk, run=old, key="k-1", applied_at=NOW)
    last = prune()
    assert not Run.objects.filter(pk=old.pk).exists()
    assert Handoff.objects.count() == Receipt.objects.count() == VerdictChange.objects.count() == 0
    assert Decision.objects.count() == TaskDelivery.objects.count() == OutboxIntent.objects.count() == 0
    assert last.removed["runs"] == 1 and last.removed["receipts"] == 3 and last.removed["decisions"] == 1


def test_it_never_prunes_a_run_that_has_not_ended():
    running = a_run(ended_days_ago=None, status=Run.Status.RUNNING)
    Run.objects.filter(pk=running.pk).update(updated_at=NOW - timedelta(days=400), created_at=NOW - timedelta(days=400))
    parked = a_run(ended_days_ago=None, status=Run.Status.PARKED)
    Run.objects.filter(pk=parked.pk).update(updated_at=NOW - timedelta(days=400))
    prune()
    assert Run.objects.filter(pk__in=[running.pk, parked.pk]).count() == 2
    assert Receipt.objects.count() == 6 and MiddlewareReport.objects.count() == 2


def test_it_never_prunes_an_open_wait_nor_its_run():
    run = a_run(ended_days_ago=90)
    run.handoffs.update(wait_open=True, wait_owner="ops-lead")
    prune()
    assert Run.objects.filter(pk=run.pk).exists() and Receipt.objects.count() == 3


def test_it_keeps_a_run_whose_promised_work_no_worker_applied():
    run = a_run(ended_days_ago=90)
    OutboxIntent.objects.create(kind="reverify", object_id=run.pk, run=run, key="k-2")
    prune()
    assert Run.objects.filter(pk=run.pk).exists()


def test_receipts_and_history_go_before_the_run_they_belong_to():
    run = a_run(ended_days_ago=45)
    recent = a_run(ended_days_ago=5)
    last = prune()
    assert Handoff.objects.filter(run=run).exists() and Run.objects.filter(pk=run.pk).exists()
    assert not Receipt.objects.filter(handoff__run=run).exists()
    assert not VerdictChange.objects.filter(handoff__run=run).exists()
    assert not MiddlewareReport.objects.filter(run=run).exists()
    assert Receipt.objects.filter(handoff__run=recent).count() == 3
    assert last.removed["receipts"] == 3 and last.removed["verdict_changes"] == 1 and last.removed["runs"] == 0


def test_reports_follow_their_own_days():
    run = a_run(ended_days_ago=45)
    prune(reports_days=50)
    assert MiddlewareReport.objects.filter(run=run).exists() and not Receipt.objects.filter(handoff__run=run).exists()


def test_sent_deliveries_go_and_queued_ones_stay():
    old = NOW - timedelta(days=40)
    sent = Delivery.objects.create(event="wait.opened", key="d-1", payload={}, status="sent", created_at=old)
    queued = Delivery.objects.create(event="wait.opened", key="d-2", payload={}, status="queued", created_at=old)
    fresh = Delivery.objects.create(event="wait.opened", key="d-3", payload={}, status="failed")
    last = prune()
    assert set(Delivery.objects.values_list("pk", flat=True)) == {queued.pk, fresh.pk}
    assert last.removed["deliveries"] == 1 and sent.pk not in Delivery.objects.values_list("pk", flat=True)


# --- the audit log ------------------------------------------------------------------------------------


def test_an_audit_entry_outlives_its_pruned_run_keeping_its_ids():
    run = a_run(ended_days_ago=90)
    entry = AuditEntry.objects.get(run=run)
    last = prune()
    entry.refresh_from_db()
    assert entry.run_id is None and entry.handoff_id is None and entry.object_id == run.operation_id
    assert last.removed["audit_entries_detached"] == 1


def test_audit_entries_go_after_their_days_and_never_before_the_minimum():
    ancient = audit.log(actor=None, action="run.stop", object_type="run", object_id="op-x", outcome="done")
    middling = audit.log(actor=None, action="run.stop", object_type="run", object_id="op-y", outcome="done")
    backdate(ancient, days=500)
    backdate(middling, days=200)
    # audit_days below the minimum (a policy the admin would refuse) still keeps the minimum.
    prune(audit_days=100, audit_minimum_days=365)
    kept = set(AuditEntry.objects.exclude(action=retention.PRUNED).values_list("object_id", flat=True))
    assert kept == {"op-y"}


def test_an_audit_entry_a_kept_task_delivery_names_stays():
    entry = audit.log(actor=None, action="run.start", object_type="run", object_id="op-z", outcome="done")
    backdate(entry, days=500)
    running = a_run(ended_days_ago=None, status=Run.Status.RUNNING)
    TaskDelivery.objects.create(run=running, task="start", promised_by=entry)
    prune()
    assert AuditEntry.objects.filter(pk=entry.pk).exists()


def test_each_run_is_recorded_in_the_audit_log_with_counts_and_no_content():
    a_run(ended_days_ago=90, handoffs=2)
    prune()
    entry = AuditEntry.objects.get(action=retention.PRUNED)
    assert entry.actor_name == "system" and entry.outcome == "done"
    assert entry.detail["removed"]["handoffs"] == 2 and entry.detail["removed"]["receipts"] == 6
    assert set(entry.detail) <= {"removed", "seconds", "partitions_dropped", "error"}
    assert '"n"' not in repr(entry.detail) and "op-" not in repr(entry.detail) + entry.reason


# --- bounded batches ----------------------------------------------------------------------------------


def test_each_statement_removes_at_most_a_batch_of_rows():
    a_run(ended_days_ago=45, handoffs=1, parts=7)
    with CaptureQueriesContext(connection) as queries:
        last = retention.prune(now=NOW, policy=policy(), batch_rows=3, pause=0)
    deletes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith('DELETE FROM "receipts_receipt"')]
    assert last.removed["receipts"] == 7
    assert len(deletes) == 3  # 3 + 3 + 1


def test_a_batch_rechecks_the_run_in_its_own_statement():
    a_run(ended_days_ago=45, handoffs=1, parts=2)
    with CaptureQueriesContext(connection) as queries:
        prune()
    delete = next(q["sql"] for q in queries.captured_queries if q["sql"].startswith('DELETE FROM "receipts_receipt"'))
    assert '."status" IN' in delete and '."wait_open"' in delete and '."finished_at" <' in delete


# --- the one way append-only rows go ---------------------------------------------------------------


def test_receipts_still_cannot_be_deleted_outside_retention():
    run = a_run(ended_days_ago=90)
    with pytest.raises(AppendOnlyError):
        Receipt.objects.all().delete()
    with pytest.raises(AppendOnlyError):
        Receipt.objects.all().prune()
    with pytest.raises(AppendOnlyError):
        AuditEntry.objects.filter(run=run).detach(run=None)
    with retention.pruning(), pytest.raises(AppendOnlyError):
        AuditEntry.objects.filter(run=run).detach(reason="rewritten")
    assert Receipt.objects.count() == 3


def test_receipts_carry_their_handoffs_month_however_they_are_inserted():
    run = a_run(ended_days_ago=40, parts=1)
    handoff = run.handoffs.get()
    Receipt.objects.bulk_create([Receipt(handoff=handoff, part="reduced", attempt="1")])
    months = set(Receipt.objects.values_list("handoff_month", flat=True))
    assert months == {handoff.created_at.date().replace(day=1)}


# --- the policy --------------------------------------------------------------------------------------


def test_the_policy_refuses_audit_days_below_the_minimum_on_that_field():
    with pytest.raises(ValidationError) as refused:
        policy(audit_days=100, audit_minimum_days=365).full_clean()
    assert refused.value.message_dict == {"audit_days": ["At least the minimum of 365 days set below."]}


def test_the_policy_refuses_evidence_kept_longer_than_its_run():
    with pytest.raises(ValidationError) as refused:
        policy(receipts_days=90, runs_days=60).full_clean()
    assert list(refused.value.message_dict) == ["receipts_days"]
    assert "at most the runs' 60 days" in refused.value.message_dict["receipts_days"][0]


def test_the_policy_refuses_zero_days():
    with pytest.raises(ValidationError) as refused:
        policy(deliveries_days=0).full_clean()
    assert refused.value.message_dict == {"deliveries_days": ["Between 1 and 36500 days."]}


def test_the_defaults_are_valid_and_documented():
    defaults = RetentionPolicy.current()
    defaults.full_clean()
    assert (defaults.receipts_days, defaults.runs_days, defaults.audit_minimum_days) == (90, 180, 365)


# --- the beat task ------------------------------------------------------------------------------------


def test_the_beat_task_prunes_once_at_a_time(settings):
    from django.core.cache import cache

    assert settings.CELERY_BEAT_SCHEDULE["prune-retention"]["task"] == "receipts.tasks.prune_retention"
    a_run(ended_days_ago=400)
    cache.add(prune_lock_key(), 1, 60)
    try:
        assert prune_retention() is None and Run.objects.count() == 1
    finally:
        cache.delete(prune_lock_key())
    removed = prune_retention()
    assert removed["runs"] == 1 and Run.objects.count() == 0


def test_the_command_prunes_and_says_what_it_removed():
    from io import StringIO

    from django.core.management import call_command

    a_run(ended_days_ago=400)
    out = StringIO()
    call_command("prune_retention", stdout=out)
    assert "1 runs removed" in out.getvalue() and "3 receipts removed" in out.getvalue()
    assert Run.objects.count() == 0


def test_pruning_rests_between_statements_to_keep_its_duty_cycle(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(retention.time, "sleep", slept.append)
    pruner = retention._Pruner(now=NOW, policy=policy(), batch_rows=10, pause=0.01, duty=0.25, counts=None)
    pruner._rest(0.1)  # a statement that kept the database 0.1 s
    pruner._rest(0.0)
    assert slept == [pytest.approx(0.3), 0.01]
