"""SidewispMiddleware on agents that are not ours, and the reports it makes about other middleware."""

from __future__ import annotations

import asyncio
from typing import Annotated, NotRequired, TypedDict

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from sidewisp_agent.handoffs import handoff_tool
from sidewisp_agent.middleware import SidewispMiddleware, history_reports

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import create_run
from agents.host import runner
from agents.host.scripted import Call, Say, Script, ScriptedChatModel
from agents.observe import writer
from receipts.models import Handoff, MiddlewareReport, Run
from tests.agents.stored import observe


@pytest.fixture
def contracts(transactional_db):
    install_team_contracts()


class DeskState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    active_agent: NotRequired[str]
    request_type: NotRequired[str]
    ticket_id: NotRequired[str]


@tool
def lookup_customer(email: str) -> str:
    """Find a customer's account."""
    return "account found"


def _foreign_desk(lookup=lookup_customer, *, email: str = "someone@example.com", hitl: bool = False):
    """A two-agent desk a user might bring: their own tools, prompts and graph. triage calls `lookup` with `email`
    (behind a human-in-the-loop approval with `hitl`), then hands the ticket to support, which answers."""
    name = getattr(lookup, "name", None) or lookup.__name__
    front_middleware = [HumanInTheLoopMiddleware(interrupt_on={name: True})] if hitl else []
    front = create_agent(
        ScriptedChatModel(
            policy=Script(
                (
                    Call(name, {"email": email}),
                    Call("transfer_to_support", {"request_type": "support", "ticket_id": "T-1"}),
                )
            )
        ),
        tools=[lookup, handoff_tool(to="support", context_keys=["request_type", "ticket_id"])],
        middleware=[*front_middleware, SidewispMiddleware(route_version="routes/1")],
        name="triage",
    )
    back = create_agent(
        ScriptedChatModel(policy=Script((Say("Sorted."),))),
        tools=[],
        middleware=[SidewispMiddleware(route_version="routes/1")],
        name="support",
    )
    builder = StateGraph(DeskState)
    builder.add_node("triage", front)
    builder.add_node("support", back)
    builder.add_conditional_edges(START, lambda s: s.get("active_agent") or "triage", ["triage", "support"])
    return builder.compile(checkpointer=InMemorySaver())


def test_it_records_a_healthy_handoff_for_an_agent_that_is_not_ours(contracts):
    Run.objects.create(operation_id="op-foreign", thread_id="th-foreign")
    config = {"configurable": {"thread_id": "th-foreign", "operation_id": "op-foreign"}}

    graph_input = {"messages": [HumanMessage("help")], "active_agent": "triage"}

    outcome = observe(_foreign_desk(), graph_input, config, verifier=lambda op: ("desk_check", "pass", "v-1"))

    handoff = Handoff.objects.get(run__operation_id="op-foreign")
    assert outcome.status == "complete"
    assert (handoff.sender, handoff.receiver, handoff.verdict) == ("triage", "support", "HEALTHY")
    assert handoff.reduced_part["tool_message_ids"] == [handoff.created_part["tool_call_id"]]
    assert handoff.destination_part["node_id"] == "support"


def test_a_re_run_of_the_same_operation_records_into_the_same_handoff(contracts):
    Run.objects.create(operation_id="op-again", thread_id="th-again-1")
    first = {"configurable": {"thread_id": "th-again-1", "operation_id": "op-again"}}
    second = {"configurable": {"thread_id": "th-again-2", "operation_id": "op-again"}}
    graph_input = {"messages": [HumanMessage("help")], "active_agent": "triage"}

    observe(_foreign_desk(), graph_input, first)
    # Another thread, same operation: the same conversation gives the same tool-call ids.
    observe(_foreign_desk(), graph_input, second)

    handoff = Handoff.objects.get(run__operation_id="op-again")
    assert handoff.receipts.filter(part__in=["created", "reduced"]).count() == 2


def _reports(run: Run) -> dict[str, dict]:
    return {kind: detail for kind, detail in MiddlewareReport.objects.filter(run=run).values_list("kind", "detail")}


def test_it_reports_exhausted_retries_and_a_call_limit_hit(contracts):
    run = create_run("busy_sales_with_reports")

    runner.start_run(run)

    reports = _reports(run)
    assert reports["retry_exhausted"] == {"tool": "check_inventory", "attempts": 3}
    assert reports["call_limit"] == {"tool": "check_inventory"}


def test_it_reports_a_summary_and_a_context_edit(contracts):
    run = create_run("busy_sales_with_reports")

    runner.start_run(run)

    assert {"summarized", "context_edited"} <= set(_reports(run))


def test_it_reports_a_model_failure_that_retries_turned_into_a_message(contracts):
    run = create_run("dead_model_after_handoff")

    status = runner.start_run(run)

    assert status == "failed"
    assert _reports(run)["model_failed"] == {"attempts": 3}


def test_a_healthy_run_has_no_reports(contracts):
    run = create_run("healthy_purchase")

    runner.start_run(run)

    reports = _reports(run)
    # Its tool calls are timed (issue 30 §1): a record of how long each took, not a report of anything wrong.
    assert reports.pop("tool_call")["outcome"] == "ok"
    assert reports == {}


def test_it_announces_each_report(contracts, monkeypatch):
    sent = []
    monkeypatch.setattr("receipts.ingest.broadcast.publish", sent.append)
    run = create_run("busy_sales_with_reports")

    runner.start_run(run)

    announced = {event["kind"] for event in sent if event["type"] == "report.added"}
    assert announced == set(_reports(run))


def test_a_plain_tool_error_is_told_apart_from_exhausted_retries():
    messages = [
        ToolMessage("`update_ticket` failed with ValueError", tool_call_id="a", name="update_ticket", status="error"),
        ToolMessage(
            "`check_inventory` failed after 3 attempts", tool_call_id="b", name="check_inventory", status="error"
        ),
    ]

    kinds = [kind for kind, _, _ in history_reports(messages)]

    assert kinds == ["tool_error", "retry_exhausted"]


def test_it_records_the_transfer_under_ainvoke_too(contracts):
    Run.objects.create(operation_id="op-async", thread_id="th-async")
    config = {"configurable": {"thread_id": "th-async", "operation_id": "op-async"}}
    graph_input = {"messages": [HumanMessage("help")], "active_agent": "triage"}

    result = asyncio.run(_foreign_desk().ainvoke(graph_input, config))
    writer.flush()  # without observe, nothing waits for the batched writer

    handoff = Handoff.objects.get(run__operation_id="op-async")
    assert result["active_agent"] == "support"
    assert handoff.created_part["receiver"] == "support"
