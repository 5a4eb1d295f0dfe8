"""Nothing stuck, nothing lost: operator actions taken while the broker is down are applied once it is back.

A private Redis (tests/faults/conftest.py) is the broker of a real worker process with embedded beat.
Three runs need an operator: one waits on an approval, one completed falsely, one was stopped mid-run.
Redis is killed; the operator approves, reopens and resumes through the web views (each answers success,
saying the work is queued); Redis starts again on the same port. Within 30 s the outbox sweep has sent
every promise and the worker applied each exactly once.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
from django.test import Client
from django.urls import reverse

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import create_run
from agents.host import execution, runner
from agents.models import Order
from receipts.ingest.signals import handoff_changed
from receipts.models import AuditEntry, Decision, OutboxIntent, Run
from tests.conftest import point_celery_at, start_worker_process, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

RECOVERY_SECONDS = 30
# How long Redis stays down at least: long enough for the worker's reconnect back-off to grow past one step.
OUTAGE_SECONDS = 10.0


@pytest.fixture(autouse=True)
def contracts(transactional_db):
    install_team_contracts()


@pytest.fixture
def broker(private_redis, celery_isolation):
    """This process and a worker process (with beat) on the private Redis."""
    with point_celery_at(private_redis.url):
        worker = start_worker_process(f"outbox{os.getpid()}", celery_isolation, redis_url=private_redis.url, beat=True)
        try:
            yield private_redis
        finally:
            worker.stop()


def _waiting_run() -> Run:
    run = create_run("waiting_on_approval")
    runner.start_run(run)  # in this process, up to the approval wait
    return run


def _false_complete_run() -> Run:
    run = create_run("false_complete")
    runner.start_run(run)
    # The order turns up late: re-verifying the task now finds it.
    Order.objects.create(operation_id=run.operation_id, order_id="o-late", sku="widget", quantity=2, amount=20)
    return run


def _stopped_run() -> Run:
    run = create_run("stale_control")

    def stop_after_reduced(sender, handoff, cause: str, **kwargs) -> None:
        if cause == "created" and handoff.run_id == run.pk:
            Run.objects.filter(pk=run.pk).update(auto_continue=False)

    handoff_changed.connect(stop_after_reduced, weak=False, dispatch_uid=f"stop-{run.pk}")
    try:
        assert execution.start(run.pk) == "parked"
    finally:
        handoff_changed.disconnect(dispatch_uid=f"stop-{run.pk}")
    return run


def _post(user, url: str, data: dict) -> str:
    client = Client()
    client.force_login(user)
    response = client.post(url, {**data, "key": uuid.uuid4().hex}, follow=True)  # a decision redirects (303)
    assert response.status_code == 200, response.content[:300]
    return response.content.decode()


def _status(run: Run) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run.pk)


def _verdict(run: Run) -> str:
    return run.handoffs.order_by("pk").last().verdict


def test_actions_taken_while_the_broker_is_down_are_applied_once_it_is_back(broker, owner, operator):
    waiting, false_complete, stopped = _waiting_run(), _false_complete_run(), _stopped_run()
    wait = waiting.handoffs.get()
    assert (_status(waiting), _verdict(false_complete), _status(stopped)) == ("waiting", "FALSE_COMPLETE", "parked")

    broker.kill()
    down = time.monotonic()
    approved = _post(
        owner,
        reverse("sidewisp:wait-decide", args=[wait.pk]),
        {"decision": "approve", "token": wait.wait_part["resume_token_id"]},
    )
    reverified = _post(
        operator, reverse("sidewisp:task-verify", args=[false_complete.handoffs.get().pk]), {"reason": "late order"}
    )
    resumed = _post(operator, reverse("sidewisp:run-resume", args=[stopped.pk]), {"reason": "reconciled"})
    assert "The resume is queued" in approved
    assert "The verification is queued" in reverified
    assert "The run is queued" in resumed
    assert OutboxIntent.objects.filter(sent_at__isnull=True).count() == 3
    time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - down)))  # the outage itself, not a wait for a condition
    assert OutboxIntent.objects.filter(sent_at__isnull=True).count() == 3

    broker.start()
    back = time.monotonic()
    wait_until(
        lambda: (_status(waiting), _verdict(false_complete), _status(stopped)) == ("complete", "HEALTHY", "complete"),
        what="every action taken during the outage to be applied",
        timeout=RECOVERY_SECONDS,
    )
    print(f"\nrecovery after a {OUTAGE_SECONDS:.0f} s Redis outage: {time.monotonic() - back:.1f} s (3 actions)")

    decision = Decision.objects.get()
    done = AuditEntry.objects.filter(outcome="done", actor__isnull=False)
    assert decision.applications == 1
    assert Order.objects.filter(operation_id=waiting.operation_id).count() == 1
    assert Order.objects.filter(operation_id=stopped.operation_id).count() == 1
    assert sorted(done.values_list("action", flat=True)) == ["run.resume", "task.verify", "wait.approve"]
    intents = OutboxIntent.objects.order_by("run_id")
    assert [(i.run_id, i.kind, i.sent_at is not None) for i in intents] == [
        (waiting.pk, "resume", True),
        (false_complete.pk, "reverify", True),
        (stopped.pk, "start", True),
    ]
