"""One thread, a new operation id per user turn (issue 28): how chat apps are written.

Each turn is its own run, keyed by its operation id and linked to the thread; the run's page links the thread's
other runs. Through `observe`, the local evidence writer and the real run page.
"""

from __future__ import annotations

import logging
import re
import uuid

import pytest
from django.urls import reverse
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

from agents.host.scripted import Call, Say, Script, ScriptedChatModel
from receipts.models import Handoff, Run
from tests.agents import teams
from tests.agents.stored import observe

PASS = lambda op: ("stock_check", "pass", "v-1")  # noqa: E731
FAIL = lambda op: ("stock_check", "fail", "v-1")  # noqa: E731


def _front_policy(messages, tool_names):
    """Hand the user's new message to back; answer once back's turn is over."""
    return Call("transfer_to_back") if isinstance(messages[-1], HumanMessage) else Say("front done")


def chat_team():
    """front hands every user turn to back, on one checkpointed thread."""
    front = create_agent(
        ScriptedChatModel(policy=_front_policy),
        tools=[teams._transfer("transfer_to_back", "back")],
        middleware=[teams.observed()],
        name="front",
    )
    back = create_agent(
        ScriptedChatModel(policy=Script((Say("back done"),))),
        tools=[teams.check_stock],
        middleware=[teams.observed()],
        name="back",
    )
    builder = StateGraph(MessagesState)
    builder.add_node("front", front, destinations=("back",))
    builder.add_node("back", back)
    builder.add_edge(START, "front")
    return builder.compile(checkpointer=InMemorySaver())


def test_three_turns_on_one_thread_are_three_runs_each_with_its_verdict_and_links(
    team_contracts, viewer_client, caplog
):
    graph, thread = chat_team(), f"th-chat-{uuid.uuid4().hex[:8]}"
    turns = [(f"op-turn{i}-{uuid.uuid4().hex[:6]}", verifier) for i, verifier in enumerate((PASS, FAIL, PASS))]

    with caplog.at_level(logging.WARNING):
        outcomes = [
            observe(
                graph,
                {"messages": [HumanMessage(f"question {i}")]},
                {"configurable": {"thread_id": thread, "operation_id": op}, "recursion_limit": 50},
                verifier=verifier,
            )
            for i, (op, verifier) in enumerate(turns)
        ]

    # Nothing dropped: the later turns' run starts were refused on the unique thread id before (issue 28).
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text

    runs = [Run.objects.get(operation_id=op) for op, _ in turns]
    assert [run.thread_id for run in runs] == [thread] * 3
    assert len({run.pk for run in runs}) == 3
    # Each turn's handoff is its own run's, judged by its own outcome.
    verdicts = [list(Handoff.objects.filter(run=run).values_list("verdict", flat=True)) for run in runs]
    assert verdicts == [["HEALTHY"], ["FALSE_COMPLETE"], ["HEALTHY"]], (verdicts, [o.status for o in outcomes])
    for run in runs:
        body = viewer_client.get(reverse("sidewisp:run-detail", args=[run.pk])).content.decode()
        linked = re.findall(r'data-thread-run="([^"]+)"', body)
        assert linked == [other.operation_id for other in runs if other != run]
        for other in runs:
            if other != run:
                assert reverse("sidewisp:run-detail", args=[other.pk]) in body


@pytest.mark.django_db
def test_a_run_alone_on_its_thread_links_no_other_run(record_handoff, viewer_client):
    run = record_handoff("h-alone", "op-alone", "healthy").run

    body = viewer_client.get(reverse("sidewisp:run-detail", args=[run.pk])).content.decode()

    assert "data-thread-runs" not in body
