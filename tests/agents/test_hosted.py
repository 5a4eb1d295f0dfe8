"""Hosted mode: a user's registered graph (not the demo) driven by a real Celery worker process."""

from __future__ import annotations

import io
import json
import uuid

import pytest
from django.core.management import call_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents import hosting, tasks
from agents.contracts import team_contracts
from agents.models import Order
from receipts import actions, runtime
from receipts.contracts import import_document
from receipts.models import AuditEntry, Handoff, Receipt, Run
from tests.agents.hosted_graph import CONTRACTS, INPUT
from tests.conftest import start_worker_process, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

GRAPHS = json.dumps(
    {
        "demo": "agents.demo.graph:make_graph",
        "support_desk": {
            "graph": "tests/agents/hosted_graph.py:make_graph",
            "verifier": "tests/agents/hosted_graph.py:invoice_paid",
            "wait_policies": {
                "pay_invoice": {"owner": "ops-lead", "reason": "irreversible_choice", "deadline_minutes": 60}
            },
        },
    }
)


@pytest.fixture(autouse=True)
def desk_contracts(transactional_db):
    document = team_contracts()
    import_document({**document, "routes": {**document["routes"], **CONTRACTS}})


@pytest.fixture
def desk_graph(settings):
    settings.SIDEWISP_GRAPHS = GRAPHS


@pytest.fixture
def desk_worker(desk_graph, celery_isolation):
    worker = start_worker_process(
        f"desk{uuid.uuid4().hex[:6]}", celery_isolation, extra_env={"SIDEWISP_GRAPHS": GRAPHS}
    )
    yield worker
    worker.stop()


def _run(run: Run) -> Run:
    return Run.objects.get(pk=run.pk)


def _handoff(run: Run) -> Handoff | None:
    return Handoff.objects.filter(run=run).order_by("created_at", "pk").last()


def _waiting(run: Run) -> bool:
    handoff = _handoff(run)
    return _run(run).status == "waiting" and handoff is not None and handoff.verdict == "WAITING_ON_APPROVAL"


def _decide(user, handoff: Handoff, kind: str, **kwargs):
    token = handoff.wait_part["resume_token_id"]
    return actions.decide(user=user, handoff_id=handoff.pk, kind=kind, token=token, key=uuid.uuid4().hex, **kwargs)


def test_an_approved_user_graph_resumes_on_the_worker_and_ends_healthy(owner, operator, desk_worker):
    run = hosting.start("support_desk", INPUT)

    wait_until(lambda: _waiting(run), what="the user graph's approval wait")
    wait = _handoff(run)
    assert (wait.sender, wait.receiver, wait.wait_owner) == ("desk", "payments", "ops-lead")
    assert _run(run).input is None  # the checkpoint holds it now
    assert runtime.current().pending_call(_run(run)).tool == "pay_invoice"

    assert _decide(owner, wait, "approve").outcome == "done"

    wait_until(lambda: _run(run).status == "complete", what="the approved run to complete")
    done = _handoff(run)
    assert done.verdict == "HEALTHY"
    assert (done.wait_open, done.wait_part["resolved"]) == (False, True)
    assert Order.objects.filter(operation_id=run.operation_id, sku="invoice").count() == 1
    assert runtime.current().can_reverify(_run(run))


def test_a_rejected_payment_claimed_as_paid_is_a_false_completion_that_reopening_verifies_again(
    owner, operator, desk_worker
):
    run = hosting.start("support_desk", INPUT)
    wait_until(lambda: _waiting(run), what="the user graph's approval wait")

    assert _decide(owner, _handoff(run), "reject", reason="not this month").outcome == "done"
    wait_until(lambda: _handoff(run).verdict == "FALSE_COMPLETE", what="the unpaid claim to show as false")
    checks = Receipt.objects.filter(handoff=_handoff(run), part="verification").count()

    result = actions.reopen(user=operator, handoff_id=_handoff(run).pk, key=uuid.uuid4().hex, reason="check again")

    assert result.outcome == "done"
    verified = lambda: Receipt.objects.filter(handoff=_handoff(run), part="verification").count()  # noqa: E731
    wait_until(lambda: verified() == checks + 1, what="the re-verification")
    # The payment was declined and the agent still says "paid": the claim stays false (spec §1 v1.1).
    assert (_handoff(run).verdict, _handoff(run).verification_part["verifier"]) == (
        "FALSE_COMPLETE",
        "invoice_paid.declined",
    )
    assert AuditEntry.objects.filter(action="task.reverify", outcome="done").exists()


def test_the_runtime_says_who_resumes_each_kind_of_run(desk_graph):
    hosted = Run.objects.create(operation_id="op-h", thread_id="th-h", graph="support_desk", mode=Run.Mode.HOSTED)
    observed = Run.objects.create(operation_id="op-o", thread_id="th-o", mode=Run.Mode.OBSERVED)
    imported = Run.objects.create(operation_id="op-i", thread_id="th-i", source=Run.Source.IMPORT)
    current = runtime.current()

    assert [current.can_resume(r) for r in (hosted, observed, imported)] == [True, True, False]
    assert [current.can_drive(r) for r in (hosted, observed, imported)] == [True, False, False]
    assert current.resumer(hosted) == "A Sidewisp worker resumes it from its checkpoint (graph support_desk)."
    assert "await_decision(operation_id)" in current.resumer(observed)
    assert current.graphs() == ["demo", "support_desk"]


def test_an_observed_runs_pending_call_comes_from_the_run(desk_graph):
    pending = {"tool": "pay", "arg_types": {"amount": "int"}, "allowed_decisions": ["approve"], "resume_token_id": "rt"}
    run = Run.objects.create(operation_id="op-o", thread_id="th-o", mode=Run.Mode.OBSERVED, pending_call=pending)

    found = runtime.current().pending_call(run)

    assert (found.tool, found.arg_keys, found.allowed_decisions) == ("pay", ["amount"], ("approve",))


def test_resuming_auto_continue_of_an_observed_run_enqueues_nothing(operator, monkeypatch):
    from agents import tasks

    sent = []
    monkeypatch.setattr(tasks.start_run, "delay", sent.append)
    run = Run.objects.create(operation_id="op-o", thread_id="th-o", mode=Run.Mode.OBSERVED, auto_continue=False)

    result = actions.resume_auto_continue(user=operator, run_id=run.pk, key="k", reason="reconciled")

    assert result.outcome == "done"
    assert "nothing was enqueued" in result.message
    assert sent == []


# --- manage.py start_run -----------------------------------------------------------------


def test_start_run_queues_a_run_and_prints_its_operation_id(desk_graph, capsys, monkeypatch):
    from agents import tasks

    monkeypatch.setattr(tasks.start_run, "delay", lambda pk: None)

    call_command("start_run", "support_desk", "--input", json.dumps(INPUT), "--operation-id", "op-desk-1")

    run = Run.objects.get(operation_id="op-desk-1")
    assert capsys.readouterr().out.strip() == "op-desk-1"
    assert (run.graph, run.mode, run.status) == ("support_desk", "hosted", "queued")


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        (["nobody_registered", "--input", "{}"], "unknown graph 'nobody_registered'; registered: demo, support_desk"),
        (["support_desk", "--input", "{not json"], "--input: not valid JSON"),
        (["support_desk", "--input", "{}", "--operation-id", "op-taken"], "'op-taken' exists already"),
        (["support_desk", "--input", "[" * 50_000 + "]" * 50_000], "--input: not valid JSON (nested too deeply)"),
        (["support_desk", "--input", '{"n": ' + "9" * 5_000 + "}"], "--input: not valid JSON (a number is too long)"),
        (["support_desk", "--input", "{}", "--operation-id", "see /home/alice/x"], "operation_id:"),
        (["support_desk", "--input", "{}", "--operation-id", "x" * 201], "operation_id:"),
    ],
)
def test_start_run_refuses_bad_input_with_exit_code_2(desk_graph, capsys, arguments, complaint):
    Run.objects.create(operation_id="op-taken", thread_id="th-taken")

    with pytest.raises(SystemExit) as exited:
        call_command("start_run", *arguments)

    assert exited.value.code == 2
    assert complaint in capsys.readouterr().err
    assert Run.objects.count() == 1


@given(text=st.text(max_size=200))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_start_run_answers_any_input_with_a_run_or_exit_2(desk_graph, monkeypatch, text):
    monkeypatch.setattr(tasks.start_run, "delay", lambda pk: None)
    try:
        call_command("start_run", "support_desk", f"--input={text}", stdout=io.StringIO(), stderr=io.StringIO())
    except SystemExit as exited:
        assert exited.code == 2
