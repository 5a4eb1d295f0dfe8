"""Runs driven by real Celery worker processes on the real Redis and database.

Workers here are started with a 5 s visibility timeout and a 6 s lease, so a
dead worker's task comes back within seconds (production: 20 s and 30 s).
"""

from __future__ import annotations

import os
import threading

import pytest
from django.db import IntegrityError

from agents import tasks
from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import SCENARIOS, create_run
from agents.models import Order
from receipts.models import Decision, Handoff, Run
from tests.conftest import start_worker_process, wait_until

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

SETTLED = {Run.Status.COMPLETE, Run.Status.FAILED, Run.Status.WAITING, Run.Status.PARKED}


@pytest.fixture(autouse=True)
def contracts(transactional_db):
    install_team_contracts()


def _status(run: Run) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run.pk)


def _verdicts(run: Run) -> tuple[str, ...]:
    return tuple(run.handoffs.order_by("created_at", "pk").values_list("verdict", flat=True))


def _wait_for_approval(run: Run) -> Decision:
    handoff = Handoff.objects.get(run=run, wait_open=True)
    return Decision.objects.create(
        run=run, handoff=handoff, resume_token_id=handoff.wait_part["resume_token_id"], kind=Decision.Kind.APPROVE
    )


def test_every_scenario_reaches_its_expected_verdicts_through_a_real_worker(worker_process):
    runs = {name: create_run(name) for name in SCENARIOS}
    for run in runs.values():
        tasks.start_run.delay(run.pk)
    wait_until(lambda: all(_status(run) in SETTLED for run in runs.values()), what="every scenario to settle")

    reached = {name: _verdicts(run) for name, run in runs.items()}
    assert reached == {name: scenario.expected for name, scenario in SCENARIOS.items()}


def test_a_worker_killed_mid_run_is_redelivered_and_acts_once(celery_isolation):
    run = create_run("slow_supplier_purchase")
    first = start_worker_process(f"first{os.getpid()}", celery_isolation)
    try:
        tasks.start_run.delay(run.pk)
        # The order is placed; the supplier confirmation is still pending.
        wait_until(lambda: Order.objects.filter(operation_id=run.operation_id).exists(), what="the order")
        assert _status(run) == Run.Status.RUNNING
        first.kill()
    finally:
        first.stop()

    second = start_worker_process(f"second{os.getpid()}", celery_isolation)
    try:
        wait_until(lambda: _status(run) == Run.Status.COMPLETE, what="the redelivered run to complete", timeout=90)
    finally:
        second.stop()

    run.refresh_from_db()
    assert Order.objects.filter(operation_id=run.operation_id).count() == 1
    assert run.deliveries == 2
    assert _verdicts(run) == ("HEALTHY",)
    parts = set(Handoff.objects.get(run=run).receipts.values_list("part", flat=True))
    assert parts == {"created", "reduced", "destination", "verification", "final_status"}


def test_an_approval_wait_survives_a_killed_worker_and_resumes_once_elsewhere(celery_isolation):
    run = create_run("waiting_on_approval")
    first = start_worker_process(f"first{os.getpid()}", celery_isolation)
    try:
        tasks.start_run.delay(run.pk)
        wait_until(lambda: _status(run) == Run.Status.WAITING, what="the approval wait")
        first.kill()
    finally:
        first.stop()
    assert _verdicts(run) == ("WAITING_ON_APPROVAL",)
    assert not Order.objects.filter(operation_id=run.operation_id).exists()

    decision = _wait_for_approval(run)
    second = start_worker_process(f"second{os.getpid()}", celery_isolation)
    try:
        tasks.resume_run.delay(decision.pk)
        wait_until(lambda: _status(run) == Run.Status.COMPLETE, what="the resumed run to complete")
    finally:
        second.stop()

    decision.refresh_from_db()
    assert decision.applications == 1
    assert Order.objects.filter(operation_id=run.operation_id).count() == 1
    assert _verdicts(run) == ("HEALTHY",)


def test_concurrent_resumes_of_one_wait_let_exactly_one_proceed(worker_process):
    run = create_run("waiting_on_approval")
    tasks.start_run.delay(run.pk)
    wait_until(lambda: _status(run) == Run.Status.WAITING, what="the approval wait")
    decision = _wait_for_approval(run)

    barrier = threading.Barrier(4)

    def resume():
        barrier.wait()
        tasks.resume_run.delay(decision.pk)

    threads = [threading.Thread(target=resume) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wait_until(lambda: _status(run) == Run.Status.COMPLETE, what="the run to complete")
    wait_until(lambda: not worker_process.busy(), what="every resume task to finish")

    decision.refresh_from_db()
    assert decision.applications == 1
    assert Order.objects.filter(operation_id=run.operation_id).count() == 1


def test_a_second_decision_for_the_same_resume_token_is_refused(worker_process):
    run = create_run("waiting_on_approval")
    tasks.start_run.delay(run.pk)
    wait_until(lambda: _status(run) == Run.Status.WAITING, what="the approval wait")
    _wait_for_approval(run)
    with pytest.raises(IntegrityError):
        _wait_for_approval(run)


def test_demo_traffic_queues_the_catalogue_in_turn_for_a_real_worker(worker_process):
    from agents.demo.scenarios import start_demo_run

    first, second = start_demo_run(), start_demo_run()
    assert first.scenario != second.scenario
    wait_until(lambda: _status(first) in SETTLED and _status(second) in SETTLED, what="both demo runs to settle")
    assert _verdicts(first) == SCENARIOS[first.scenario].expected
