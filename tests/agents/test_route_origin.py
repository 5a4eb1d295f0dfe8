"""A rejected route's reason names the route version it used and where the version came from (issue 28 §8).

langgraph-supervisor's supervisor takes no middleware: the observer records its transfers itself, with
observe(route_version=) when given, else the default routes/1, which used to be silent.
"""

from __future__ import annotations

import pytest
from langchain.agents import create_agent
from langgraph.checkpoint.memory import InMemorySaver
from langgraph_supervisor import create_supervisor

from agents.host.scripted import Say, Script, ScriptedChatModel
from receipts.models import Handoff
from tests.agents import teams
from tests.agents.stored import observe

pytestmark = pytest.mark.django_db(transaction=True)


def _supervisor_without_middleware():
    workers = [
        create_agent(ScriptedChatModel(policy=Script((Say(f"{w} done"),))), tools=[], name=w) for w in ("w1", "w2")
    ]
    model = ScriptedChatModel(policy=teams._sequential)
    return create_supervisor(workers, model=model).compile(checkpointer=InMemorySaver())


def _first_reason(operation_id: str, **observing) -> str:
    config = {"configurable": {"thread_id": operation_id, "operation_id": operation_id}}
    observe(_supervisor_without_middleware(), {"messages": [{"role": "user", "content": "go"}]}, config, **observing)
    handoff = Handoff.objects.filter(run__operation_id=operation_id).order_by("created_at", "pk").first()
    assert handoff.verdict == "ROUTE_REJECTED"
    return handoff.reason


def test_a_transfer_no_middleware_announced_says_it_fell_back_to_the_default_version(contracts):
    # routes/1 is the demo's version (migrated): it does not declare supervisor → w1.
    assert _first_reason("op-default") == (
        'created.receiver is not declared for created.sender in route version "routes/1" (the default: '
        "neither SidewispMiddleware nor observe was given a route_version)"
    )


def test_a_transfer_no_middleware_announced_names_the_version_observe_was_given(contracts):
    assert _first_reason("op-given", route_version="sup/9") == (
        'created.route_version "sup/9" (given as observe(route_version=...)) is not a known contract version'
    )
