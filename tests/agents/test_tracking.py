"""The tracker on shapes the third-party team tests do not build: hand-written nodes that return `Command`,
a Command to END only, and what a run says about an agent observed without SidewispMiddleware."""

from __future__ import annotations

import uuid

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command
from sidewisp_agent.transfers import scope_name, transfer_gotos

from receipts.models import ContractVersion, Handoff, MiddlewareReport
from tests.agents import teams
from tests.agents.stored import observe

ROUTE_VERSION = "nodes/1"
PASS = lambda op: ("check", "pass", "v-1")  # noqa: E731


@pytest.fixture
def node_contracts(transactional_db, contracts):
    ContractVersion.objects.create(version=ROUTE_VERSION, routes={"agent_a": {"agent_b": []}})
    ContractVersion.objects.create(version=teams.ROUTE_VERSION, routes=teams.ROUTES)


def network(*, tool_message: bool = True, goto: str = "agent_b", checkpointer=None):
    """The LangGraph docs' network pattern: agent_a answers its own transfer call and returns Command(goto=...)."""

    def agent_a(state: MessagesState) -> Command:
        call = {"name": "transfer_to_agent_b", "args": {}, "id": "call_net_1", "type": "tool_call"}
        turn = [AIMessage("", tool_calls=[call], name="agent_a")]
        if tool_message:
            turn.append(ToolMessage("Transferred", tool_call_id="call_net_1"))
        return Command(goto=goto, update={"messages": turn})

    builder = StateGraph(MessagesState)
    builder.add_node("agent_a", agent_a, destinations=("agent_b",))
    builder.add_node("agent_b", lambda state: {"messages": [AIMessage("b done", name="agent_b")]})
    builder.add_edge(START, "agent_a")
    builder.add_edge("agent_b", END)
    return builder.compile(checkpointer=checkpointer)


def observed(graph, route_version: str = ROUTE_VERSION) -> str:
    operation_id = f"op-net-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": operation_id}, "recursion_limit": 30}
    observe(graph, {"messages": [HumanMessage("hello")]}, config, verifier=PASS, route_version=route_version)
    return operation_id


def rows(operation_id: str) -> list[tuple[str, str, str]]:
    return [(h.sender, h.receiver, h.verdict) for h in Handoff.objects.filter(run__operation_id=operation_id)]


@pytest.mark.parametrize("checkpointer", [InMemorySaver, lambda: None], ids=["checkpointed", "no checkpointer"])
def test_a_node_that_answers_its_own_transfer_call_is_a_healthy_handoff(node_contracts, checkpointer):
    operation_id = observed(network(checkpointer=checkpointer()))

    assert rows(operation_id) == [("agent_a", "agent_b", "HEALTHY")]


def test_a_node_transfer_without_its_tool_message_is_not_taken_for_a_handoff(node_contracts):
    # Without the ToolMessage the call may be a ToolNode's to answer later: nothing proves a transfer.
    operation_id = observed(network(tool_message=False, checkpointer=InMemorySaver()))

    assert rows(operation_id) == []


def network_in_subgraph(*, tool_message: bool = True, depth: int = 0, checkpointer=None):
    """The same agent_a as `network`, its node inside a subgraph: it returns `Command(graph=PARENT, goto=...)`.

    `depth` wraps the whole network in that many more subgraph levels (`dept`, `dept/dept`...).
    """

    def call_model(state: MessagesState) -> Command:
        call = {"name": "transfer_to_agent_b", "args": {}, "id": "call_sub_1", "type": "tool_call"}
        turn = [AIMessage("", tool_calls=[call], name="agent_a")]
        if tool_message:
            turn.append(ToolMessage("Transferred", tool_call_id="call_sub_1"))
        return Command(goto="agent_b", update={"messages": turn}, graph=Command.PARENT)

    agent_a = StateGraph(MessagesState)
    agent_a.add_node("call_model", call_model)
    agent_a.add_edge(START, "call_model")
    graph = StateGraph(MessagesState)
    graph.add_node("agent_a", agent_a.compile(), destinations=("agent_b",))
    graph.add_node("agent_b", lambda state: {"messages": [AIMessage("b done", name="agent_b")]})
    graph.add_edge(START, "agent_a")
    graph.add_edge("agent_b", END)
    for _ in range(depth):
        outer = StateGraph(MessagesState)
        outer.add_node("dept", graph.compile())
        outer.add_edge(START, "dept")
        outer.add_edge("dept", END)
        graph = outer
    return graph.compile(checkpointer=checkpointer)


def scoped_rows(operation_id: str) -> list[tuple[str, str, str, str]]:
    handoffs = Handoff.objects.filter(run__operation_id=operation_id)
    return [(h.sender, h.receiver, h.reduced_part["graph_scope"], h.verdict) for h in handoffs]


SUBGRAPH_NODE_CASES = [
    pytest.param(0, InMemorySaver, "parent", id="in the root's subgraph"),
    pytest.param(0, lambda: None, "parent", id="no checkpointer"),
    pytest.param(2, InMemorySaver, "dept/dept", id="two levels down"),
]


@pytest.mark.parametrize(("depth", "checkpointer", "scope"), SUBGRAPH_NODE_CASES)
def test_a_node_inside_a_subgraph_that_answers_its_own_transfer_call_is_a_healthy_handoff(
    node_contracts, depth, checkpointer, scope
):
    operation_id = observed(network_in_subgraph(depth=depth, checkpointer=checkpointer()))

    assert scoped_rows(operation_id) == [("agent_a", "agent_b", scope, "HEALTHY")]
    created = Handoff.objects.get(run__operation_id=operation_id).created_part
    assert created["turn_tool_call_ids"] == ["call_sub_1"]


@pytest.mark.parametrize(("depth", "checkpointer", "scope"), SUBGRAPH_NODE_CASES)
def test_a_node_inside_a_subgraph_that_drops_its_tool_message_leaves_the_tool_protocol_open(
    node_contracts, depth, checkpointer, scope
):
    # The Command to the parent graph proves the transfer: its unanswered call is a broken history for agent_b.
    operation_id = observed(network_in_subgraph(tool_message=False, depth=depth, checkpointer=checkpointer()))

    assert scoped_rows(operation_id) == [("agent_a", "agent_b", scope, "OPEN_TOOL_PROTOCOL")]


def test_an_agent_without_the_middleware_is_reported_in_words_once(node_contracts):
    operation_id = observed(network(checkpointer=InMemorySaver()))

    reports = MiddlewareReport.objects.filter(run__operation_id=operation_id, kind="unseen_without_middleware")
    assert [(r.agent, r.detail) for r in reports] == [("agent_a", {"agent": "agent_a"})]


def test_an_agent_with_the_middleware_gets_no_unseen_report(node_contracts):
    operation_id = f"op-sw-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": operation_id}, "recursion_limit": 30}
    observe(teams.swarm(InMemorySaver()), {"messages": [HumanMessage("hello")]}, config, verifier=PASS)

    assert rows(operation_id) == [("alice", "bob", "HEALTHY")]
    assert not MiddlewareReport.objects.filter(run__operation_id=operation_id, kind="unseen_without_middleware")


def test_end_is_no_destination_and_the_root_scope_is_named_parent():
    assert transfer_gotos("__end__") == []
    assert transfer_gotos(["bob", "__end__"]) == ["bob"]
    assert scope_name(()) == "parent"
    assert scope_name(("dept:1a2b", "team:3c4d")) == "dept/team"
