"""Graphs built once per worker process (issue 20 §5): a factory's team is reused per pinned limits version."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import create_run
from agents.host import registry, runner
from agents.host.checkpoints import checkpointer
from agents.models import LimitsVersion
from receipts.models import Handoff, MiddlewareReport, Receipt, Run

COUNTED = "tests/agents/counted_graph.py"


@pytest.fixture
def factory_calls(settings, transactional_db):
    settings.SIDEWISP_GRAPHS = {"demo": f"{COUNTED}:make", "per_run": f"{COUNTED}:make_for_the_run"}
    install_team_contracts()
    calls = registry.entry("demo").target.__globals__["CALLS"]
    calls.clear()
    return calls


def _started(scenario: str, count: int, *, graph: str = "demo") -> list[Run]:
    runs = [create_run(scenario) for _ in range(count)]
    for run in runs:
        Run.objects.filter(pk=run.pk).update(graph=graph)
        runner.start_run(Run.objects.get(pk=run.pk))
    return list(Run.objects.filter(pk__in=[run.pk for run in runs]).order_by("pk"))


def _human_messages(run: Run) -> list[str]:
    config = runner.graph_config(run)
    with checkpointer() as saver:
        hosted = registry.entry(run.graph).build(config, checkpointer=saver, host=registry.Host())
        return [m.content for m in hosted.graph.get_state(config).values["messages"] if m.type == "human"]


def _call_limit_hit(run: Run) -> bool:
    return MiddlewareReport.objects.filter(run=run, kind=MiddlewareReport.Kind.CALL_LIMIT, agent="triage").exists()


def test_three_runs_on_one_limits_version_build_the_team_once_and_each_keeps_its_own_thread(factory_calls):
    runs = _started("healthy_purchase", 3)

    assert len(factory_calls) == 1
    assert [run.status for run in runs] == ["complete"] * 3
    assert len({run.thread_id for run in runs}) == 3
    for run in runs:
        assert list(Handoff.objects.filter(run=run).values_list("verdict", flat=True)) == ["HEALTHY"]
        assert Receipt.objects.filter(handoff__run=run).exists()
        # Each thread's checkpoint holds its own run's conversation, not the others' as well.
        assert _human_messages(run) == ["I would like two widgets, please."]


def test_a_run_pinned_to_a_new_limits_version_builds_the_team_again_and_gets_the_new_limits(factory_calls):
    (before,) = _started("healthy_support", 1)
    document = LimitsVersion.current().document
    LimitsVersion.save_new({**document, "agents": {"triage": {"tool_call_limit": {"run_limit": 1}}}})

    after = _started("healthy_support", 2)

    assert len(factory_calls) == 2
    assert not _call_limit_hit(before)
    assert [_call_limit_hit(run) for run in after] == [True, True]


def test_each_scenario_and_a_dry_run_get_a_team_of_their_own(factory_calls):
    _started("healthy_purchase", 2)
    _started("healthy_support", 2)
    dry = create_run("healthy_purchase", dry_run=True)
    runner.start_run(dry)

    assert [call["configurable"].get("scenario") for call in factory_calls] == [
        "healthy_purchase",
        "healthy_support",
        "healthy_purchase",
    ]


def test_a_factory_that_reads_its_run_is_built_for_every_run(factory_calls):
    runs = _started("healthy_purchase", 2, graph="per_run")

    assert factory_calls == [{"operation_id": run.operation_id} for run in runs]
    assert [run.status for run in runs] == ["complete", "complete"]


def test_a_graph_whose_subgraph_keeps_the_runs_checkpointer_is_built_for_every_run(tmp_path) -> None:
    (tmp_path / "nested.py").write_text(NESTED_PY)
    entry = registry.load({"nested": "nested.py:make"}, base_dir=tmp_path)["nested"]
    version = LimitsVersion(number=1, document={})
    config = {"configurable": {"thread_id": "th-1"}}

    for _ in range(2):
        entry.build(config, checkpointer=InMemorySaver(), host=registry.Host(limits_version=version))

    assert len(entry.target.__globals__["CALLS"]) == 2


NESTED_PY = """
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

CALLS = []


class State(TypedDict):
    count: int


def make(config, *, checkpointer):
    CALLS.append(config)
    inner = StateGraph(State)
    inner.add_node("bump", lambda state: {"count": state.get("count", 0) + 1})
    inner.add_edge(START, "bump")
    outer = StateGraph(State)
    outer.add_node("inner", inner.compile(checkpointer=checkpointer))
    outer.add_edge(START, "inner")
    return outer.compile(checkpointer=checkpointer)
"""
