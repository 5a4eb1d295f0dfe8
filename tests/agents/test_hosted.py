"""Hosted mode: users' registered graphs, without the demo, driven by a real Celery worker process (issue 18)."""

from __future__ import annotations

import io
import json
import re
import uuid
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware, ToolRetryMiddleware
from langchain.tools import tool

from agents import tasks
from agents.demo.contracts import team_contracts
from agents.demo.tools import TransientServiceError
from agents.host import hosting, runner
from agents.host.registry import Host
from agents.host.scripted import Say, chat_model
from agents.limits import DEFAULT_SETTINGS, AgentSettings, merge
from agents.limits.stack import build_middleware, with_extra
from agents.models import Order
from receipts import actions
from receipts.ingest.contracts import import_document
from receipts.models import AuditEntry, Handoff, MiddlewareReport, Receipt, Run
from receipts.workers import runtime
from tests.agents.hosted_graph import CONTRACTS, INPUT, SHOP_INPUT, place_order
from tests.conftest import start_worker_process, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HOSTED_GRAPH = "tests/agents/hosted_graph.py"
# Users' graphs only: none of them needs the demo registered beside it.
GRAPHS = json.dumps(
    {
        "support_desk": {
            "graph": "tests/agents/hosted_graph.py:make_graph",
            "verifier": "tests/agents/hosted_graph.py:invoice_paid",
            "wait_policies": {
                "pay_invoice": {"owner": "ops-lead", "reason": "irreversible_choice", "deadline_minutes": 60}
            },
        },
        "express_desk": {"graph": f"{HOSTED_GRAPH}:make_express_graph", "verifier": f"{HOSTED_GRAPH}:invoice_paid"},
        "unverified_desk": f"{HOSTED_GRAPH}:make_express_graph",
        "shop": f"{HOSTED_GRAPH}:make_shop_graph",
        "broken": f"{HOSTED_GRAPH}:make_broken_graph",
    }
)
REGISTERED = ["broken", "express_desk", "shop", "support_desk", "unverified_desk"]


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


def test_a_rejected_payment_claimed_as_paid_is_a_false_completion_that_verify_again_keeps_false(
    owner, operator, desk_worker
):
    run = hosting.start("support_desk", INPUT)
    wait_until(lambda: _waiting(run), what="the user graph's approval wait")

    assert _decide(owner, _handoff(run), "reject", reason="not this month").outcome == "done"
    wait_until(lambda: _handoff(run).verdict == "FALSE_COMPLETE", what="the unpaid claim to show as false")
    checks = Receipt.objects.filter(handoff=_handoff(run), part="verification").count()

    result = actions.verify_again(user=operator, handoff_id=_handoff(run).pk, key=uuid.uuid4().hex, reason="again")

    assert result.outcome == "done"
    verified = lambda: Receipt.objects.filter(handoff=_handoff(run), part="verification").count()  # noqa: E731
    wait_until(lambda: verified() == checks + 1, what="the re-verification")
    # The payment was declined and the agent still says "paid": the claim stays false (spec §1 v1.1).
    assert (_handoff(run).verdict, _handoff(run).verification_part["verifier"]) == (
        "FALSE_COMPLETE",
        "invoice_paid.declined",
    )
    assert AuditEntry.objects.filter(action="task.reverify", outcome="done").exists()


# --- users' graphs registered alone (issue 18) ------------------------------------------------


def _readme(pattern: str) -> str:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    (found,) = re.findall(pattern, readme, re.MULTILINE)
    return found


@pytest.fixture
def readme_worker(settings, celery_isolation):
    """A worker registered with exactly the README's SIDEWISP_GRAPHS line (no demo)."""
    graphs = _readme(r"^export SIDEWISP_GRAPHS='(.+)'$")
    settings.SIDEWISP_GRAPHS = graphs
    worker = start_worker_process(
        f"readme{uuid.uuid4().hex[:6]}", celery_isolation, extra_env={"SIDEWISP_GRAPHS": graphs}
    )
    yield json.loads(graphs)
    worker.stop()


def test_the_readmes_registration_alone_starts_waits_resumes_and_finishes_on_the_worker(owner, readme_worker):
    assert list(readme_worker) == ["desk"]
    graph_input = json.loads(_readme(r"^(?:\.venv/bin/)?python manage.py start_run desk --input '(.+)'$"))
    run = hosting.start("desk", graph_input)

    wait_until(lambda: _waiting(run), what="the README graph's approval wait")
    assert (_run(run).input, _handoff(run).wait_owner) == (None, "ops-lead")
    assert _decide(owner, _handoff(run), "approve").outcome == "done"

    wait_until(lambda: _run(run).status == "complete", what="the approved README run to complete")
    assert (_run(run).error, _handoff(run).verdict) == ("", "HEALTHY")
    assert Order.objects.filter(operation_id=run.operation_id, sku="invoice").count() == 1


def test_a_users_own_place_order_waits_for_its_own_approval_and_resumes_on_the_worker(owner, desk_worker):
    run = hosting.start("shop", SHOP_INPUT)

    wait_until(lambda: _waiting(run), what="the buyer's own approval of place_order")
    wait = _handoff(run)
    pending = runtime.current().pending_call(_run(run))
    assert (wait.sender, wait.receiver, wait.wait_owner) == ("clerk", "buyer", "ops-lead")
    # The buyer's own rule (approve or reject), not the demo's gate of a tool with the same name.
    assert (pending.tool, pending.allowed_decisions) == ("place_order", ("approve", "reject"))
    assert _decide(owner, wait, "approve").outcome == "done"

    wait_until(lambda: _run(run).status == "complete", what="the approved restock to complete")
    assert (_run(run).error, _handoff(run).verdict) == ("", "HEALTHY")
    assert Order.objects.filter(operation_id=run.operation_id, sku="restock-widget").count() == 1


def test_a_user_graph_without_an_approval_completes_healthy_on_the_worker(desk_worker):
    run = hosting.start("express_desk", INPUT)

    wait_until(lambda: _run(run).status == "complete", what="the express run to complete")

    done = _handoff(run)
    assert (_run(run).error, _run(run).input, done.verdict) == ("", None, "HEALTHY")
    assert not done.wait_part
    assert not MiddlewareReport.objects.filter(run=run, kind=MiddlewareReport.Kind.NO_VERIFIER).exists()


def test_a_graph_without_a_verifier_is_a_false_completion_whose_page_says_how_to_add_one(viewer, client, desk_worker):
    run = hosting.start("unverified_desk", INPUT)
    wait_until(lambda: _run(run).status == "complete", what="the unverified run to complete")

    client.force_login(viewer)
    page = client.get(reverse("sidewisp:run-detail", args=[run.pk])).content.decode()

    assert _handoff(run).verdict == "FALSE_COMPLETE"
    assert "Graph unverified_desk has no verifier registered, so its completion claim is not proven" in page
    assert "a verifier in its SIDEWISP_GRAPHS entry, or HostedGraph(verifier=...)" in page
    assert "README, “Outcome verifiers”" in page


def test_a_graph_that_fails_while_it_is_built_fails_its_run_and_keeps_no_input(desk_worker):
    run = hosting.start("broken", INPUT)

    wait_until(lambda: _run(run).status == "failed", what="the run whose graph cannot be built to fail")

    assert (_run(run).error, _run(run).input) == ("ConfigServiceDown", None)


def test_a_build_failure_ends_in_the_run_not_in_the_task(desk_graph):
    run = hosting.start("broken", INPUT)

    result = tasks.start_run.apply(args=(run.pk,), throw=True)

    assert result.get() == "failed"
    assert (_run(run).status, _run(run).error, _run(run).input) == ("failed", "ConfigServiceDown", None)


def test_beside_the_demo_a_users_place_order_keeps_its_own_gate_alone(settings):
    settings.SIDEWISP_GRAPHS = json.dumps(
        {"demo": "agents.demo.graph:make_graph", "shop": f"{HOSTED_GRAPH}:make_shop_graph"}
    )
    run = hosting.start("shop", SHOP_INPUT)

    # Building the buyer with two approval gates would raise "Please remove duplicate middleware instances".
    assert runner.start_run(run) == "waiting"

    assert runtime.current().pending_call(_run(run)).allowed_decisions == ("approve", "reject")


DEMO = "agents.demo.graph:make_graph"
SHOP = f"{HOSTED_GRAPH}:make_shop_graph"


def _stack_for(graph: str, agent: str, tools: list[str]) -> list:
    run = Run(operation_id=f"op-{graph}", thread_id=f"th-{graph}", graph=graph, mode=Run.Mode.HOSTED)
    return Host(run=run).middleware(agent, tools)


@pytest.mark.parametrize("graphs", [{"shop": SHOP}, {"demo": DEMO, "shop": SHOP}], ids=["alone", "beside the demo"])
def test_a_users_agent_gets_no_gate_or_retried_error_of_another_graph(settings, graphs):
    settings.SIDEWISP_GRAPHS = json.dumps(graphs)

    stack = _stack_for("shop", "buyer", ["place_order", "refund", "disclose_secret"])

    assert not [m for m in stack if isinstance(m, HumanInTheLoopMiddleware)]
    (retry,) = [m for m in stack if isinstance(m, ToolRetryMiddleware)]
    assert retry.retry_on == (ConnectionError, TimeoutError)


def test_the_demo_brings_its_own_gates_and_retried_error(settings):
    settings.SIDEWISP_GRAPHS = json.dumps({"demo": DEMO, "shop": SHOP})

    stack = _stack_for("demo", "sales", ["check_inventory", "place_order"])

    (gate,) = [m for m in stack if isinstance(m, HumanInTheLoopMiddleware)]
    (retry,) = [m for m in stack if isinstance(m, ToolRetryMiddleware)]
    assert list(gate.interrupt_on) == ["place_order"]
    assert retry.retry_on == (TransientServiceError,)


@tool
def cancel_order(order_id: str) -> str:
    """Cancel an order."""
    return f"cancelled {order_id}"


def _buyer_stack(gates: dict) -> list:
    settings = AgentSettings("buyer", merge(DEFAULT_SETTINGS, {"approval": {"tools": gates}}))
    return build_middleware(settings, ["place_order", "cancel_order"])


ALL_DECISIONS = {"allowed_decisions": ["approve", "edit", "reject"], "reason": "purchase_approval"}


def test_the_limits_gates_join_the_agents_own_approval_gate_instead_of_a_second_one():
    own = HumanInTheLoopMiddleware(interrupt_on={"place_order": {"allowed_decisions": ["approve", "reject"]}})
    stack = _buyer_stack({"place_order": ALL_DECISIONS, "cancel_order": ALL_DECISIONS})

    joined = with_extra(stack, [own], agent="buyer")

    (gate,) = [m for m in joined if isinstance(m, HumanInTheLoopMiddleware)]
    assert gate.interrupt_on["place_order"]["allowed_decisions"] == ["approve", "reject"]
    assert gate.interrupt_on["cancel_order"]["allowed_decisions"] == ["approve", "edit", "reject"]
    assert joined[-1].name == "SidewispMiddleware"
    create_agent(chat_model(lambda *_: Say("ok")), tools=[place_order, cancel_order], middleware=joined)


def test_an_own_gate_that_names_every_gated_tool_is_kept_as_it_is():
    own = HumanInTheLoopMiddleware(interrupt_on={"place_order": True, "cancel_order": True})

    joined = with_extra(_buyer_stack({"place_order": ALL_DECISIONS}), [own], agent="buyer")

    assert [m for m in joined if isinstance(m, HumanInTheLoopMiddleware)] == [own]


def test_an_own_gate_of_another_kind_that_misses_a_gated_tool_is_refused_by_name():
    class StrictGate(HumanInTheLoopMiddleware):
        pass

    own = StrictGate(interrupt_on={"place_order": True})

    with pytest.raises(ValueError, match="agent 'buyer': its StrictGate does not gate cancel_order"):
        with_extra(_buyer_stack({"cancel_order": ALL_DECISIONS}), [own], agent="buyer")


def test_the_runtime_says_who_resumes_each_kind_of_run(desk_graph):
    hosted = Run.objects.create(operation_id="op-h", thread_id="th-h", graph="support_desk", mode=Run.Mode.HOSTED)
    observed = Run.objects.create(operation_id="op-o", thread_id="th-o", mode=Run.Mode.OBSERVED)
    imported = Run.objects.create(operation_id="op-i", thread_id="th-i", source=Run.Source.IMPORT)
    current = runtime.current()

    assert [current.can_resume(r) for r in (hosted, observed, imported)] == [True, True, False]
    assert [current.can_drive(r) for r in (hosted, observed, imported)] == [True, False, False]
    assert current.resumer(hosted) == "A Sidewisp worker resumes it from its checkpoint (graph support_desk)."
    assert "await_decision(operation_id)" in current.resumer(observed)
    assert current.graphs() == REGISTERED


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
        (
            ["nobody_registered", "--input", "{}"],
            f"unknown graph 'nobody_registered'; registered: {', '.join(REGISTERED)}",
        ),
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
