"""The deadline sweep: an overdue wait is escalated to its backup owner once, or decided by the safe default."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings

from agents.host.waits import escalation_for
from agents.limits import DEFAULT_DOCUMENT
from agents.models import LimitsVersion
from receipts import actions, tasks
from receipts.ingest import broadcast
from receipts.models import AuditEntry, Decision


@pytest.fixture
def wait(scenario_handoff):
    return scenario_handoff("waiting", scenario="waiting_on_approval", owner="ops-lead")


@pytest.fixture
def events(monkeypatch):
    published: list[dict] = []
    monkeypatch.setattr(broadcast, "publish", lambda event: published.append(event) or True)
    return published


@pytest.fixture
def enqueued(monkeypatch):
    from agents import tasks as agent_tasks

    ids: list[int] = []
    monkeypatch.setattr(agent_tasks.resume_run, "delay", ids.append)
    return ids


@pytest.fixture
def escalating_limits(db):
    document = copy.deepcopy(DEFAULT_DOCUMENT)
    document["default"]["approval"].update(backup_owner="night-lead", on_expiry="escalate", deadline_minutes=30)
    return LimitsVersion.save_new(document, note="escalate overdue approvals")


def test_an_overdue_wait_without_a_backup_gets_the_safe_default_as_a_system_decision(
    wait, events, enqueued, django_capture_on_commit_callbacks
):
    later = wait.wait_deadline + timedelta(minutes=1)

    with django_capture_on_commit_callbacks(execute=True):
        handled = actions.expire_overdue_waits(now=later)

    decision = Decision.objects.get()
    entry = AuditEntry.objects.get()
    wait.refresh_from_db()
    assert handled == 1
    assert (decision.kind, decision.decided_by, decision.resume_token_id) == (
        "reject",
        None,
        wait.wait_part["resume_token_id"],
    )
    assert (entry.actor_name, entry.action, entry.outcome) == ("system", "wait.expire", "done")
    assert wait.verdict == "UNCERTAIN"
    assert enqueued == [decision.pk]
    assert any(e.get("handoff") == wait.pk and e["verdict"] == "UNCERTAIN" for e in events)


def test_an_overdue_wait_is_escalated_to_the_backup_owner_with_a_new_deadline(
    wait, escalating_limits, events, enqueued, django_capture_on_commit_callbacks
):
    later = wait.wait_deadline + timedelta(minutes=1)

    with django_capture_on_commit_callbacks(execute=True):
        actions.expire_overdue_waits(now=later)

    wait.refresh_from_db()
    entry = AuditEntry.objects.get()
    assert (wait.wait_owner, wait.wait_deadline) == ("night-lead", later + timedelta(minutes=30))
    assert (entry.actor_name, entry.action, entry.detail["to"]) == ("system", "wait.escalate", "night-lead")
    assert not Decision.objects.exists()
    assert enqueued == []
    assert any(e.get("handoff") == wait.pk and e["part"] == "wait" for e in events)


def test_an_escalated_wait_that_expires_again_gets_the_safe_default(
    wait, escalating_limits, enqueued, django_capture_on_commit_callbacks
):
    later = wait.wait_deadline + timedelta(minutes=1)
    with django_capture_on_commit_callbacks(execute=True):
        actions.expire_overdue_waits(now=later)
        actions.expire_overdue_waits(now=later + timedelta(minutes=31))

    assert Decision.objects.get().kind == "reject"
    assert list(AuditEntry.objects.order_by("pk").values_list("action", flat=True)) == [
        "wait.escalate",
        "wait.expire",
    ]


def test_a_wait_before_its_deadline_is_left_alone(wait, enqueued):
    assert actions.expire_overdue_waits(now=wait.wait_deadline - timedelta(seconds=1)) == 0
    assert not Decision.objects.exists()


def test_a_wait_someone_already_decided_is_not_decided_again(person, wait, enqueued):
    owner = person("ops-lead", "approver")
    actions.decide(
        user=owner, handoff_id=wait.pk, kind="approve", token=wait.wait_part["resume_token_id"], key="a" * 32
    )

    actions.expire_overdue_waits(now=wait.wait_deadline + timedelta(minutes=1))

    assert Decision.objects.get().kind == "approve"


def test_the_beat_task_sweeps_real_overdue_waits(scenario_handoff, enqueued, django_capture_on_commit_callbacks):
    overdue = scenario_handoff(
        "waiting", scenario="waiting_on_approval", owner="ops-lead", deadline=datetime.now(UTC) - timedelta(seconds=5)
    )

    with django_capture_on_commit_callbacks(execute=True):
        handled = tasks.expire_overdue_waits()

    assert handled == 1
    assert Decision.objects.get(handoff=overdue).decided_by is None


def test_the_sweep_is_scheduled_by_beat():
    schedule = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}

    assert "receipts.tasks.expire_overdue_waits" in schedule


def test_escalation_reads_the_runs_approval_settings(wait, escalating_limits):
    assert escalation_for(wait) == actions_escalation("night-lead", 30)


def test_without_escalate_on_expiry_there_is_no_backup(wait, db):
    assert escalation_for(wait).backup_owner is None


def actions_escalation(backup: str, minutes: int):
    from receipts.workers.runtime import Escalation

    return Escalation(backup_owner=backup, deadline_minutes=minutes, safe_default="reject")
