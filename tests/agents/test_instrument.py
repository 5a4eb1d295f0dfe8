"""Zero-code instrumentation: after `instrument()` the same code gives the same values and chunks, and is observed.

Each team is built and run twice by the same code, once plainly and once after `instrument()`; what
the caller gets back is compared with the ids that differ between any two runs masked (message ids,
checkpoint namespaces). The instrumented run's verdicts are compared with those of an explicit `observe`.
`create_agent` is imported at the top of this module, before any `instrument()`, as applications do.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable
from typing import Any

import langchain.agents
import pytest
from langchain.agents import create_agent
from langchain.agents import factory as agent_factory
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.pregel import Pregel
from langgraph.types import Command
from langgraph_swarm import create_handoff_tool, create_swarm
from sidewisp_agent import await_decision, instrument, uninstrument
from sidewisp_agent.failures import STREAM_CLOSED
from sidewisp_agent.middleware import SidewispMiddleware

from agents.host.scripted import Call, Say, Script, ScriptedChatModel
from receipts import actions
from receipts.models import ContractVersion, Handoff, Run
from tests.agents import shapes, teams
from tests.agents.stored import aobserve, observe
from tests.agents.test_team_shapes import routes
from tests.agents.test_third_party import PASS, _hitl_swarm, ask, config_for

# Message, checkpoint and object ids; and the scripted models' call ids, digests of a conversation that
# holds langgraph-supervisor's random call ids (two plain runs of a supervisor differ in them too);
# interrupt ids.
_RUN_IDS = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|0x[0-9a-f]+|call_[0-9a-f]{16}|\b[0-9a-f]{32}\b"
)


@pytest.fixture
def shape_contracts(transactional_db, contracts):
    ContractVersion.objects.create(version=shapes.ROUTE_VERSION, routes=shapes.ROUTES)


@pytest.fixture
def instrumented():
    """`instrument(durable=True, **keywords)` for the test (each run is read as it returns); always undone after."""
    yield lambda **keywords: instrument(durable=True, **keywords)
    uninstrument()


def stable(value: Any, *, parallel: bool = False) -> Any:
    """What a caller got, as text, without the ids that differ between any two runs.

    `parallel`: a list whose order two plain runs need not share either (a fan-out's two workers run at
    once, and stream in the order they finish), compared as the multiset of its items.
    """
    if parallel and isinstance(value, list):
        return sorted(stable(item) for item in value)
    return _RUN_IDS.sub("<id>", repr(value))


def solo(checkpointer: Any = None) -> Any:
    """One `create_agent` agent, no Sidewisp code: it looks something up, then answers."""
    model = ScriptedChatModel(policy=Script((Call("lookup", {"query": "q"}), Say("solo done"))))
    return create_agent(model, tools=[teams.lookup], name="solo", checkpointer=checkpointer)


def bare_swarm(checkpointer: Any = None) -> Any:
    """A langgraph-swarm team of two `create_agent` agents, no Sidewisp code: alice hands to bob."""
    alice = create_agent(
        ScriptedChatModel(policy=Script((Call("transfer_to_bob"), Say("alice done")))),
        tools=[create_handoff_tool(agent_name="bob")],
        name="alice",
    )
    bob = create_agent(
        ScriptedChatModel(policy=Script((Say("bob done"),))),
        tools=[create_handoff_tool(agent_name="alice")],
        name="bob",
    )
    return create_swarm([alice, bob], default_active_agent="alice").compile(checkpointer=checkpointer)


# (builder, the observe keywords its run needs); every builder takes a checkpointer.
TEAMS = [
    pytest.param(bare_swarm, {"route_version": shapes.ROUTE_VERSION}, id="bare_swarm"),
    pytest.param(shapes.swarm_in_app, {}, id="swarm_in_app"),
    pytest.param(shapes.hierarchical, {}, id="supervisor_of_supervisors"),
    pytest.param(shapes.nested_agents, {}, id="nested_agents"),
    pytest.param(shapes.fan_out, {}, id="fan_out"),  # streams its two workers as they finish
    pytest.param(shapes.forwarding_supervisor, {}, id="forward_message"),
    pytest.param(shapes.react_swarm, {"route_version": shapes.ROUTE_VERSION}, id="react_swarm"),
    pytest.param(solo, {}, id="single_agent"),
]
# How a caller reads a graph: (name, call) where call(graph, config) gives what the caller keeps.
READS: list[tuple[str, Callable[[Any, dict], Any]]] = [
    ("invoke", lambda graph, config: graph.invoke(ask(), config)),
    ("stream", lambda graph, config: list(graph.stream(ask(), config, stream_mode=["updates", "values"]))),
    (
        "stream_subgraphs",
        lambda graph, config: list(graph.stream(ask(), config, stream_mode="updates", subgraphs=True)),
    ),
    # Transfers announced by the middleware the user gave an agent, and none by the one instrument() gave.
    (
        "stream_custom",
        lambda graph, config: list(graph.stream(ask(), config, stream_mode=["custom", "updates"], subgraphs=True)),
    ),
    (
        "stream_custom_alone",
        lambda graph, config: list(graph.stream(ask(), config, stream_mode="custom", subgraphs=True)),
    ),
    (
        "stream_custom_v2",
        lambda graph, config: list(graph.stream(ask(), config, stream_mode="custom", subgraphs=True, version="v2")),
    ),
    ("ainvoke", lambda graph, config: asyncio.run(graph.ainvoke(ask(), config))),
    (
        "astream_messages",
        lambda graph, config: asyncio.run(_collected(graph.astream(ask(), config, stream_mode="messages"))),
    ),
    ("astream_events", lambda graph, config: asyncio.run(_events(graph, config))),
]


async def _collected(chunks: Any) -> list[Any]:
    return [chunk async for chunk in chunks]


async def _events(graph: Any, config: dict) -> list[tuple]:
    """Each event's kind, name and node, and the root graph's output."""
    events = [event async for event in graph.astream_events(ask(), config, version="v2")]
    named = [(event["event"], event["name"], event["metadata"].get("langgraph_node")) for event in events]
    return [*named, events[-1]["data"].get("output")]


def _read_both_ways(build: Callable[..., Any], keywords: dict, read: Callable, instrumented: Callable) -> tuple:
    """(plain, instrumented) of `read`, the same code each time; the instrumented run's config."""
    config = config_for("instrumented")
    plain = read(build(InMemorySaver()), config)
    instrumented(**keywords)
    return plain, read(build(InMemorySaver()), config), config


# --- what the caller gets is unchanged -------------------------------------------------------------


@pytest.mark.parametrize(("build", "keywords"), TEAMS)
@pytest.mark.parametrize(("how", "read"), READS, ids=[name for name, _ in READS])
def test_an_instrumented_graph_gives_its_caller_what_it_gives_uninstrumented(
    shape_contracts, instrumented, build, keywords, how, read
):
    plain, observed, config = _read_both_ways(build, keywords, read, instrumented)

    parallel = build is shapes.fan_out
    assert stable(observed, parallel=parallel) == stable(plain, parallel=parallel)
    assert Run.objects.get(operation_id=config["configurable"]["operation_id"]).status == Run.Status.COMPLETE


@pytest.mark.parametrize(("build", "keywords"), TEAMS)
def test_an_instrumented_run_has_the_verdicts_of_an_explicitly_observed_one(
    shape_contracts, instrumented, build, keywords
):
    explicit = config_for("explicit")
    observe(build(InMemorySaver()), ask(), explicit, verifier=PASS, **keywords)
    instrumented(verifier=PASS, **keywords)
    config = config_for("instrumented")

    build(InMemorySaver()).invoke(ask(), config)

    assert routes(config) == routes(explicit)
    assert all(verdict == "HEALTHY" for _, _, verdict in routes(config))
    assert (build is solo) == (routes(config) == [])


def test_an_approval_wait_of_an_instrumented_team_is_decided_on_the_dashboard(team_contracts, person, instrumented):
    owner = person("ops-lead", "approver")
    config = config_for("approval")
    plain_graph = _hitl_swarm(InMemorySaver())
    plain_paused = plain_graph.invoke(ask("buy a widget"), config)
    plain_done = plain_graph.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    instrumented(wait_policies=teams.WAIT_POLICIES, verifier=PASS)
    graph = _hitl_swarm(InMemorySaver())

    paused = graph.invoke(ask("buy a widget"), config)

    assert stable(paused) == stable(plain_paused)
    operation_id = config["configurable"]["operation_id"]
    handoff = Handoff.objects.get(run__operation_id=operation_id)
    assert (handoff.verdict, handoff.run.status) == ("WAITING_ON_APPROVAL", Run.Status.WAITING)
    token = handoff.wait_part["resume_token_id"]
    decided = actions.decide(user=owner, handoff_id=handoff.pk, kind="approve", token=token, key="k-1")
    assert decided.decision is not None, decided.message

    done = graph.invoke(await_decision(operation_id, timeout=5, poll=0.05), config)

    assert stable(done) == stable(plain_done)
    handoff.refresh_from_db()
    assert (handoff.wait_part["resolution"], handoff.run.status) == ("approved", Run.Status.COMPLETE)


# --- one run per top-level call ---------------------------------------------------------------------


def test_a_graph_observe_drives_after_instrument_is_observed_once(shape_contracts, instrumented):
    instrumented()
    config = config_for("once")

    outcome = asyncio.run(aobserve(shapes.swarm_in_app(InMemorySaver()), ask(), config, verifier=PASS))
    observe(shapes.hierarchical(InMemorySaver()), ask(), config_for("once-sync"), verifier=PASS)

    assert outcome.status == "complete"
    # The swarm inside the app, the teams inside the top supervisor: parts of their runs, not runs.
    assert Run.objects.count() == 2
    assert routes(config) == [("alice", "bob", "HEALTHY")]


def test_a_graph_invoked_inside_a_node_is_part_of_the_outer_run(shape_contracts, instrumented):
    inner = solo()
    app = StateGraph(MessagesState)
    app.add_node("ask_solo", lambda state: {"messages": inner.invoke(state)["messages"][-1:]})
    app.add_edge(START, "ask_solo")
    app.add_edge("ask_solo", END)
    instrumented()

    result = app.compile().invoke(ask(), config_for("outer"))

    assert result["messages"][-1].content == "solo done"
    assert Run.objects.count() == 1


@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_graph_the_caller_runs_between_two_chunks_is_a_run_of_its_own(shape_contracts, instrumented, how):
    instrumented()
    outer, between = config_for("outer"), config_for("between")
    graph, other = solo(InMemorySaver()), solo(InMemorySaver())

    if how == "sync":
        for _ in graph.stream(ask(), outer, stream_mode="updates"):
            other.invoke(ask(), between)
    else:

        async def read() -> None:
            async for _ in graph.astream(ask(), outer, stream_mode="updates"):
                await other.ainvoke(ask(), between)

        asyncio.run(read())

    runs = set(Run.objects.values_list("operation_id", flat=True))
    assert runs == {outer["configurable"]["operation_id"], between["configurable"]["operation_id"]}


@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_caller_who_stops_reading_early_leaves_no_run_running(shape_contracts, instrumented, how):
    instrumented()
    config = config_for("closed")
    graph = solo(InMemorySaver())

    if how == "sync":
        chunks = graph.stream(ask(), config, stream_mode="updates")
        first = next(chunks)
        chunks.close()
    else:

        async def first_of_stream() -> Any:
            chunks = graph.astream(ask(), config, stream_mode="updates")
            first = await anext(chunks)
            await chunks.aclose()
            return first

        first = asyncio.run(first_of_stream())

    assert list(first) == ["model"]
    run = Run.objects.get(operation_id=config["configurable"]["operation_id"])
    assert (run.status, run.error) == (Run.Status.FAILED, STREAM_CLOSED)


def test_a_call_without_a_thread_id_is_a_run_of_its_own(shape_contracts, instrumented):
    instrumented()
    graph = solo()

    first, second = graph.invoke(ask()), graph.invoke(ask())

    assert first["messages"][-1].content == second["messages"][-1].content == "solo done"
    operation_ids = list(Run.objects.values_list("operation_id", flat=True))
    assert len(set(operation_ids)) == 2
    assert all(operation_id.startswith("instrumented-") for operation_id in operation_ids)


def test_the_thread_id_a_graph_is_bound_to_names_its_run(shape_contracts, instrumented):
    instrumented()

    solo(InMemorySaver()).with_config(configurable={"thread_id": "bound-thread"}).invoke(ask())

    assert list(Run.objects.values_list("operation_id", flat=True)) == ["bound-thread"]


def test_what_the_graph_raises_reaches_the_caller_unchanged(shape_contracts, instrumented):
    def broken(state: MessagesState) -> dict:
        raise ValueError("the ledger is closed")

    builder = StateGraph(MessagesState)
    builder.add_node("broken", broken)
    builder.add_edge(START, "broken")
    config = config_for("raised")
    with pytest.raises(ValueError) as plain:
        builder.compile().invoke(ask(), config)
    instrumented()

    with pytest.raises(ValueError) as observed:
        builder.compile().invoke(ask(), config)

    assert str(observed.value) == str(plain.value) == "the ledger is closed"
    assert Run.objects.get(operation_id=config["configurable"]["operation_id"]).status == Run.Status.FAILED


# --- create_agent ------------------------------------------------------------------------------------


@pytest.fixture
def middleware_calls(monkeypatch):
    """How many model calls went through a SidewispMiddleware."""
    calls: list[str] = []
    original = SidewispMiddleware.wrap_model_call

    def counted(self: SidewispMiddleware, request: Any, handler: Any) -> Any:
        calls.append("model")
        return original(self, request, handler)

    monkeypatch.setattr(SidewispMiddleware, "wrap_model_call", counted)
    return calls


def test_an_agent_built_after_instrument_carries_the_middleware_once(shape_contracts, instrumented, middleware_calls):
    before = solo()
    instrumented()
    bare, own = solo(), create_agent(ScriptedChatModel(policy=Script((Say("hi"),))), middleware=[SidewispMiddleware()])

    bare.invoke(ask(), config_for("bare"))
    assert middleware_calls == ["model", "model"]  # the lookup, then the answer
    own.invoke(ask(), config_for("own"))  # one middleware: create_agent refuses two of the same name
    assert middleware_calls == ["model"] * 3
    # An agent built before is as it was built, and its run is observed all the same.
    before.invoke(ask(), config_for("before"))
    assert middleware_calls == ["model"] * 3
    assert Run.objects.count() == 3


def test_uninstrument_puts_back_the_very_same_functions(shape_contracts, instrumented, middleware_calls):
    stream, astream = Pregel.__dict__["stream"], Pregel.__dict__["astream"]
    create, code, signature = agent_factory.create_agent, create_agent.__code__, inspect.signature(create_agent)

    instrumented()
    patched = Pregel.__dict__["stream"]
    instrument()  # a second call changes nothing
    assert Pregel.__dict__["stream"] is patched is not stream
    assert inspect.signature(create_agent) == signature
    uninstrument()
    uninstrument()

    assert (Pregel.__dict__["stream"], Pregel.__dict__["astream"]) == (stream, astream)
    assert langchain.agents.create_agent is agent_factory.create_agent is create is create_agent
    assert create_agent.__code__ is code
    assert inspect.signature(create_agent) == signature
    solo().invoke(ask(), config_for("after"))
    assert middleware_calls == []
    assert not Run.objects.exists()


def test_instrumenting_again_after_uninstrument_observes_again(shape_contracts, instrumented):
    instrumented()
    uninstrument()
    instrumented()
    config = config_for("again")

    reply = solo(InMemorySaver()).invoke(ask(), config)

    assert isinstance(reply["messages"][-1], AIMessage)
    assert Run.objects.filter(operation_id=config["configurable"]["operation_id"]).exists()
