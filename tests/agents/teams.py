"""Teams built with other people's libraries (langgraph-swarm, langgraph-supervisor, the LangChain docs'
agents-as-nodes pattern), scripted, with only SidewispMiddleware added."""

from __future__ import annotations

from collections.abc import Sequence

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain.tools import ToolRuntime
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command
from langgraph_supervisor import create_supervisor
from langgraph_supervisor.handoff import create_handoff_tool as supervisor_handoff
from langgraph_swarm import create_handoff_tool, create_swarm
from sidewisp_agent import WaitPolicy
from sidewisp_agent.middleware import SidewispMiddleware

from agents.host.scripted import Call, Say, Script, ScriptedChatModel, Step, tool_results

ROUTE_VERSION = "teams/1"
ROUTES = {
    "alice": {"bob": [], "ben": []},
    "bob": {"alice": []},
    "ben": {"alice": []},
    "supervisor": {"w1": [], "w2": []},
    "front": {"back": []},
    "desk": {"ben": []},
}
WAIT_POLICIES = {"place_order": WaitPolicy(owner="ops-lead", reason="purchase_approval", deadline_minutes=60)}


def observed(name: str | None = None) -> SidewispMiddleware:
    return SidewispMiddleware(agent=name, route_version=ROUTE_VERSION)


@tool
def place_order(item: str) -> str:
    """Place an order for an item."""
    return f"ordered {item}"


@tool
async def check_stock(item: str) -> str:
    """Check the stock of an item (async only)."""
    return f"{item} in stock"


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return "found"


def _transfer(name: str, goto: str, *, tool_message: bool = True, metadata: dict | None = None):
    """A hand-written transfer tool as the LangChain docs show it (no Sidewisp metadata)."""

    @tool(name, description=f"Hand over to {goto}.")
    def transfer(runtime: ToolRuntime) -> Command:
        last_ai = next(m for m in reversed(runtime.state["messages"]) if isinstance(m, AIMessage))
        message = ToolMessage(content=f"Transferred to {goto}", tool_call_id=runtime.tool_call_id, name=name)
        messages = [last_ai, message] if tool_message else [last_ai]
        return Command(goto=goto, update={"messages": messages, "active_agent": goto}, graph=Command.PARENT)

    if metadata:
        transfer.metadata = metadata
    return transfer


# --- (a) a langgraph-swarm swarm -----------------------------------------------------


def swarm(
    checkpointer,
    *,
    transfer: str = "transfer_to_bob",
    extra_tools: Sequence = (),
    bob_steps: tuple[Step, ...] = (Say("bob done"),),
    bob_tools: Sequence = (),
    hitl: bool = False,
    hold: bool = False,
    busy_calls: int = 0,
):
    """alice hands to bob (after `busy_calls` lookups) with `transfer`; bob follows `bob_steps`."""
    alice_steps = (*(Call("lookup", {"query": f"q{i}"}) for i in range(busy_calls)), Call(transfer), Say("alice done"))
    alice = create_agent(
        ScriptedChatModel(policy=Script(alice_steps)),
        tools=[lookup, create_handoff_tool(agent_name="bob"), *extra_tools],
        middleware=[observed()],
        name="alice",
    )
    bob_middleware = [HumanInTheLoopMiddleware(interrupt_on={"place_order": True})] if hitl else []
    bob = create_agent(
        ScriptedChatModel(policy=Script(bob_steps)),
        tools=[*bob_tools, create_handoff_tool(agent_name="alice")],
        middleware=[*bob_middleware, observed()],
        name="bob",
    )
    builder = create_swarm([alice, bob], default_active_agent="alice")
    return builder.compile(checkpointer=checkpointer, interrupt_before=["bob"] if hold else None)


# --- (a') a swarm whose model makes a transfer beside another call (spec v1.3 the whole turn) ---------


class HistoryRejected(ValueError):
    """What OpenAI answers with HTTP 400: an assistant message with tool_calls not followed by their results."""


def open_calls(messages: Sequence[BaseMessage]) -> list[str]:
    """The ids of the AI tool calls in `messages` that no ToolMessage answers."""
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    return [c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls if c["id"] not in answered]


class StrictModel(ScriptedChatModel):
    """A scripted model that refuses a broken history as a real provider does."""

    def _respond(self, messages, tools=None):
        if open_calls(messages):
            msg = "an assistant message with 'tool_calls' must be followed by tool messages"
            raise HistoryRejected(msg)
        return super()._respond(messages, tools)


@tool
def lookup_fare(route: str) -> str:
    """Look up the fare of a route."""
    return "42 EUR"


class _BatchingDesk(ScriptedChatModel):
    """Answers [lookup_fare, transfer_to_ben] in one message, then ends its turn."""

    def _respond(self, messages, tools=None):
        conversation = [m for m in messages if not isinstance(m, SystemMessage)]
        if tool_results(conversation, ("lookup_fare", "transfer_to_ben")):
            return AIMessage(content="desk done")
        calls = [
            {"name": "lookup_fare", "args": {"route": "LIS-OPO"}, "id": "call_fare_1", "type": "tool_call"},
            {"name": "transfer_to_ben", "args": {}, "id": "call_ben_1", "type": "tool_call"},
        ]
        return AIMessage(content="", tool_calls=calls)


def fares_swarm(checkpointer, *, batched: bool = True):
    """desk hands to ben (langgraph-swarm's own tool): in the same AI message as lookup_fare when `batched`,
    else after lookup_fare was answered. ben's model refuses a history with an unanswered call."""
    script = Script((Call("lookup_fare", {"route": "LIS-OPO"}), Call("transfer_to_ben"), Say("desk done")))
    desk = create_agent(
        _BatchingDesk(policy=None) if batched else ScriptedChatModel(policy=script),
        tools=[lookup_fare, create_handoff_tool(agent_name="ben")],
        middleware=[observed()],
        name="desk",
    )
    ben = create_agent(
        StrictModel(policy=Script((Say("ben done"),))),
        tools=[create_handoff_tool(agent_name="desk")],
        middleware=[observed()],
        name="ben",
    )
    return create_swarm([desk, ben], default_active_agent="desk").compile(checkpointer=checkpointer)


def rogue_transfer():
    """A hand-written transfer to a node the swarm does not have."""
    return _transfer("transfer_to_carol", "carol")


def quiet_transfer():
    """A hand-written transfer to bob that leaves its ToolMessage out."""
    return _transfer("transfer_quietly", "bob", tool_message=False)


def misdirected_transfer():
    """Declares bob (`__handoff_destination`), returns a goto to alice."""
    return _transfer("transfer_declared_bob", "alice", metadata={"__handoff_destination": "bob"})


# --- (b) a langgraph-supervisor supervisor -------------------------------------------


def _answered(messages: Sequence[BaseMessage], worker: str) -> bool:
    return any(isinstance(m, AIMessage) and m.name == worker and not m.tool_calls for m in messages)


def _sequential(messages: Sequence[BaseMessage], tool_names: Sequence[str]) -> Step:
    if not _answered(messages, "w1"):
        return Call("transfer_to_w1")
    if not _answered(messages, "w2"):
        return Call("transfer_to_w2")
    return Say("all done")


class _ParallelModel(ScriptedChatModel):
    """Hands to both workers in one message (parallel tool calls), then ends."""

    def _respond(self, messages, tools=None):
        conversation = [m for m in messages if not isinstance(m, SystemMessage)]
        if any(_answered(conversation, w) for w in ("w1", "w2")):
            return AIMessage(content="all done")
        calls = [
            {"name": f"transfer_to_{w}", "args": {}, "id": f"call_par_{w}_{len(conversation)}", "type": "tool_call"}
            for w in ("w1", "w2")
        ]
        return AIMessage(content="", tool_calls=calls)


def supervisor(checkpointer, *, parallel: bool = False):
    workers = [
        create_agent(ScriptedChatModel(policy=Script((Say(f"{w} done"),))), tools=[], middleware=[observed()], name=w)
        for w in ("w1", "w2")
    ]
    model = _ParallelModel(policy=None) if parallel else ScriptedChatModel(policy=_sequential)
    tools = observed("supervisor").tool_node([supervisor_handoff(agent_name=w) for w in ("w1", "w2")])
    builder = create_supervisor(workers, model=model, tools=tools, parallel_tool_calls=parallel)
    return builder.compile(checkpointer=checkpointer)


# --- (c) the LangChain docs' agents-as-nodes pattern -----------------------------------


def agents_as_nodes(
    checkpointer,
    *,
    back_steps: tuple[Step, ...] = (Say("back done"),),
    hold: bool = False,
    metadata: dict | None = None,
):
    """front hands to back with a hand-written tool (carrying `metadata`, none by default)."""
    front = create_agent(
        ScriptedChatModel(policy=Script((Call("transfer_to_back"), Say("front done")))),
        tools=[_transfer("transfer_to_back", "back", metadata=metadata)],
        middleware=[observed()],
        name="front",
    )
    back = create_agent(
        ScriptedChatModel(policy=Script(back_steps)), tools=[check_stock], middleware=[observed()], name="back"
    )
    builder = StateGraph(MessagesState)
    builder.add_node("front", front, destinations=("back",))
    builder.add_node("back", back)
    builder.add_edge(START, "front")
    builder.add_edge("back", END)
    return builder.compile(checkpointer=checkpointer, interrupt_before=["back"] if hold else None)


# --- (d) a langgraph-swarm swarm through ChatOpenAI (tests/agents/openai_server.py answers) --------------


@tool
def book_seat(route: str) -> str:
    """Book a seat on a route."""
    return f"booked {route}"


ALICE = Script((Call("lookup_fare", {"route": "LIS-OPO"}), Call("transfer_to_ben"), Say("alice done")))
BATCHED_ALICE = Script(((Call("lookup_fare", {"route": "LIS-OPO"}), Call("transfer_to_ben")), Say("alice done")))
BEN = Script((Call("book_seat", {"route": "LIS-OPO"}), Say("ben: the seat is booked")))


def openai_swarm(checkpointer, base_url: str):
    """alice looks up a fare and hands to ben, who books a seat: both agents are `ChatOpenAI` at `base_url`."""
    from langchain_openai import ChatOpenAI

    def model():
        return ChatOpenAI(model="gpt-sidewisp-test", base_url=base_url, api_key="sk-test", max_retries=0)

    alice = create_agent(
        model(), tools=[lookup_fare, create_handoff_tool(agent_name="ben")], middleware=[observed()], name="alice"
    )
    ben = create_agent(
        model(), tools=[book_seat, create_handoff_tool(agent_name="alice")], middleware=[observed()], name="ben"
    )
    return create_swarm([alice, ben], default_active_agent="alice").compile(checkpointer=checkpointer)
