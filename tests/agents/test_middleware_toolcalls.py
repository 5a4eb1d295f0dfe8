"""How long each tool call took (issue 30 §1): SidewispMiddleware times every call that is not a transfer and
reports it as a `tool_call` report, by name only, once; an interrupt passes through untouched and a call an
approver rejected (it never ran) is not reported as a call that ran."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.types import Command, interrupt

from agents.observe import writer
from receipts.models import Handoff, MiddlewareReport, Run
from tests.agents.test_middleware import _foreign_desk

SECRET_EMAIL = "someone-secret@example.com"


@pytest.fixture
def contracts(transactional_db):
    from agents.demo.contracts import install_team_contracts

    install_team_contracts()


@tool
def lookup_customer(email: str) -> str:
    """Find a customer's account."""
    return "account found"


@tool
def broken_lookup(email: str) -> str:
    """A lookup whose backend is down."""
    raise ValueError(f"backend down for {email}")


@tool
def confirm_with_person(email: str) -> str:
    """Ask a person before going on (the graph stops here until they answer)."""
    return f"confirmed: {interrupt('is this the customer?')}"


def _desk(lookup, *, hitl: bool = False):
    """triage calls `lookup`, then hands the ticket to support, which answers."""
    return _foreign_desk(lookup, email=SECRET_EMAIL, hitl=hitl)


def _run(name: str) -> tuple[Run, dict]:
    run = Run.objects.create(operation_id=f"op-{name}", thread_id=f"th-{name}")
    return run, {"configurable": {"thread_id": run.thread_id, "operation_id": run.operation_id}}


ASK = {"messages": [HumanMessage("help")], "active_agent": "triage"}


def _tool_calls(run: Run) -> list[MiddlewareReport]:
    writer.flush()  # without observe, nothing waits for the batched writer
    return list(MiddlewareReport.objects.filter(run=run, kind=MiddlewareReport.Kind.TOOL_CALL).order_by("pk"))


def test_a_lookup_then_a_transfer_reports_the_lookup_by_name_with_its_times_and_not_the_transfer(contracts):
    run, config = _run("tc-ok")

    result = _desk(lookup_customer).invoke(ASK, config)

    assert result["active_agent"] == "support"
    (call,) = _tool_calls(run)  # the transfer has its receipts: no tool_call of its own
    handoff = Handoff.objects.get(run=run)
    assert (call.agent, call.detail["tool"], call.detail["outcome"]) == ("triage", "lookup_customer", "ok")
    assert set(call.detail) == {"tool", "call_id", "started_at", "ended_at", "outcome"}
    assert call.attempt == call.detail["call_id"] != handoff.created_part["tool_call_id"]
    started, ended = (datetime.fromisoformat(call.detail[k]) for k in ("started_at", "ended_at"))
    assert started.utcoffset().total_seconds() == 0 and started <= ended
    assert SECRET_EMAIL not in json.dumps(call.detail) and "account found" not in json.dumps(call.detail)


def test_a_tool_that_raises_is_reported_as_an_error_and_the_error_still_reaches_the_graph(contracts):
    run, config = _run("tc-error")

    with pytest.raises(ValueError, match="backend down"):
        _desk(broken_lookup).invoke(ASK, config)

    (call,) = _tool_calls(run)
    assert (call.detail["tool"], call.detail["outcome"]) == ("broken_lookup", "error")
    assert SECRET_EMAIL not in json.dumps(call.detail)


def test_an_interrupt_inside_a_tool_passes_through_and_the_call_is_reported_once_when_it_ends(contracts):
    run, config = _run("tc-interrupt")
    graph = _desk(confirm_with_person)

    paused = graph.invoke(ASK, config)

    assert paused["__interrupt__"]  # GraphInterrupt reached the graph untouched
    assert _tool_calls(run) == []  # the call did not end: it runs again on resume
    graph.invoke(Command(resume="yes"), config)
    (call,) = _tool_calls(run)
    assert (call.detail["tool"], call.detail["outcome"]) == ("confirm_with_person", "ok")


def test_a_call_the_approver_rejected_never_ran_and_is_not_reported_as_a_call(contracts):
    run, config = _run("tc-rejected")
    graph = _desk(lookup_customer, hitl=True)

    paused = graph.invoke(ASK, config)
    assert paused["__interrupt__"]
    result = graph.invoke(Command(resume={"decisions": [{"type": "reject", "message": "not this one"}]}), config)

    assert result["active_agent"] == "support"
    # HumanInTheLoopMiddleware answered it before SidewispMiddleware (innermost) was reached: no call ran.
    assert [c.detail["tool"] for c in _tool_calls(run)] == []
    assert Handoff.objects.get(run=run).receiver == "support"


def test_under_ainvoke_the_lookup_is_timed_too(contracts):
    import asyncio

    run, config = _run("tc-async")

    asyncio.run(_desk(lookup_customer).ainvoke(ASK, config))

    (call,) = _tool_calls(run)
    assert (call.agent, call.detail["tool"], call.detail["outcome"]) == ("triage", "lookup_customer", "ok")
    assert datetime.fromisoformat(call.detail["started_at"]) <= datetime.fromisoformat(call.detail["ended_at"])


def test_a_call_answered_with_an_error_message_is_an_error_and_a_rejections_answer_a_rejection():
    from langchain_core.messages import ToolMessage
    from sidewisp_agent import toolcalls

    failed = ToolMessage("`lookup` failed with ValueError", tool_call_id="a", name="lookup", status="error")
    rejected = ToolMessage("User rejected the tool call for `lookup` with id a", tool_call_id="a", status="error")
    answered = ToolMessage("account found", tool_call_id="a", name="lookup")

    assert [toolcalls.outcome_of(m) for m in (failed, rejected, answered)] == ["error", "rejected", "ok"]
