"""The observed graph behaves as it would unobserved: its exceptions reach the caller, its caller's own
stream modes stream, and a graph streamed outside `observe` says on its run what is missing."""

from __future__ import annotations

import asyncio
from html import unescape

import pytest
from django.urls import reverse
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from sidewisp_agent.failures import STREAM_CLOSED

from agents.host.scripted import Call, Say
from agents.observe import writer
from receipts.models import Handoff, MiddlewareReport, Receipt, Run
from sidewisp.pages import labels
from tests.agents import teams
from tests.agents.stored import aobserve, observe
from tests.agents.test_third_party import config_for

PASS = lambda op: ("stock_check", "pass", "v-1")  # noqa: E731
GATEWAY_DOWN = "payment gateway down"
Kind = MiddlewareReport.Kind


def ask() -> dict:
    return {"messages": [HumanMessage("hello")]}


def run_of(config: dict) -> Run:
    return Run.objects.get(operation_id=config["configurable"]["operation_id"])


def verdicts(config: dict) -> list[str]:
    handoffs = Handoff.objects.filter(run__operation_id=config["configurable"]["operation_id"])
    return [h.verdict for h in handoffs.order_by("created_at", "pk")]


def reports(run: Run, kind: str) -> list[dict]:
    return [r.detail for r in MiddlewareReport.objects.filter(run=run, kind=kind)]


def failing_swarm(error: BaseException):
    """alice hands to bob, whose `charge_card` tool raises `error`."""

    @tool
    def charge_card(amount: int) -> str:
        """Charge the customer's card."""
        raise error

    steps = (Call("charge_card", {"amount": 3}), Say("charged"))
    return teams.swarm(InMemorySaver(), bob_steps=steps, bob_tools=[charge_card])


def failing_node_graph():
    def settle(state):
        msg = "ledger closed for account 4411"
        raise ValueError(msg)

    builder = StateGraph(MessagesState)
    builder.add_node("settle", settle)
    builder.add_edge(START, "settle")
    builder.add_edge("settle", END)
    return builder.compile(checkpointer=InMemorySaver())


def messages_of(chunks) -> list[tuple[str, object, str]]:
    """(message type, content, node) of `messages` chunks: what a chat UI shows."""
    return [(type(message).__name__, message.content, meta["langgraph_node"]) for message, meta in chunks]


# --- exceptions -----------------------------------------------------------------------


def test_observed_invoke_raises_what_unobserved_invoke_raises(team_contracts, drive):
    unobserved = RuntimeError(GATEWAY_DOWN)
    with pytest.raises(RuntimeError) as plain:
        failing_swarm(unobserved).invoke(ask(), config_for("plain"))
    error = RuntimeError(GATEWAY_DOWN)
    config = config_for("raises")

    with pytest.raises(RuntimeError) as observed:
        drive(failing_swarm(error), ask(), config)

    assert plain.value is unobserved
    assert observed.value is error
    assert str(observed.value) == str(plain.value) == GATEWAY_DOWN


def test_a_run_that_raised_is_failed_with_the_class_and_where_it_was_raised(team_contracts, drive):
    config = config_for("where")

    with pytest.raises(RuntimeError):
        drive(failing_swarm(RuntimeError(GATEWAY_DOWN)), ask(), config)

    run = run_of(config)
    assert (run.status, run.error) == (Run.Status.FAILED, "RuntimeError")
    assert reports(run, Kind.GRAPH_ERROR) == [{"error": "RuntimeError", "node": "bob › tools", "tool": "charge_card"}]  # noqa: RUF001
    # The message stays with the caller: it can carry the tool's arguments.
    stored = [str(r.detail) for r in run.reports.all()] + [str(p) for p in Receipt.objects.values_list("payload")]
    assert not any(GATEWAY_DOWN in text for text in stored)


def test_the_run_page_names_the_exception_and_its_node_and_tool_only(team_contracts, viewer_client):
    config = config_for("page")
    with pytest.raises(RuntimeError):
        observe(failing_swarm(RuntimeError(GATEWAY_DOWN)), ask(), config)

    page = unescape(viewer_client.get(reverse("sidewisp:run-detail", args=[run_of(config).pk])).content.decode())

    assert "The graph raised RuntimeError in node bob › tools, tool charge_card" in page  # noqa: RUF001
    assert GATEWAY_DOWN not in page


def test_a_node_that_raises_is_named_without_a_tool(team_contracts, drive):
    config = config_for("node")

    with pytest.raises(ValueError, match="ledger closed"):
        drive(failing_node_graph(), ask(), config)

    run = run_of(config)
    assert (run.status, run.error) == (Run.Status.FAILED, "ValueError")
    assert reports(run, Kind.GRAPH_ERROR) == [{"error": "ValueError", "node": "settle"}]


def test_a_caller_who_closes_the_stream_early_leaves_no_run_running(team_contracts):
    config = config_for("closed")
    chunks = observe.stream(teams.swarm(InMemorySaver()), ask(), config, stream_mode="updates", durable=True)

    next(chunks)
    chunks.close()

    run = run_of(config)
    assert (run.status, run.error) == (Run.Status.FAILED, STREAM_CLOSED)
    assert reports(run, Kind.GRAPH_ERROR) == []


# --- the caller's own stream modes ------------------------------------------------------


def test_observe_stream_gives_the_messages_graph_stream_gives_and_records_the_run(team_contracts):
    unobserved = list(teams.swarm(InMemorySaver()).stream(ask(), config_for("plain"), stream_mode="messages"))
    config = config_for("messages")

    chunks = observe.stream(
        teams.swarm(InMemorySaver()), ask(), config, stream_mode="messages", verifier=PASS, durable=True
    )
    observed = list(chunks)

    assert messages_of(observed) == messages_of(unobserved)
    assert messages_of(observed) == [("AIMessage", "bob done", "bob")]  # a swarm's answer, from its root node
    assert chunks.outcome.status == "complete"
    assert verdicts(config) == ["HEALTHY"]
    assert reports(run_of(config), Kind.UNOBSERVED_STREAM) == []


def test_observe_stream_with_subgraphs_gives_each_agents_tokens_with_their_namespace(team_contracts):
    plain = teams.swarm(InMemorySaver()).stream(ask(), config_for("plain"), stream_mode="messages", subgraphs=True)
    unobserved = list(plain)
    config = config_for("tokens")

    chunks = observe.stream(
        teams.swarm(InMemorySaver()), ask(), config, stream_mode="messages", subgraphs=True, verifier=PASS, durable=True
    )
    observed = list(chunks)

    shape = lambda chunks: [(len(ns), *messages_of([chunk])[0]) for ns, chunk in chunks]  # noqa: E731
    assert shape(observed) == shape(unobserved)
    assert ("AIMessageChunk", "bob done", "model") in [row[1:] for row in shape(observed)]
    assert verdicts(config) == ["HEALTHY"]


def test_a_list_of_modes_gives_mode_and_chunk_pairs_of_those_modes_only(team_contracts):
    modes = ["updates", "messages"]
    unobserved = list(teams.swarm(InMemorySaver()).stream(ask(), config_for("plain"), stream_mode=modes))
    config = config_for("pairs")

    observed = list(
        observe.stream(teams.swarm(InMemorySaver()), ask(), config, stream_mode=modes, verifier=PASS, durable=True)
    )

    shape = lambda chunks: [(mode, sorted(c) if mode == "updates" else messages_of([c])) for mode, c in chunks]  # noqa: E731
    assert shape(observed) == shape(unobserved)
    assert {mode for mode, _ in observed} == {"updates", "messages"}
    assert verdicts(config) == ["HEALTHY"]


def test_a_list_of_modes_with_subgraphs_gives_namespace_mode_and_chunk(team_contracts):
    modes = ["updates", "values"]
    plain = teams.swarm(InMemorySaver()).stream(ask(), config_for("plain"), stream_mode=modes, subgraphs=True)
    unobserved = list(plain)

    observed = list(
        observe.stream(teams.swarm(InMemorySaver()), ask(), config_for("triples"), stream_mode=modes, subgraphs=True)
    )

    shape = lambda chunks: [(tuple(s.split(":")[0] for s in ns), mode, sorted(c)) for ns, mode, c in chunks]  # noqa: E731
    assert shape(observed) == shape(unobserved)
    assert (("bob",), "updates", ["model"]) in shape(observed)


def test_version_v2_gives_stream_parts(team_contracts):
    modes = ["values", "updates"]
    plain = teams.swarm(InMemorySaver()).stream(ask(), config_for("plain"), stream_mode=modes, version="v2")
    unobserved = list(plain)

    observed = list(
        observe.stream(teams.swarm(InMemorySaver()), ask(), config_for("v2"), stream_mode=modes, version="v2")
    )

    shape = lambda parts: [(p["type"], p["ns"], sorted(p["data"]), "interrupts" in p) for p in parts]  # noqa: E731
    assert shape(observed) == shape(unobserved)


def test_observe_itself_returns_the_outcome_the_stream_ends_with(team_contracts):
    config = config_for("returns")

    def consume():
        outcome = yield from observe.stream(teams.swarm(InMemorySaver()), ask(), config, verifier=PASS)
        return outcome

    gen = consume()
    with pytest.raises(StopIteration) as stop:
        while True:
            next(gen)

    assert stop.value.value.status == "complete"
    assert observe(teams.swarm(InMemorySaver()), ask(), config_for("plain"), verifier=PASS).status == "complete"


def test_aobserve_astream_gives_the_messages_graph_astream_gives(team_contracts):
    async def both():
        plain = teams.swarm(InMemorySaver()).astream(ask(), config_for("plain"), stream_mode="messages")
        unobserved = [chunk async for chunk in plain]
        chunks = aobserve.astream(
            teams.swarm(InMemorySaver()), ask(), config, stream_mode="messages", verifier=PASS, durable=True
        )
        return unobserved, [chunk async for chunk in chunks], chunks.outcome

    config = config_for("amessages")
    unobserved, observed, outcome = asyncio.run(both())

    assert messages_of(observed) == messages_of(unobserved) == [("AIMessage", "bob done", "bob")]
    assert outcome.status == "complete"
    assert verdicts(config) == ["HEALTHY"]


def test_aobserve_astream_events_gives_the_events_graph_astream_events_gives(team_contracts):
    async def both():
        plain = teams.swarm(InMemorySaver()).astream_events(ask(), config_for("plain"), version="v2")
        unobserved = [event async for event in plain]
        events = aobserve.astream_events(
            teams.swarm(InMemorySaver()), ask(), config, version="v2", verifier=PASS, durable=True
        )
        return unobserved, [event async for event in events], events.outcome

    config = config_for("events")
    unobserved, observed, outcome = asyncio.run(both())

    shape = lambda events: sorted((e["event"], e["name"]) for e in events)  # noqa: E731
    assert shape(observed) == shape(unobserved)
    tokens = [e["data"]["chunk"].content for e in observed if e["event"] == "on_chat_model_stream"]
    assert "bob done" in tokens
    assert (observed[0]["event"], observed[0]["name"]) == ("on_chain_start", "LangGraph")
    assert outcome.status == "complete"
    assert verdicts(config) == ["HEALTHY"]


# --- streamed outside observe ------------------------------------------------------------


def test_a_graph_streamed_outside_observe_says_on_its_run_what_is_missing(team_contracts, viewer_client):
    config = config_for("outside")

    list(teams.supervisor(InMemorySaver()).stream(ask(), config, stream_mode="updates"))
    writer.flush()

    run = run_of(config)
    assert Handoff.objects.filter(run=run).count() == 2  # what the middleware sees is recorded
    assert MiddlewareReport.objects.filter(run=run, kind=Kind.UNOBSERVED_STREAM).count() == 1  # once a run
    page = unescape(viewer_client.get(reverse("sidewisp:run-detail", args=[run.pk])).content.decode())
    assert "This run was not driven through observe" in page
    assert labels.REPORTS["unobserved_stream"] in page
