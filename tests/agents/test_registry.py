"""The graph registry (SIDEWISP_GRAPHS): entries in the langgraph.json convention, built for a run."""

from __future__ import annotations

import json
import textwrap

import pytest
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from langgraph.checkpoint.memory import InMemorySaver

from agents.host import registry
from agents.host.registry import Host, HostedGraph, load

GRAPHS_PY = textwrap.dedent(
    """
    from langchain.agents import create_agent
    from langgraph.graph import START, StateGraph
    from typing_extensions import TypedDict

    from agents.host.scripted import Say, Script, chat_model

    agent = create_agent(chat_model(Script((Say("Hello."),))), tools=[], name="greeter")


    class State(TypedDict):
        count: int


    def _bump(state):
        return {"count": state.get("count", 0) + 1}


    builder = StateGraph(State)
    builder.add_node("bump", _bump)
    builder.add_edge(START, "bump")
    counter = builder.compile()

    CALLS = []


    def make(config, *, checkpointer, host):
        CALLS.append((config, checkpointer, host))
        return counter.copy(update={"checkpointer": checkpointer})


    def make_with_config_only(config):
        CALLS.append((config,))
        return counter


    def make_described(config, *, checkpointer):
        return HostedGraph(counter.copy(update={"checkpointer": checkpointer}), verifier=lambda op: None)


    def always_passes(operation_id):
        return True


    NOT_A_GRAPH = 3
    """
)


@pytest.fixture
def graphs_file(tmp_path):
    (tmp_path / "graphs").mkdir()
    path = tmp_path / "graphs" / "mine.py"
    path.write_text("from agents.host.registry import HostedGraph\n" + GRAPHS_PY)
    return path


def config(thread: str = "th-1") -> dict:
    return {"configurable": {"thread_id": thread, "operation_id": f"op-{thread}"}}


def test_a_create_agent_graph_given_directly_gets_sidewisps_checkpointer(graphs_file, tmp_path) -> None:
    entry = load({"greeter": "graphs/mine.py:agent"}, base_dir=tmp_path)["greeter"]
    saver = InMemorySaver()

    hosted = entry.build(config(), checkpointer=saver, host=Host())
    hosted.graph.invoke({"messages": [{"role": "user", "content": "hi"}]}, config())

    assert hosted.graph.checkpointer is saver
    assert hosted.graph.get_state(config()).values["messages"][-1].content == "Hello."


def test_a_state_graph_given_directly_keeps_its_state_in_the_checkpointer(graphs_file, tmp_path) -> None:
    entry = load({"counter": "graphs/mine.py:counter"}, base_dir=tmp_path)["counter"]
    saver = InMemorySaver()

    entry.build(config(), checkpointer=saver, host=Host()).graph.invoke({"count": 1}, config())

    assert entry.build(config(), checkpointer=saver, host=Host()).graph.get_state(config()).values == {"count": 2}


def test_a_factory_receives_the_config_the_checkpointer_and_the_host(graphs_file, tmp_path) -> None:
    entry = load({"counter": "graphs/mine.py:make"}, base_dir=tmp_path)["counter"]
    saver, host = InMemorySaver(), Host(dry_run=True)

    hosted = entry.build(config(), checkpointer=saver, host=host)

    assert entry.target.__globals__["CALLS"][-1] == (config(), saver, host)
    assert hosted.graph.checkpointer is saver


def test_a_factory_that_takes_only_the_config_gets_only_the_config(graphs_file, tmp_path) -> None:
    entry = load({"counter": "graphs/mine.py:make_with_config_only"}, base_dir=tmp_path)["counter"]

    entry.build(config(), checkpointer=InMemorySaver(), host=Host())

    assert entry.target.__globals__["CALLS"][-1] == (config(),)


def test_a_module_reference_is_imported_by_name() -> None:
    entry = load({"desk": "tests.agents.hosted_graph:make_graph"})["desk"]

    assert entry.target.__name__ == "make_graph"


def test_an_object_entry_registers_a_verifier_and_wait_policies(graphs_file, tmp_path) -> None:
    spec = {
        "graph": "graphs/mine.py:make",
        "verifier": "graphs/mine.py:always_passes",
        "wait_policies": {"pay": {"owner": "ops-lead", "reason": "irreversible_choice", "deadline_minutes": 30}},
    }
    entry = load({"counter": spec}, base_dir=tmp_path)["counter"]

    hosted = entry.build(config(), checkpointer=InMemorySaver(), host=Host())

    assert hosted.verifier("op-1")[:2] == ("always_passes", "pass")
    assert hosted.wait_policies["pay"].owner == "ops-lead"
    assert hosted.wait_policies["pay"].deadline_minutes == 30


def test_a_factory_may_return_a_hosted_graph_with_its_own_verifier(graphs_file, tmp_path) -> None:
    entry = load({"counter": "graphs/mine.py:make_described"}, base_dir=tmp_path)["counter"]

    hosted = entry.build(config(), checkpointer=InMemorySaver(), host=Host())

    assert isinstance(hosted, HostedGraph)
    assert hosted.verifier is not None


def test_a_langgraph_json_file_resolves_paths_relative_to_itself(graphs_file, tmp_path) -> None:
    (tmp_path / "graphs" / "langgraph.json").write_text(json.dumps({"graphs": {"counter": "./mine.py:counter"}}))

    entries = load(str(tmp_path / "graphs" / "langgraph.json"))

    assert list(entries) == ["counter"]


def test_without_configuration_the_demo_is_registered() -> None:
    assert list(load("")) == ["demo"]


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ("graphs/mine.py", "is not"),
        ("graphs/missing.py:make", "no such file"),
        ("no_such_package.graphs:make", "no module"),
        ("graphs/mine.py:nothing_here", "has no attribute"),
        ("graphs/mine.py:NOT_A_GRAPH", "neither a compiled graph nor a factory"),
        ({"graph": "graphs/mine.py:make", "checkpointer": "x"}, "unknown key"),
        ({"graph": "graphs/mine.py:make", "verifier": "graphs/mine.py:NOT_A_GRAPH"}, "not callable"),
        ({"graph": "graphs/mine.py:make", "wait_policies": {"pay": {"deadline_minutes": 0}}}, "deadline_minutes"),
        (42, "must be"),
    ],
)
def test_a_bad_entry_names_itself(graphs_file, tmp_path, spec, complaint) -> None:
    with pytest.raises(ImproperlyConfigured) as failure:
        load({"broken_one": spec}, base_dir=tmp_path)

    assert "'broken_one'" in str(failure.value)
    assert complaint in str(failure.value)


def test_a_bad_setting_stops_the_process_at_start_up(settings) -> None:
    settings.SIDEWISP_GRAPHS = json.dumps({"broken_one": "no_such_package.graphs:make"})

    with pytest.raises(ImproperlyConfigured, match="broken_one"):
        apps.get_app_config("agents").ready()


def test_a_setting_that_is_not_json_says_so(settings) -> None:
    settings.SIDEWISP_GRAPHS = '{"demo": '

    with pytest.raises(ImproperlyConfigured, match="not valid JSON"):
        registry.graphs()
