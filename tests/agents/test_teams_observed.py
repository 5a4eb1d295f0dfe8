"""An observed run names its graph (issue 22 §2): the team that owns the graph name owns the run."""

from __future__ import annotations

import pytest
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from receipts.models import Run, Team, TeamGraph
from receipts.org import teams
from tests.agents.stored import observe


class State(TypedDict):
    n: int


def _graph():
    builder = StateGraph(State)
    builder.add_node("step", lambda state: {"n": state["n"] + 1})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile()


@pytest.mark.django_db(transaction=True)
def test_an_observed_run_named_by_its_graph_belongs_to_that_graphs_team(person):
    alpha = Team.objects.create(slug="alpha", name="Alpha")
    TeamGraph.objects.create(team=alpha, graph="shop-assistant")
    ann, bo = person("ann", "viewer"), person("bo", "viewer")
    teams.add_member(ann, alpha)
    teams.add_member(bo, Team.objects.create(slug="beta", name="Beta"))

    config = {"configurable": {"thread_id": "t-obs", "operation_id": "op-obs", "graph_name": "shop-assistant"}}
    observe(_graph(), {"n": 1}, config)

    run = Run.objects.get(operation_id="op-obs")
    assert (run.mode, run.graph) == (Run.Mode.OBSERVED, "shop-assistant")
    assert teams.owner_of(run) == alpha
    assert teams.visible_runs(ann).filter(pk=run.pk).exists()
    assert not teams.visible_runs(bo).filter(pk=run.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_a_graph_name_that_is_not_a_name_is_not_recorded(person):
    config = {"configurable": {"thread_id": "t-bad", "operation_id": "op-bad", "graph_name": "x\u0000y"}}
    observe(_graph(), {"n": 1}, config)

    assert Run.objects.get(operation_id="op-bad").graph == ""
