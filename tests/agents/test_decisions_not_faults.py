"""Decisions are not faults (issue 28 §5): an approver's rejection, or a deadline's, is shown as the decision it is,
and a tool error is reported once, by the agent whose call failed, however many agents see it in the history later."""

from __future__ import annotations

from datetime import timedelta

from django.urls import reverse
from langchain.agents import create_agent
from langgraph.checkpoint.memory import InMemorySaver
from langgraph_swarm import create_handoff_tool, create_swarm
from sidewisp_agent import decisions

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import create_run
from agents.host import execution, runner
from agents.host.scripted import Call, Say, Script, ScriptedChatModel
from receipts import actions
from receipts.models import Decision, Handoff, MiddlewareReport, Run
from tests.agents import teams
from tests.agents.stored import observe
from tests.agents.test_third_party import ask, config_for

# The order was not placed: the verifier's own check fails, which after a rejection is what proves it.
NOT_PLACED = lambda op: ("order_check", "fail", "v-1")  # noqa: E731


def test_a_rejected_approval_is_the_decision_not_a_tool_error(team_contracts, person, client):
    owner = person("ops-lead", "approver")
    config = config_for("reject")
    graph = teams.swarm(
        InMemorySaver(),
        hitl=True,
        bob_tools=[teams.place_order],
        bob_steps=(Call("place_order", {"item": "widget"}), Say("I did not place the order")),
    )
    observe(graph, ask("buy a widget"), config, wait_policies=teams.WAIT_POLICIES, verifier=NOT_PLACED)
    handoff = Handoff.objects.get(run__operation_id=config["configurable"]["operation_id"])
    token = handoff.wait_part["resume_token_id"]
    result = actions.decide(user=owner, handoff_id=handoff.pk, kind="reject", token=token, key="k-1", reason="no")
    assert result.decision is not None, result.message

    command = decisions.await_decision(handoff.run.operation_id, timeout=5, poll=0.05)
    outcome = observe(graph, command, config, wait_policies=teams.WAIT_POLICIES, verifier=NOT_PLACED)

    run = Run.objects.get(pk=handoff.run_id)
    handoff.refresh_from_db()
    assert outcome.status == "complete"
    assert handoff.wait_part["resolution"] == "rejected"
    assert not MiddlewareReport.objects.filter(run=run, kind=MiddlewareReport.Kind.TOOL_ERROR).exists()
    assert (run.health, run.health_reasons) == ("healthy", [])
    client.force_login(owner)
    body = client.get(reverse("sidewisp:run-detail", args=[run.pk])).content.decode()
    assert "Rejected" in body
    assert "Tool error" not in body and "inspect the tool error" not in body


def test_an_expired_approval_is_the_decision_not_a_tool_error(
    transactional_db, person, client, django_capture_on_commit_callbacks
):
    """Nobody decided before the deadline: the safe default (a rejection) is applied, and HumanInTheLoopMiddleware
    answers the gated call as it answers an approver's rejection. That is the wait's decision, not a fault."""
    install_team_contracts()
    run = create_run("waiting_on_approval")
    runner.start_run(run)
    handoff = run.handoffs.get()
    with django_capture_on_commit_callbacks(execute=False):
        assert actions.expire_overdue_waits(now=handoff.wait_deadline + timedelta(minutes=1)) == 1

    execution.resume(Decision.objects.get(run=run).pk)

    run.refresh_from_db()
    assert (run.status, run.handoffs.get().wait_part["resolution"]) == (Run.Status.COMPLETE, "expired")
    assert not MiddlewareReport.objects.filter(run=run, kind=MiddlewareReport.Kind.TOOL_ERROR).exists()
    assert (run.health, run.health_reasons) == ("healthy", [])
    client.force_login(person("ops-lead", "approver"))
    body = client.get(reverse("sidewisp:run-detail", args=[run.pk])).content.decode()
    assert "Expired" in body
    assert "Tool error" not in body and "inspect the tool error" not in body


def _swarm_with_a_failing_call():
    """alice's first lookup has no query (the ToolNode answers it with an error ToolMessage), then she hands to
    bob, who makes two model calls over the same history."""
    alice = create_agent(
        ScriptedChatModel(policy=Script((Call("lookup", {}), Call("transfer_to_bob"), Say("alice done")))),
        tools=[teams.lookup, create_handoff_tool(agent_name="bob")],
        middleware=[teams.observed()],
        name="alice",
    )
    bob = create_agent(
        ScriptedChatModel(policy=Script((Call("lookup", {"query": "q"}), Say("bob done")))),
        tools=[teams.lookup, create_handoff_tool(agent_name="alice")],
        middleware=[teams.observed()],
        name="bob",
    )
    return create_swarm([alice, bob], default_active_agent="alice").compile(checkpointer=InMemorySaver())


def test_a_tool_error_in_a_swarm_is_reported_once_by_the_agent_whose_call_failed(team_contracts):
    config = config_for("swarm-error")

    outcome = observe(_swarm_with_a_failing_call(), ask(), config, verifier=lambda op: ("check", "pass", "v-1"))

    run = Run.objects.get(operation_id=config["configurable"]["operation_id"])
    errors = list(MiddlewareReport.objects.filter(run=run, kind=MiddlewareReport.Kind.TOOL_ERROR))
    assert outcome.status == "complete"
    assert [(r.agent, r.detail) for r in errors] == [("alice", {"tool": "lookup"})]
    (reason,) = [r for r in run.health_reasons if r["code"] == "tool_error"]
    assert reason["text"] == "Tool error (lookup)"
