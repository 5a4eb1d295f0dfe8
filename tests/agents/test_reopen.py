"""Reopen gives the work back (spec §5 v1.3, issue 30 §3): the destination agent of a false completion works on
the task again from its checkpoint, told which verifier failed, and its outcome is verified again.

The demo's false_complete scenario: sales claims an order it never placed; reopened, it reads the note and
places the order, so the verifier passes the second time. A hosted run goes through a real Celery worker; an
observed run's reopen is handed to the app by await_decision.
"""

from __future__ import annotations

import uuid

import pytest
from django.test import Client
from django.urls import reverse
from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver
from sidewisp_agent import await_decision
from sidewisp_agent.reopening import is_reopen_note

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import SCENARIOS, create_run
from agents.demo.verifiers import verifier
from agents.host import execution, runner
from agents.models import Order
from receipts import actions
from receipts.models import AuditEntry, Decision, Run
from tests.agents.stored import observe
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def contracts(transactional_db):
    install_team_contracts()


def _verdict(run: Run) -> str:
    return run.handoffs.get().verdict


def _false_complete_hosted_run() -> Run:
    run = create_run("false_complete")
    runner.start_run(run)
    assert _verdict(run) == "FALSE_COMPLETE"
    assert not Order.objects.filter(operation_id=run.operation_id).exists()
    return run


def _reopen(user, run: Run, key: str | None = None) -> actions.Result:
    return actions.reopen(user=user, handoff_id=run.handoffs.get().pk, key=key or uuid.uuid4().hex, reason="redo")


def _messages(run: Run) -> list:
    with runner.built(run, None, reading=True) as hosted:
        return list(hosted.graph.get_state(runner.graph_config(run)).values["messages"])


def test_a_reopened_hosted_task_is_worked_on_again_by_its_destination_then_verified_healthy(operator, worker_process):
    run = _false_complete_hosted_run()

    result = _reopen(operator, run)

    assert result.outcome == "done"
    wait_until(lambda: _verdict(run) == "HEALTHY", what="the reworked task to turn healthy")
    wait_until(lambda: AuditEntry.objects.filter(action="task.rework").exists(), what="the worker's audit entry")
    handoff = run.handoffs.get()
    assert handoff.verification_part["verifier"] == "order_exists"
    assert handoff.verification_part["result"] == "pass"
    assert Order.objects.filter(operation_id=run.operation_id).count() == 1  # sales placed it this time
    assert Run.objects.get(pk=run.pk).status == "complete"
    steps = list(AuditEntry.objects.order_by("pk").values_list("actor_name", "action", "outcome"))
    assert steps == [("oncall", "task.reopen", "done"), ("system", "task.rework", "done")]


def test_the_destination_is_told_the_verifier_and_its_result_and_nothing_else(operator, no_enqueue):
    run = _false_complete_hosted_run()
    decision = _reopen(operator, run).decision

    execution.resume(decision.pk)

    messages = _messages(run)
    notes = [m for m in messages if is_reopen_note(m)]
    assert len(notes) == 1 and isinstance(notes[0], SystemMessage)
    assert "order_exists returned fail" in notes[0].content
    assert "Done! Your two widgets" not in notes[0].content  # no message body, no verifier text
    assert not any(isinstance(m, HumanMessage) for m in messages[messages.index(notes[0]) :])
    # The agent after the note is the destination (sales), and its turn is a valid tool call and answer.
    after = messages[messages.index(notes[0]) + 1 :]
    assert [getattr(m, "name", None) for m in after] == ["sales", "place_order", "sales"]
    assert no_enqueue == [("agents.tasks.resume_run", decision.pk)]


def test_a_re_delivered_reopen_adds_no_second_note_and_no_second_order(operator, no_enqueue):
    run = _false_complete_hosted_run()
    decision = _reopen(operator, run).decision
    execution.resume(decision.pk)

    assert execution.resume(decision.pk) == "complete"  # the token was used: nothing driven again

    assert len([m for m in _messages(run) if is_reopen_note(m)]) == 1
    assert Order.objects.filter(operation_id=run.operation_id).count() == 1
    assert Decision.objects.get(pk=decision.pk).applications == 1


def test_a_second_reopen_while_one_is_in_flight_does_nothing_new(operator, no_enqueue):
    run = _false_complete_hosted_run()
    first = _reopen(operator, run)

    second = _reopen(operator, run)

    assert (first.outcome, second.outcome) == ("done", "noop")
    assert "already under way" in second.message
    assert Decision.objects.filter(kind="reopen").count() == 1
    assert len(no_enqueue) == 1
    entries = AuditEntry.objects.filter(action="task.reopen").order_by("pk")
    assert list(entries.values_list("outcome", flat=True)) == ["done", "noop"]


def test_the_same_reopen_submitted_twice_is_one_reopen(operator, no_enqueue):
    run = _false_complete_hosted_run()
    key = uuid.uuid4().hex

    results = [_reopen(operator, run, key), _reopen(operator, run, key)]

    assert [r.outcome for r in results] == ["done", "noop"]
    assert Decision.objects.filter(kind="reopen").count() == 1


def test_reopen_needs_the_reopen_task_permission_and_the_denial_is_audited(viewer, no_enqueue):
    run = _false_complete_hosted_run()

    result = _reopen(viewer, run)

    assert result.outcome == "denied"
    assert "reopen-task permission" in result.message
    assert not Decision.objects.exists() and no_enqueue == []
    assert AuditEntry.objects.filter(action="task.reopen", outcome="denied", actor_name="viewer").exists()


def test_the_reopen_form_needs_its_csrf_token(operator, no_enqueue):
    run = _false_complete_hosted_run()
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)

    response = client.post(
        reverse("sidewisp:task-reopen", args=[run.handoffs.get().pk]), {"key": uuid.uuid4().hex, "reason": "redo"}
    )

    assert response.status_code == 403
    assert not Decision.objects.exists() and no_enqueue == []


def test_verify_again_only_runs_the_verifier(operator, no_enqueue):
    run = _false_complete_hosted_run()

    result = actions.verify_again(user=operator, handoff_id=run.handoffs.get().pk, key=uuid.uuid4().hex, reason="x")

    assert result.outcome == "done"
    assert no_enqueue == [("agents.tasks.reverify", run.pk)]
    assert not Decision.objects.exists()


# --- an observed run: the app's own process resumes it -------------------------------------------


def _observed_false_completion(operation_id: str):
    scenario = SCENARIOS["false_complete"]
    graph = scenario.build(InMemorySaver()).graph
    config = {"configurable": {"thread_id": operation_id, "operation_id": operation_id}}
    check = verifier("order_exists")
    observe(graph, scenario.graph_input(), config, verifier=check)
    return graph, config, check


def test_an_observed_runs_reopen_is_handed_to_the_app_by_await_decision(operator):
    graph, config, check = _observed_false_completion("op-observed-reopen")
    run = Run.objects.get(operation_id="op-observed-reopen")
    assert _verdict(run) == "FALSE_COMPLETE"

    client = Client()
    client.force_login(operator)
    page = client.get(reverse("sidewisp:confirm", args=["reopen", run.handoffs.get().pk])).content.decode()
    result = _reopen(operator, run)
    command = await_decision("op-observed-reopen", timeout=5, poll=0.05)

    assert "The app&#x27;s own process must resume it" in page
    assert result.outcome == "done" and "The app's own process must resume it" in result.message
    assert command is not None and command.goto == "sales"
    assert await_decision("op-observed-reopen", timeout=0) is None  # claimed once
    outcome = observe(graph, command, config, verifier=check)
    assert outcome.status == "complete"
    assert _verdict(run) == "HEALTHY"
    assert Order.objects.filter(operation_id="op-observed-reopen").count() == 1
    assert AuditEntry.objects.filter(action="task.rework", detail__resumed_by="app").exists()
