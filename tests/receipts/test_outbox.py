"""The outbox: an action taken while the broker is down is kept, answered as queued, and sent once it is back.

The broker is made unreachable for real: this process's Celery app is pointed at a port nobody listens
on (tests.conftest.point_celery_at), so publishing fails the way it does when Redis is down. Sent
messages land in this test run's own queue on the real Redis, where the tests read them.
"""

from __future__ import annotations

import base64
import json
import logging
import uuid
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from receipts import actions
from receipts.models import AuditEntry, Decision, OutboxIntent, Run
from receipts.notify import outbox
from receipts.workers import runtime
from sidewisp.ops.devservices import _free_port
from tests.conftest import point_celery_at

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def wait(scenario_handoff):
    return scenario_handoff("waiting", scenario="waiting_on_approval", owner="ops-lead")


@pytest.fixture
def broker_down():
    with point_celery_at(f"redis://127.0.0.1:{_free_port()}/0"):
        yield


@pytest.fixture
def queue(celery_isolation):
    """The tasks sent to this test run's queue since the test began, as (task name, args)."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(celery_isolation)

    def sent() -> list[tuple[str, list]]:
        messages = [json.loads(raw) for raw in reversed(client.lrange(celery_isolation, 0, -1))]
        return [(m["headers"]["task"], json.loads(base64.b64decode(m["body"]))[0]) for m in messages]

    yield sent
    client.delete(celery_isolation)
    client.close()


def _approve(client, user, wait):
    client.force_login(user)
    data = {"decision": "approve", "token": wait.wait_part["resume_token_id"], "key": uuid.uuid4().hex}
    return client.post(reverse("sidewisp:wait-decide", args=[wait.pk]), data, follow=True)  # to its result page


def _later() -> timezone.datetime:
    return timezone.now() + timedelta(seconds=outbox.CLAIM_SECONDS + outbox.MAX_RETRY_SECONDS)


def test_an_approval_with_the_broker_down_is_taken_and_says_it_is_queued(client, owner, wait, broker_down, queue):
    response = _approve(client, owner, wait)

    decision = Decision.objects.get()
    intent = OutboxIntent.objects.get()
    body = response.content.decode()
    assert response.status_code == 200
    assert "The resume is queued: the run resumes from its checkpoint as soon as a worker is reachable." in body
    assert decision.applied_at is None
    assert (intent.kind, intent.object_id, intent.sent_at, intent.attempts) == ("resume", decision.pk, None, 1)
    assert intent.last_error.startswith("OperationalError")
    assert AuditEntry.objects.get(action="wait.approve").outcome == "done"
    assert queue() == []


def test_the_sweep_sends_the_intent_once_the_broker_answers_and_marks_it_sent(client, owner, wait, queue):
    with point_celery_at(f"redis://127.0.0.1:{_free_port()}/0"):
        _approve(client, owner, wait)

    sent = outbox.send_overdue(now=_later())

    decision = Decision.objects.get()
    assert sent == 1
    assert OutboxIntent.objects.get().sent_at is not None
    assert queue() == [("agents.tasks.resume_run", [decision.pk])]


def test_a_second_sweep_sends_nothing(client, owner, wait, queue):
    with point_celery_at(f"redis://127.0.0.1:{_free_port()}/0"):
        _approve(client, owner, wait)
    outbox.send_overdue(now=_later())

    assert outbox.send_overdue(now=_later()) == 0
    assert len(queue()) == 1


def test_with_the_broker_up_the_intent_is_sent_at_once_and_the_message_says_so(client, owner, wait, queue):
    response = _approve(client, owner, wait)

    assert "Wait approved; the run resumes from its checkpoint." in response.content.decode()
    assert OutboxIntent.objects.get().sent_at is not None
    assert queue() == [("agents.tasks.resume_run", [Decision.objects.get().pk])]
    # Within the apply bound the sweep leaves it to the worker (issue 19: after it, unapplied, it is sent again).
    assert outbox.send_overdue(now=timezone.now() + outbox.apply_bound() / 2) == 0


def test_the_sweep_leaves_a_fresh_intent_to_the_on_commit_send(wait, owner, broker_down):
    actions.decide(
        user=owner, handoff_id=wait.pk, kind="approve", token=wait.wait_part["resume_token_id"], key="a" * 32
    )

    # The failed send set its retry a couple of seconds ahead: a sweep right now leaves it alone.
    assert outbox.send_overdue() == 0
    assert OutboxIntent.objects.get().attempts == 1


def test_a_verify_again_with_the_broker_down_is_taken_and_sent_later(client, operator, scenario_handoff, queue):
    task = scenario_handoff("false_complete", scenario="false_complete")
    client.force_login(operator)

    with point_celery_at(f"redis://127.0.0.1:{_free_port()}/0"):
        response = client.post(
            reverse("sidewisp:task-verify", args=[task.pk]), {"key": uuid.uuid4().hex, "reason": "no order"}
        )
    outbox.send_overdue(now=_later())

    assert response.status_code == 200
    assert "The verification is queued" in response.content.decode()
    assert queue() == [("agents.tasks.reverify", [task.run_id])]


def test_a_reopen_with_the_broker_down_is_taken_and_sent_later(client, operator, scenario_handoff, queue):
    task = scenario_handoff("false_complete", scenario="false_complete")
    client.force_login(operator)

    with point_celery_at(f"redis://127.0.0.1:{_free_port()}/0"):
        response = client.post(
            reverse("sidewisp:task-reopen", args=[task.pk]), {"key": uuid.uuid4().hex, "reason": "no order"}
        )
    outbox.send_overdue(now=_later())

    assert response.status_code == 200
    assert "It is queued: a worker gives it back to its agent" in response.content.decode()
    assert queue() == [("agents.tasks.resume_run", [Decision.objects.get(kind="reopen").pk])]


def test_resuming_auto_continue_with_the_broker_down_is_taken_and_sent_later(client, operator, scenario_handoff, queue):
    stale = scenario_handoff("stale_control", scenario="stale_control")
    Run.objects.filter(pk=stale.run_id).update(auto_continue=False, status=Run.Status.PARKED)
    client.force_login(operator)

    with point_celery_at(f"redis://127.0.0.1:{_free_port()}/0"):
        response = client.post(
            reverse("sidewisp:run-resume", args=[stale.run_id]), {"key": uuid.uuid4().hex, "reason": "reconciled"}
        )
    outbox.send_overdue(now=_later())

    assert response.status_code == 200
    assert "The run is queued: it continues from its checkpoint" in response.content.decode()
    assert queue() == [("agents.tasks.start_run", [stale.run_id])]


def test_starting_a_run_with_the_broker_down_is_taken_and_sent_later(client, operator, queue):
    client.force_login(operator)

    with point_celery_at(f"redis://127.0.0.1:{_free_port()}/0"):
        response = client.post(
            reverse("sidewisp:run-create"),
            {"graph": "demo", "graph_input": '{"messages": []}', "key": uuid.uuid4().hex},
            follow=True,
        )
    outbox.send_overdue(now=_later())

    run = Run.objects.get()
    assert response.redirect_chain[0][1] == 302
    assert "as soon as one is reachable" in response.content.decode()
    assert queue() == [("agents.tasks.start_run", [run.pk])]


def test_the_dispatcher_never_raises_and_logs_one_line(wait, owner, broker_down, caplog):
    with caplog.at_level(logging.WARNING, logger="receipts.notify.outbox"):
        actions.decide(
            user=owner, handoff_id=wait.pk, kind="approve", token=wait.wait_part["resume_token_id"], key="b" * 32
        )

    lines = [r.getMessage() for r in caplog.records if r.name == "receipts.notify.outbox"]
    assert len(lines) == 1
    assert "\n" not in lines[0] and "not sent" in lines[0]
    assert outbox.dispatch(OutboxIntent.objects.get().pk) is False  # tried already: the sweep's now
    assert outbox.dispatch(999_999) is False


def test_an_intent_no_runtime_can_send_stays_unsent_without_raising(wait, owner, monkeypatch):
    monkeypatch.setattr(runtime, "_runtime", runtime.NoRuntime())
    run = wait.run

    intent = outbox.promise("start", run.pk, run=run, key="start:no-runtime")

    intent.refresh_from_db()
    assert (intent.sent_at, intent.last_error) == (None, "LookupError: no agent runtime is installed")


def test_a_sweep_stops_at_the_first_broker_failure(scenario_handoff, broker_down):
    runs = [scenario_handoff("false_complete", scenario="false_complete").run for _ in range(3)]
    past = timezone.now() - timedelta(minutes=5)
    for run in runs:
        OutboxIntent.objects.create(kind="reverify", object_id=run.pk, run=run, key=f"k-{run.pk}", due_at=past)

    assert outbox.send_overdue() == 0
    assert list(OutboxIntent.objects.order_by("pk").values_list("attempts", flat=True)) == [1, 0, 0]


def test_the_sweep_is_scheduled_by_beat_every_few_seconds():
    entry = settings.CELERY_BEAT_SCHEDULE["send-outbox-intents"]

    assert entry["task"] == "receipts.tasks.send_outbox_intents"
    assert entry["schedule"] <= 10
