"""A decision is done when its run has it (issue 19 §1).

An outbox intent counts as applied only once the worker that carried it out has said so; until then the
sweep sends it again, the pages show the wait as decided and waiting for a worker, and nothing offers to
decide, reassign or cancel it again. Approve and reassign at the same instant never both succeed.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import uuid
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import create_run
from agents.host import execution, runner
from agents.limits import DEFAULT_DOCUMENT
from agents.models import LimitsVersion
from receipts import actions
from receipts.models import AlertRule, AuditEntry, Decision, Delivery, NotificationChannel, OutboxIntent, Run
from receipts.notify import alerts, outbox
from sidewisp.ops.metrics import SidewispCollector
from tests.conftest import record_wait_for, start_worker_process, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

WAITING_FOR_A_WORKER = "Decided by ops-lead, waiting for a worker"


@pytest.fixture
def contracts(transactional_db):
    install_team_contracts()


@pytest.fixture
def graph_wait(contracts):
    """A real run of the demo graph, started in this process up to its approval wait (owner ops-lead)."""
    run = create_run("waiting_on_approval")
    runner.start_run(run)
    return run.handoffs.get()


@pytest.fixture
def wait(scenario_handoff):
    return scenario_handoff("waiting", scenario="waiting_on_approval", owner="ops-lead")


@pytest.fixture
def enqueued(monkeypatch):
    from agents import tasks

    ids: list[int] = []
    monkeypatch.setattr(tasks.resume_run, "delay", ids.append)
    return ids


@pytest.fixture
def queue(celery_isolation):
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(celery_isolation)
    yield client
    client.delete(celery_isolation)
    client.close()


def _approve(user, wait, *, key: str | None = None) -> actions.Result:
    token = wait.wait_part["resume_token_id"]
    return actions.decide(user=user, handoff_id=wait.pk, kind="approve", token=token, key=key or uuid.uuid4().hex)


def _page(user, name: str, *args) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(reverse(name, args=args))
    assert response.status_code == 200
    return response.content.decode()


def _status(run_id: int) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run_id)


# --- applied, not sent ----------------------------------------------------------------------------------


def test_a_resume_a_broker_lost_is_sent_again_and_applied_once(graph_wait, owner, celery_isolation, queue):
    assert _approve(owner, graph_wait).outcome == "done"
    # A consumer that takes the message and drops it (a foreign worker of an older version, a lost message).
    _, raw = queue.brpop(celery_isolation, timeout=10)
    assert json.loads(raw)["headers"]["task"] == "agents.tasks.resume_run"
    intent = OutboxIntent.objects.get(kind="resume")
    assert intent.sent_at is not None and intent.applied_at is None

    waits_page = _page(owner, "sidewisp:waits")
    assert WAITING_FOR_A_WORKER in waits_page
    assert 'data-action="approve"' not in waits_page and 'data-action="reassign"' not in waits_page
    assert WAITING_FOR_A_WORKER in _page(owner, "sidewisp:run-detail", graph_wait.run_id)

    # A worker with beat, whose outbox sweep sends what no worker applied within 2 s.
    worker = start_worker_process(
        f"applied{os.getpid()}", celery_isolation, beat=True, extra_env={"SIDEWISP_INTENT_APPLY_SECONDS": "2"}
    )
    try:
        wait_until(lambda: _status(graph_wait.run_id) == "complete", what="the resend to be applied")
    finally:
        worker.stop()

    intent.refresh_from_db()
    assert Decision.objects.get().applications == 1
    assert intent.applied_at is not None and intent.attempts == 2
    assert outbox.send_overdue(now=timezone.now() + timedelta(hours=1)) == 0
    resolved = _page(owner, "sidewisp:waits")
    assert WAITING_FOR_A_WORKER not in resolved and 'data-resolution="approved"' in resolved


def test_the_worker_marks_the_intent_applied_when_it_takes_the_decision(graph_wait, owner, enqueued):
    _approve(owner, graph_wait)
    decision = Decision.objects.get()

    assert execution.resume(decision.pk) == "complete"  # as the worker's task does

    assert OutboxIntent.objects.get(kind="resume").applied_at is not None
    assert outbox.send_overdue(now=timezone.now() + timedelta(hours=1)) == 0


def test_an_intent_sent_but_not_applied_is_due_again_after_the_bound_and_not_before(wait, owner, enqueued):
    _approve(owner, wait)

    assert outbox.send_overdue(now=timezone.now() + outbox.apply_bound() / 2) == 0
    assert outbox.send_overdue(now=timezone.now() + outbox.apply_bound() + timedelta(seconds=1)) == 1
    assert len(enqueued) == 2


# --- a decided wait offers nothing more ------------------------------------------------------------------


def test_a_decided_wait_offers_no_approve_reject_edit_or_reassign_on_any_page(wait, owner, person, enqueued):
    admin = person("boss", "admin")  # may decide any wait and reassign
    _approve(owner, wait)

    for page in (_page(admin, "sidewisp:waits"), _page(admin, "sidewisp:run-detail", wait.run_id)):
        assert WAITING_FOR_A_WORKER in page
        for what in ("approve", "reject", "edit", "reassign", "cancel"):
            assert f'data-action="{what}"' not in page
    for what in ("approve", "reassign", "cancel"):
        confirm = _page(admin, "sidewisp:confirm", what, wait.pk)
        assert "Already decided" in confirm and f"{WAITING_FOR_A_WORKER}." in confirm
        assert 'class="action-form"' not in confirm


def test_reassigning_or_cancelling_a_decided_wait_is_refused_and_audited(wait, owner, person, enqueued):
    admin = person("boss", "admin")
    person("approver-2", "approver")
    _approve(owner, wait)

    moved = actions.reassign(user=admin, handoff_id=wait.pk, owner="approver-2", deadline_minutes=30, key="r" * 32)
    cancelled = actions.cancel(user=admin, handoff_id=wait.pk, key="c" * 32, reason="no longer needed")

    wait.refresh_from_db()
    assert (moved.outcome, cancelled.outcome) == ("refused", "refused")
    assert "already decided (approve) by ops-lead" in moved.message and "cannot be reassigned" in moved.message
    assert "cannot be cancelled" in cancelled.message
    assert (wait.wait_owner, wait.wait_open) == ("ops-lead", True)
    refused = AuditEntry.objects.filter(outcome="refused").values_list("action", flat=True)
    assert sorted(refused) == ["wait.cancel", "wait.reassign"]


def test_approve_and_reassign_at_the_same_instant_never_both_succeed(scenario_handoff, person, enqueued):
    owner = person("ops-lead", "approver")
    operator = person("dispatcher", "operator")
    person("approver-2", "approver")
    for attempt in range(6):
        wait = scenario_handoff("waiting", scenario="waiting_on_approval", owner="ops-lead")
        decided, moved = _at_the_same_instant(
            lambda w=wait: _approve(owner, w),
            lambda w=wait: actions.reassign(
                user=operator, handoff_id=w.pk, owner="approver-2", deadline_minutes=30, key=uuid.uuid4().hex
            ),
        )

        wait.refresh_from_db()
        assert [decided.outcome, moved.outcome].count("done") == 1, (attempt, decided.message, moved.message)
        loser = moved if decided.outcome == "done" else decided
        if decided.outcome == "done":
            assert wait.wait_owner == "ops-lead" and "already decided" in moved.message
        else:
            # Refused under the row lock, or denied before it when the reassignment had committed already.
            assert wait.wait_owner == "approver-2" and not Decision.objects.filter(handoff=wait).exists()
            assert "reassigned to approver-2 meanwhile" in decided.message or decided.outcome == "denied"
        outcomes = AuditEntry.objects.filter(handoff=wait, action__in=("wait.approve", "wait.reassign"))
        assert sorted(outcomes.values_list("outcome", flat=True)) == sorted(["done", loser.outcome])
        assert loser.outcome in ("refused", "denied")


def _at_the_same_instant(*calls):
    """Run `calls` in threads released together (each on its own database connection); their results."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)
    errors: list[BaseException] = []

    def run(index: int, call) -> None:
        try:
            barrier.wait(timeout=10)
            results[index] = call()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    if errors:
        raise errors[0]
    return results


# --- the deadline sweep's own decision ------------------------------------------------------------------


def test_an_expired_wait_shows_expiring_until_a_worker_takes_the_default_then_resolved(graph_wait, owner, enqueued):
    overdue = record_wait_for(graph_wait, deadline_utc=_iso(timezone.now() - timedelta(minutes=1)))
    assert actions.expire_overdue_waits() == 1

    page = _page(owner, "sidewisp:waits")
    assert "Expiring, waiting for a worker" in page and "overdue by" not in page

    decision = Decision.objects.get(decided_by__isnull=True)
    execution.resume(decision.pk)  # a worker takes the safe default

    page = _page(owner, "sidewisp:waits")
    assert "Expiring, waiting for a worker" not in page
    assert f'id="resolved-{overdue.pk}"' in page and 'data-resolution="expired"' in page


@pytest.fixture
def escalating_limits(db):
    document = copy.deepcopy(DEFAULT_DOCUMENT)
    document["default"]["approval"].update(backup_owner="night-lead", on_expiry="escalate", deadline_minutes=30)
    return LimitsVersion.save_new(document, note="escalate overdue approvals")


def test_a_wait_decided_before_its_deadline_is_not_escalated_or_defaulted_after_it(
    wait, owner, escalating_limits, enqueued
):
    _approve(owner, wait)

    assert actions.expire_overdue_waits(now=timezone.now() + timedelta(hours=2)) == 0

    wait.refresh_from_db()
    assert wait.wait_owner == "ops-lead"
    assert Decision.objects.get().decided_by == owner
    assert not AuditEntry.objects.filter(action__in=("wait.escalate", "wait.expire")).exists()


# --- metrics and alerts ---------------------------------------------------------------------------------


def _unapplied_metric(now=None) -> dict[str, float]:
    family = SidewispCollector(now=now)._unapplied_intents()
    assert family.name == "sidewisp_intents_unapplied"
    return {sample.labels["kind"]: sample.value for sample in family.samples}


def test_metrics_count_work_unapplied_past_the_bound(wait, owner, enqueued):
    _approve(owner, wait)
    fresh = _unapplied_metric()
    later = _unapplied_metric(now=timezone.now() + outbox.apply_bound() + timedelta(seconds=1))

    outbox.mark_applied("resume", Decision.objects.get().pk)
    applied = _unapplied_metric(now=timezone.now() + timedelta(hours=1))

    assert (fresh["resume"], later["resume"], applied["resume"]) == (0, 1, 0)
    assert set(later) == {"start", "resume", "reverify"}


def test_an_unapplied_rule_fires_when_work_waits_for_a_worker_and_resolves_once_applied(wait, owner, enqueued):
    channel = NotificationChannel.objects.create(
        name="ops", kind=NotificationChannel.Kind.WEBHOOK, url="http://127.0.0.1:9/hook", secret="s3cret-for-tests"
    )
    rule = AlertRule.objects.create(name="nobody applies", kind=AlertRule.Kind.UNAPPLIED, channel=channel)
    _approve(owner, wait)
    later = timezone.now() + outbox.apply_bound() + timedelta(seconds=1)

    fired = _evaluate(rule, later)
    outbox.mark_applied("resume", Decision.objects.get().pk)
    resolved = _evaluate(rule, later + timedelta(minutes=1))

    assert (fired, resolved) == (alerts.FIRED, alerts.RESOLVED)
    first = Delivery.objects.order_by("pk").first()
    assert first.payload["condition"].startswith("1 promised starts, resumes or re-verifications not applied")
    assert first.payload["link"].endswith(reverse("sidewisp:system"))


def _evaluate(rule: AlertRule, now) -> str | None:
    from django.db import transaction

    with transaction.atomic():
        return alerts.evaluate(rule.pk, now=now)


def _iso(moment) -> str:
    return moment.isoformat().replace("+00:00", "Z")
