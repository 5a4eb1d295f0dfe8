"""Spec v1.3 "Runs with no handoff": a run that makes no handoff by design is judged by its outcome alone.

Real team shapes that hand nothing off, driven through `observe` / `aobserve`: a functional-API pipeline
(`@entrypoint` / `@task` calling two agents) and a root `ToolNode` that routes with `Command(goto=...)`.
"""

from __future__ import annotations

import uuid

from django.urls import reverse
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

from agents.host.scripted import Call, Say, Script, ScriptedChatModel
from receipts.models import Handoff, Run
from tests.agents import teams
from tests.agents.stored import observe

PASS = lambda op: ("pipeline_check", "pass", "v-1")  # noqa: E731
FAIL = lambda op: ("pipeline_check", "fail", "v-1")  # noqa: E731


def config_for(name: str) -> dict:
    token = uuid.uuid4().hex[:8]
    return {"configurable": {"thread_id": f"th-{name}-{token}", "operation_id": f"op-{name}-{token}"}}


def ask(text: str = "hello") -> dict:
    return {"messages": [HumanMessage(text)]}


def pipeline(checkpointer):
    """Two agents called in turn from a functional-API entrypoint: no agent hands anything to another."""
    writer = create_agent(
        ScriptedChatModel(policy=Script((Say("draft written"),))),
        tools=[],
        middleware=[teams.observed()],
        name="writer",
    )
    editor = create_agent(
        ScriptedChatModel(policy=Script((Say("draft edited"),))), middleware=[teams.observed()], name="editor"
    )

    @task
    def write(messages):
        return writer.invoke({"messages": messages})["messages"]

    @task
    def edit(messages):
        return editor.invoke({"messages": messages})["messages"]

    @entrypoint(checkpointer=checkpointer)
    def run_pipeline(state: dict) -> dict:
        drafted = write(state["messages"]).result()
        return {"messages": edit(drafted).result()}

    return run_pipeline


@tool
def route_to_billing() -> Command:
    """Send the request to billing."""
    return Command(goto="billing")


def tool_router(checkpointer):
    """A root graph whose ToolNode routes with Command(goto=...) and no graph=PARENT: a branch, not a handoff."""
    model = ScriptedChatModel(policy=Script((Call("route_to_billing"),)))

    def triage(state: MessagesState) -> dict:
        return {"messages": [model.invoke(state["messages"])]}

    def billing(state: MessagesState) -> dict:
        return {"messages": [AIMessage("billing sorted it", name="billing")]}

    builder = StateGraph(MessagesState)
    builder.add_node("triage", triage)
    builder.add_node("tools", ToolNode([route_to_billing]), destinations=("billing",))
    builder.add_node("billing", billing)
    builder.add_edge(START, "triage")
    builder.add_edge("triage", "tools")
    builder.add_edge("billing", END)
    return builder.compile(checkpointer=checkpointer)


def run_of(config: dict) -> Run:
    return Run.objects.get(operation_id=config["configurable"]["operation_id"])


def test_a_functional_pipeline_with_a_passing_verifier_is_healthy(team_contracts, drive):
    config = config_for("pipe")

    outcome = drive(pipeline(InMemorySaver()), ask(), config, verifier=PASS)

    run = run_of(config)
    assert outcome.status == "complete"
    assert not Handoff.objects.filter(run=run).exists()
    assert (run.final_status, run.verification["result"]) == ("complete", "pass")
    assert (run.health, run.health_reasons) == ("healthy", [])


def test_a_functional_pipeline_without_a_verifier_is_false_complete_not_no_handoff(team_contracts, drive):
    config = config_for("pipe-unproven")

    outcome = drive(pipeline(InMemorySaver()), ask(), config)

    run = run_of(config)
    assert outcome.status == "complete"
    assert (run.final_status, run.verification) == ("complete", None)
    assert run.health == "failing"
    assert [r["code"] for r in run.health_reasons] == ["run_false_complete"]
    assert "No handoff" not in str(run.health_reasons)


def test_a_functional_pipeline_whose_verifier_fails_is_false_complete(team_contracts):
    config = config_for("pipe-fail")

    observe(pipeline(InMemorySaver()), ask(), config, verifier=FAIL)

    run = run_of(config)
    assert run.verification["result"] == "fail"
    assert [r["text"] for r in run.health_reasons] == [
        "False complete: no handoff, and the outcome verification did not pass"
    ]


def test_a_root_tool_node_router_with_a_passing_verifier_is_healthy(team_contracts, drive):
    config = config_for("router")

    outcome = drive(tool_router(InMemorySaver()), ask(), config, verifier=PASS)

    run = run_of(config)
    assert outcome.status == "complete"
    assert not Handoff.objects.filter(run=run).exists()
    assert (run.verification["result"], run.health, run.health_reasons) == ("pass", "healthy", [])


def test_a_root_tool_node_router_without_a_verifier_is_false_complete(team_contracts):
    config = config_for("router-unproven")

    observe(tool_router(InMemorySaver()), ask(), config)

    run = run_of(config)
    assert run.health == "failing"
    assert [r["code"] for r in run.health_reasons] == ["run_false_complete"]


def test_the_pages_show_no_handoffs_as_a_neutral_fact_and_judge_the_outcome(team_contracts, client, person):
    client.force_login(person("olga", "viewer"))
    healthy, unproven = config_for("router-page"), config_for("pipe-page")
    observe(tool_router(InMemorySaver()), ask(), healthy, verifier=PASS)
    observe(pipeline(InMemorySaver()), ask(), unproven)

    good = client.get(reverse("sidewisp:run-detail", args=[run_of(healthy).pk])).content.decode()
    bad = client.get(reverse("sidewisp:run-detail", args=[run_of(unproven).pk])).content.decode()
    listed = client.get(reverse("sidewisp:runs")).content.decode()

    assert "No handoffs: this run made none, so it is judged by its outcome alone." in good
    assert 'data-run-outcome="pass"' in good and "No handoff recorded" not in good
    assert 'data-health="healthy"' in good and "data-reason=" not in good and "Safe next move" not in good
    assert 'data-health="failing"' in bad and 'data-reason="run_false_complete"' in bad
    assert 'data-run-outcome="unproven"' in bad and "False complete: no handoff" in bad
    assert "reopen the task; do not trust the final message" in bad
    assert listed.count("data-no-handoff>No handoffs<") == 2 and "no handoff recorded" not in listed
