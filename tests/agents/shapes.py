"""Team shapes LangGraph users build beyond a flat team (spec v1.2 "Every team shape"), scripted.

Each builder returns a compiled graph and takes the fault it can show as a keyword: a transfer to an
undeclared agent, a transfer without its ToolMessage, a destination held by `interrupt_before`. The
agents are the real libraries' (langgraph-supervisor, langgraph-swarm, `create_agent`,
`create_react_agent`); only `SidewispMiddleware` is added, and not even that in `react_swarm`.
Every route a shape uses is declared in `ROUTES` under `ROUTE_VERSION`, named by the nodes of the graph
where the handoff happens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, NotRequired

from langchain.agents import create_agent
from langchain.tools import ToolRuntime
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import create_react_agent
from langgraph.types import Command, Send
from langgraph_supervisor import create_supervisor
from langgraph_supervisor.handoff import create_forward_message_tool
from langgraph_supervisor.handoff import create_handoff_tool as supervisor_handoff
from langgraph_swarm import create_handoff_tool, create_swarm
from sidewisp_agent.middleware import SidewispMiddleware

from agents.host.scripted import Call, Say, Script, ScriptedChatModel, Step
from tests.agents import teams

ROUTE_VERSION = "shapes/1"
ROUTES = {
    "top_supervisor": {"research_team": [], "writing_team": []},
    "research_supervisor": {"researcher": []},
    "writing_supervisor": {"writer": []},
    "alice": {"bob": []},
    "bob": {"alice": []},
    "front": {"back": ["case_id"]},
    "dispatcher": {"worker": []},
    "supervisor": {"w1": []},
}

Saver = BaseCheckpointSaver | None
# Which transfer a shape's sender makes: the healthy one, or the fault it shows.
Fault = Literal["healthy", "undeclared", "no_tool_message", "held"]


def observed(name: str | None = None) -> SidewispMiddleware:
    return SidewispMiddleware(agent=name, route_version=ROUTE_VERSION)


def _answered(messages: Sequence[BaseMessage], name: str) -> bool:
    """`name` has given an answer (an AI message of its own without tool calls)."""
    return any(isinstance(m, AIMessage) and m.name == name and not m.tool_calls for m in messages)


def _worker(name: str) -> CompiledStateGraph:
    """A `create_agent` worker that answers once."""
    model = ScriptedChatModel(policy=Script((Say(f"{name} done"),)))
    return create_agent(model, tools=[], middleware=[observed()], name=name)


def transfer(name: str, goto: str, *, tool_message: bool = True, ai_turn: bool = True) -> BaseTool:
    """A hand-written transfer as the LangChain docs show it: `Command(graph=PARENT)`, no metadata.

    It hands over the calling AI turn (unless `ai_turn` is false) and its ToolMessage (unless
    `tool_message` is false).
    """

    @tool(name, description=f"Hand over to {goto}.")
    def hand_over(runtime: ToolRuntime) -> Command:
        last_ai = next(m for m in reversed(runtime.state["messages"]) if isinstance(m, AIMessage))
        answer = ToolMessage(content=f"Transferred to {goto}", tool_call_id=runtime.tool_call_id, name=name)
        messages = [*([last_ai] if ai_turn else []), *([answer] if tool_message else [])]
        return Command(goto=goto, update={"messages": messages, "active_agent": goto}, graph=Command.PARENT)

    return hand_over


# --- 1. a supervisor of supervisors (langgraph-supervisor's multi-level hierarchy) --------------


def _team_lead(worker: str) -> Callable[[Sequence[BaseMessage], Sequence[str]], Step]:
    """A team supervisor's script: hand to `worker` until it answered, then report."""

    def policy(messages: Sequence[BaseMessage], tool_names: Sequence[str]) -> Step:
        return Say(f"{worker} reported") if _answered(messages, worker) else Call(f"transfer_to_{worker}")

    return policy


def _top_policy(messages: Sequence[BaseMessage], tool_names: Sequence[str]) -> Step:
    # A team's answer reaches the top as its supervisor's last message (output_mode="last_message").
    if not _answered(messages, "research_supervisor"):
        return Call("transfer_to_research_team")
    if not _answered(messages, "writing_supervisor"):
        return Call("transfer_to_writing_team")
    return Say("all done")


def _team(
    team: str, lead: str, worker: str, *, fault: Fault = "healthy", route_to: str | None = None
) -> CompiledStateGraph:
    """`create_supervisor([worker], supervisor_name=lead).compile(name=team)`, as the README's levels."""
    target = route_to or worker
    handoff = supervisor_handoff(agent_name=target, add_handoff_messages=fault != "no_tool_message")
    builder = create_supervisor(
        [_worker(target)],
        model=ScriptedChatModel(policy=_team_lead(target)),
        tools=observed(lead).tool_node([handoff]),
        supervisor_name=lead,
    )
    return builder.compile(name=team, interrupt_before=[target] if fault == "held" else None)


def hierarchical(checkpointer: Saver, *, fault: Fault = "healthy") -> CompiledStateGraph:
    """top_supervisor over research_team (research_supervisor → researcher) and writing_team.

    The fault is in the research team: its supervisor hands to "analyst" (a worker the contract does not
    declare), leaves its handoff messages out, or its worker is held.
    """
    research = _team(
        "research_team",
        "research_supervisor",
        "researcher",
        fault=fault,
        route_to="analyst" if fault == "undeclared" else None,
    )
    writing = _team("writing_team", "writing_supervisor", "writer")
    handoffs = [supervisor_handoff(agent_name=team) for team in ("research_team", "writing_team")]
    builder = create_supervisor(
        [research, writing],
        model=ScriptedChatModel(policy=_top_policy),
        tools=observed("top_supervisor").tool_node(handoffs),
        supervisor_name="top_supervisor",
    )
    return builder.compile(checkpointer=checkpointer, name="top")


# --- 2. a langgraph-swarm swarm as one node ("desk") of an app graph --------------------------------


def _swarm_transfer(fault: Fault, *, ai_turn: bool = True) -> tuple[str, list[BaseTool]]:
    """alice's transfer for `fault`: the swarm's own tool, or a hand-written broken one."""
    if fault == "undeclared":
        return "transfer_to_carol", [transfer("transfer_to_carol", "carol")]
    if fault == "no_tool_message":
        return "transfer_quietly", [transfer("transfer_quietly", "bob", tool_message=False, ai_turn=ai_turn)]
    return "transfer_to_bob", []


def swarm_in_app(checkpointer: Saver, *, fault: Fault = "healthy") -> CompiledStateGraph:
    """START → prep → desk (alice hands to bob) → END; only the swarm has an `active_agent`."""
    name, extra = _swarm_transfer(fault)
    alice = create_agent(
        ScriptedChatModel(policy=Script((Call(name), Say("alice done")))),
        tools=[create_handoff_tool(agent_name="bob"), *extra],
        middleware=[observed()],
        name="alice",
    )
    bob = create_agent(
        ScriptedChatModel(policy=Script((Say("bob done"),))),
        tools=[create_handoff_tool(agent_name="alice")],
        middleware=[observed()],
        name="bob",
    )
    desk = create_swarm([alice, bob], default_active_agent="alice").compile(
        interrupt_before=["bob"] if fault == "held" else None
    )
    app = StateGraph(MessagesState)
    app.add_node("prep", lambda state: {"messages": [AIMessage("prepared", name="prep")]})
    app.add_node("desk", desk)
    app.add_edge(START, "prep")
    app.add_edge("prep", "desk")
    app.add_edge("desk", END)
    return app.compile(checkpointer=checkpointer)


# --- 3. the docs' agents-as-nodes pattern two subgraph levels down ---------------------------------


class TeamState(MessagesState):
    """The team's own state: `case_id` exists in this graph only (the parents are MessagesState)."""

    case_id: NotRequired[str]


def nested_agents(checkpointer: Saver, *, fault: Fault = "healthy") -> CompiledStateGraph:
    """app → dept → team, where team is START → intake → front → back (front hands to back)."""
    goto = "carol" if fault == "undeclared" else "back"
    front = create_agent(
        ScriptedChatModel(policy=Script((Call("transfer_to_back"), Say("front done")))),
        tools=[transfer("transfer_to_back", goto, tool_message=fault != "no_tool_message")],
        middleware=[observed()],
        name="front",
    )
    back = create_agent(
        ScriptedChatModel(policy=Script((Say("back done"),))), tools=[], middleware=[observed()], name="back"
    )
    team = StateGraph(TeamState)
    team.add_node("intake", lambda state: {"case_id": "c-1"})
    team.add_node("front", front, destinations=("back",))
    team.add_node("back", back)
    team.add_edge(START, "intake")
    team.add_edge("intake", "front")
    team.add_edge("back", END)
    return _nest(team.compile(interrupt_before=["back"] if fault == "held" else None), checkpointer)


def _nest(team: CompiledStateGraph, checkpointer: Saver) -> CompiledStateGraph:
    dept = StateGraph(MessagesState)
    dept.add_node("team", team)
    dept.add_edge(START, "team")
    dept.add_edge("team", END)
    app = StateGraph(MessagesState)
    app.add_node("dept", dept.compile())
    app.add_edge(START, "dept")
    app.add_edge("dept", END)
    return app.compile(checkpointer=checkpointer)


# --- 4. a `Send` fan-out from a transfer tool ------------------------------------------------------

# Where the fan-out's ToolMessage travels: in each Send's payload (as langgraph-supervisor's parallel
# handoffs do), or in the Command's update with the Sends as a tuple or as a list. The prebuilt ToolNode
# (langgraph-prebuilt 1.1.3, `_combine_tool_outputs`) rebuilds a parent Command whose goto is a *list* of
# Sends as `Command(graph=PARENT, goto=sends)`: its update, and the ToolMessage in it, never reach the graph.
Carry = Literal["payload", "update", "update_list"]


def _fan_out_tool(carry: Carry, receivers: tuple[str, str], *, tool_message: bool) -> BaseTool:
    """`Command(graph=PARENT, goto=[Send(r, part) for r in receivers])`, its ToolMessage where `carry` says."""

    @tool("fan_out", description="Give each worker its part.")
    def give_parts(runtime: ToolRuntime) -> Command:
        history = list(runtime.state["messages"])
        answer = ToolMessage(content="Parts sent", tool_call_id=runtime.tool_call_id, name="fan_out")
        answers = [answer] if tool_message else []
        parts = [(receiver, HumanMessage(f"part {part}")) for receiver, part in zip(receivers, "ab", strict=True)]
        if carry == "payload":
            sends = [Send(receiver, {"messages": [*history, *answers, part]}) for receiver, part in parts]
            return Command(graph=Command.PARENT, goto=sends)
        sends = [Send(receiver, {"messages": [part]}) for receiver, part in parts]
        goto = tuple(sends) if carry == "update" else sends
        return Command(graph=Command.PARENT, goto=goto, update={"messages": [history[-1], *answers]})

    return give_parts


def fan_out(checkpointer: Saver, *, carry: Carry = "payload", fault: Fault = "healthy") -> CompiledStateGraph:
    """dispatcher sends one part each to two workers (or one to "auditor", an undeclared route)."""
    receivers = ("worker", "auditor") if fault == "undeclared" else ("worker", "worker")
    dispatcher = create_agent(
        ScriptedChatModel(policy=Script((Call("fan_out"), Say("dispatcher done")))),
        tools=[_fan_out_tool(carry, receivers, tool_message=fault != "no_tool_message")],
        middleware=[observed()],
        name="dispatcher",
    )
    builder = StateGraph(MessagesState)
    builder.add_node("dispatcher", dispatcher, destinations=("worker", "auditor"))
    builder.add_node("worker", _worker("worker"))
    builder.add_node("auditor", _worker("auditor"))
    builder.add_edge(START, "dispatcher")
    builder.add_edge("worker", END)
    builder.add_edge("auditor", END)
    return builder.compile(checkpointer=checkpointer, interrupt_before=["worker"] if fault == "held" else None)


# --- 5. langgraph-supervisor's forward-message tool -------------------------------------------------


def _forwarding_policy(messages: Sequence[BaseMessage], tool_names: Sequence[str]) -> Step:
    if not _answered(messages, "w1"):
        return Call("transfer_to_w1")
    return Call("forward_message", {"from_agent": "w1"})


def forwarding_supervisor(checkpointer: Saver) -> CompiledStateGraph:
    """supervisor hands to w1, then forwards w1's answer as the final output (`goto="__end__"`)."""
    tools = [supervisor_handoff(agent_name="w1"), create_forward_message_tool("supervisor")]
    builder = create_supervisor(
        [_worker("w1")],
        model=ScriptedChatModel(policy=_forwarding_policy),
        tools=observed("supervisor").tool_node(tools),
    )
    return builder.compile(checkpointer=checkpointer)


# --- 6. create_react_agent agents without any Sidewisp code ------------------------------------------


def react_swarm(checkpointer: Saver, *, fault: Fault = "healthy") -> CompiledStateGraph:
    """langgraph-swarm's README team with `create_react_agent` agents; no middleware, no tool_node.

    Its quiet transfer leaves the AI turn out too: `create_react_agent` refuses a history with an
    unanswered tool call, so bob would raise instead of running (a crash, not this fault).
    """
    name, extra = _swarm_transfer(fault, ai_turn=False)
    alice = create_react_agent(
        ScriptedChatModel(policy=Script((Call(name), Say("alice done")))),
        tools=[teams.lookup, create_handoff_tool(agent_name="bob"), *extra],
        name="alice",
    )
    bob = create_react_agent(
        ScriptedChatModel(policy=Script((Say("bob done"),))),
        tools=[create_handoff_tool(agent_name="alice")],
        name="bob",
    )
    builder = create_swarm([alice, bob], default_active_agent="alice")
    return builder.compile(checkpointer=checkpointer, interrupt_before=["bob"] if fault == "held" else None)
