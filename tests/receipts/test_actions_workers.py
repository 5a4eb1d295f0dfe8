"""Operator actions end to end: real graphs, the real database, a real Celery worker process.

Twenty concurrent approvals resume the graph once; a task is verified again by a
worker ("verify again"; reopen is tests/agents/test_reopen.py); a stopped run parks
before its next step and continues from its checkpoint when auto-continue is resumed.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connections
from django.test import Client
from django.urls import reverse

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import create_run
from agents.host import execution, runner
from agents.models import Order
from receipts import actions
from receipts.ingest.signals import handoff_changed
from receipts.models import AuditEntry, Decision, Run
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def contracts(transactional_db):
    install_team_contracts()


def _status(run: Run) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run.pk)


def _verdict(run: Run) -> str:
    return run.handoffs.get().verdict


def test_twenty_concurrent_approvals_resume_the_graph_exactly_once(owner, worker_process):
    run = create_run("waiting_on_approval")
    runner.start_run(run)
    wait = run.handoffs.get()
    token = wait.wait_part["resume_token_id"]
    barrier = threading.Barrier(20)
    codes: list[int] = []

    def approve() -> None:
        try:
            client = Client()
            client.force_login(owner)
            barrier.wait()
            data = {"decision": "approve", "token": token, "key": uuid.uuid4().hex}
            codes.append(client.post(reverse("sidewisp:wait-decide", args=[wait.pk]), data).status_code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=approve) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    wait_until(lambda: _status(run) == "complete", what="the approved run to complete")
    decision = Decision.objects.get()
    decision.refresh_from_db()
    assert codes == [303] * 20  # each to its result page
    assert (decision.applications, Decision.objects.count()) == (1, 1)
    assert Order.objects.filter(operation_id=run.operation_id).count() == 1
    outcomes = list(AuditEntry.objects.filter(action="wait.approve").values_list("outcome", flat=True))
    assert sorted(outcomes) == ["done"] + ["noop"] * 19
    wait_until(lambda: AuditEntry.objects.filter(action="wait.resume").exists(), what="the worker's audit entry")


def test_a_task_verified_again_whose_order_now_exists_turns_healthy(operator, worker_process):
    run = create_run("false_complete")
    runner.start_run(run)
    assert _verdict(run) == "FALSE_COMPLETE"
    Order.objects.create(operation_id=run.operation_id, order_id="o-late", sku="widget", quantity=2, amount=20)

    result = actions.verify_again(user=operator, handoff_id=run.handoffs.get().pk, key=uuid.uuid4().hex, reason="late")

    assert result.outcome == "done"
    wait_until(lambda: _verdict(run) == "HEALTHY", what="the re-verified task to turn healthy")
    # The worker stores the verification before it writes its audit entry: wait for that too.
    wait_until(lambda: AuditEntry.objects.filter(action="task.reverify").exists(), what="the worker's audit entry")
    steps = list(AuditEntry.objects.order_by("pk").values_list("actor_name", "action", "outcome"))
    assert steps == [("oncall", "task.verify", "done"), ("system", "task.reverify", "done")]


def test_a_task_verified_again_still_missing_its_order_stays_false_complete_with_a_newer_check(
    operator, worker_process
):
    run = create_run("false_complete")
    runner.start_run(run)
    handoff = run.handoffs.get()
    checked_before = handoff.verification_part["checked_at"]

    actions.verify_again(user=operator, handoff_id=handoff.pk, key=uuid.uuid4().hex, reason="customer asked")

    wait_until(
        lambda: AuditEntry.objects.filter(action="task.reverify").exists(), what="the worker to verify the task again"
    )
    handoff.refresh_from_db()
    assert handoff.verdict == "FALSE_COMPLETE"
    assert handoff.verification_part["checked_at"] > checked_before
    assert handoff.verification_part["result"] == "fail"


def _stop_after_the_transfer_is_reduced(run: Run, operator) -> None:
    # The operator presses "stop" the moment the stale transfer's `created` receipt lands: the run's
    # checkpoint waits for that receipt (sidewisp_agent.barrier), so the stop is known before the next step.
    def on_receipt(sender, handoff, cause: str, **kwargs) -> None:
        if cause == "created" and handoff.run_id == run.pk:
            Run.objects.filter(pk=run.pk).update(auto_continue=False)

    handoff_changed.connect(on_receipt, weak=False, dispatch_uid=f"stop-{run.pk}")


def test_a_stopped_run_parks_before_its_next_step_and_continues_when_resumed(operator, no_enqueue):
    run = create_run("stale_control")
    _stop_after_the_transfer_is_reduced(run, operator)
    try:
        assert execution.start(run.pk) == "parked"
    finally:
        handoff_changed.disconnect(dispatch_uid=f"stop-{run.pk}")
    assert _verdict(run) == "STALE_CONTROL"
    assert _status(run) == "parked"
    assert not Order.objects.filter(operation_id=run.operation_id).exists()

    result = actions.resume_auto_continue(user=operator, run_id=run.pk, key=uuid.uuid4().hex, reason="reconciled")

    assert result.outcome == "done"
    assert no_enqueue == [("agents.tasks.start_run", run.pk)]
    assert execution.start(run.pk) == "complete"
    assert Order.objects.filter(operation_id=run.operation_id).count() == 1


def test_stopping_a_stale_control_run_turns_auto_continue_off_and_is_audited(operator, no_enqueue):
    run = create_run("stale_control")
    runner.start_run(run)  # runs to the end: the verdict shows afterwards
    Run.objects.filter(pk=run.pk).update(status=Run.Status.QUEUED)  # as if re-delivered

    actions.stop_auto_continue(user=operator, run_id=run.pk, key=uuid.uuid4().hex, reason="stale control")

    run.refresh_from_db()
    assert run.auto_continue is False
    assert AuditEntry.objects.get().action == "run.stop"


def test_a_decision_made_while_the_run_is_stopped_is_held_until_auto_continue_resumes(owner, operator, no_enqueue):
    run = create_run("waiting_on_approval")
    runner.start_run(run)
    wait = run.handoffs.get()
    Run.objects.filter(pk=run.pk).update(auto_continue=False)
    actions.decide(
        user=owner, handoff_id=wait.pk, kind="approve", token=wait.wait_part["resume_token_id"], key="b" * 32
    )
    decision = Decision.objects.get()

    assert execution.resume(decision.pk) == "held"
    assert not Order.objects.filter(operation_id=run.operation_id).exists()

    actions.resume_auto_continue(user=operator, run_id=run.pk, key=uuid.uuid4().hex, reason="reconciled")

    assert ("agents.tasks.resume_run", decision.pk) in no_enqueue
    assert execution.resume(decision.pk) == "complete"
    assert Order.objects.filter(operation_id=run.operation_id).count() == 1


def test_an_edit_runs_the_tool_with_the_new_value_which_no_audit_entry_shows(client, owner, no_enqueue):
    run = create_run("waiting_on_approval")
    runner.start_run(run)
    wait = run.handoffs.get()
    client.force_login(owner)
    confirm = client.get(reverse("sidewisp:confirm", args=["edit", wait.pk])).content.decode()
    data = {"decision": "edit", "token": wait.wait_part["resume_token_id"], "key": uuid.uuid4().hex}

    client.post(reverse("sidewisp:wait-decide", args=[wait.pk]), {**data, "arg_sku": "widget"})
    execution.resume(Decision.objects.get().pk)

    # The owner sees the call's current values (read from the checkpoint); the edited value is never audited.
    assert 'name="arg_sku"' in confirm and "<code>server</code>" in confirm
    assert Order.objects.get(operation_id=run.operation_id).sku == "widget"
    assert "widget" not in str(list(AuditEntry.objects.values_list("detail", "reason")))


def test_an_edit_naming_an_argument_the_tool_does_not_take_is_refused(owner, no_enqueue):
    run = create_run("waiting_on_approval")
    runner.start_run(run)
    wait = run.handoffs.get()

    result = actions.decide(
        user=owner,
        handoff_id=wait.pk,
        kind="edit",
        token=wait.wait_part["resume_token_id"],
        key="c" * 32,
        edited_args={"price": 1},
    )

    assert result.outcome == "refused"
    assert not Decision.objects.exists()
