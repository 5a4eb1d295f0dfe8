"""The customer-operations team: four `create_agent` agents as nodes of one StateGraph."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, NotRequired, TypedDict

from langchain.agents import create_agent
from langchain_core.messages import AnyMessage
from langchain_core.tools import BaseTool
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from sidewisp_agent import WaitPolicy
from sidewisp_agent.handoffs import Fault, handoff_tool

from agents.demo import tools
from agents.demo.contracts import team_contracts
from agents.host.scripted import Say, chat_model
from agents.limits.stack import build_middleware, wait_policies
from agents.models import AgentLimits

ROUTE_VERSION = "routes/1"
AGENTS = ("triage", "sales", "support", "billing", "coder")
AGENT_TOOLS: dict[str, tuple[BaseTool, ...]] = {
    "triage": (tools.create_ticket,),
    "sales": (tools.check_inventory, tools.place_order, tools.confirm_with_supplier),
    "support": (tools.update_ticket, tools.add_note, tools.disclose_secret),
    "billing": (tools.refund,),
    # The coder's tools come from its workspace middleware (shell, glob and grep search), see agents.limits.stack.
    "coder": (),
}
PROMPTS = {
    "triage": "Classify the request and hand it to sales or support with the context the route needs.",
    "sales": "Quote and place orders; hand paid orders to billing.",
    "support": "Resolve support tickets.",
    "billing": "Handle refunds and invoices.",
    "coder": "Make the requested change in your workspace, run its tests, and say what you did.",
}


class TeamState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    active_agent: NotRequired[str]
    request_type: NotRequired[str]
    customer_tier: NotRequired[str]
    consent_status: NotRequired[str]
    region: NotRequired[str]
    ticket_id: NotRequired[str]
    order_id: NotRequired[str]
    currency: NotRequired[str]
    task: NotRequired[str]


@dataclass(frozen=True)
class Transfer:
    sender: str
    receiver: str
    context_keys: tuple[str, ...]
    fault: Fault | None = None


@dataclass(frozen=True)
class Team:
    graph: Any
    wait_policies: dict[str, WaitPolicy] = field(default_factory=dict)


def declared_transfers(route_version: str = ROUTE_VERSION) -> list[Transfer]:
    routes = team_contracts()["routes"][route_version]
    return [
        Transfer(sender, receiver, tuple(keys))
        for sender, receivers in routes.items()
        for receiver, keys in receivers.items()
    ]


def build_team(
    policies: Mapping[str, Any],
    *,
    checkpointer: Any,
    limits: Mapping[str, AgentLimits] | None = None,
    transfers: Sequence[Transfer] | None = None,
    held_nodes: Sequence[str] = (),
    route_version: str = ROUTE_VERSION,
    workspace: Path | None = None,
    dry_run: bool = False,
    middleware: Callable[[str, list[str]], list] | None = None,
) -> Team:
    """Compile the team graph; `policies` gives each agent's scripted policy.

    `workspace` is the run's workspace (the coder works there); in a `dry_run`
    the tool emulator answers for the tools, so nothing has an effect.
    `middleware(agent, tool_names)` gives an agent's stack (a hosted run's
    `Host.middleware`, which also keeps the wait policies); without it the
    stack is built from `limits` here.
    """
    limits = dict(limits or {})
    transfers = list(transfers if transfers is not None else declared_transfers(route_version))
    builder = StateGraph(TeamState)
    policies_by_tool: dict[str, WaitPolicy] = {}
    for agent in AGENTS:
        agent_limits = limits.get(agent) or (AgentLimits.for_agent(agent) if middleware is None else None)
        own = [
            handoff_tool(t.receiver, t.context_keys, fault=t.fault, name=f"transfer_to_{t.receiver}")
            for t in transfers
            if t.sender == agent
        ]
        agent_tools = [*AGENT_TOOLS[agent], *own]
        names = [t.name for t in agent_tools]
        if middleware is not None:
            stack = middleware(agent, names)
        else:
            stack = build_middleware(
                agent_limits, names, route_version=route_version, workspace=workspace, dry_run=dry_run
            )
            policies_by_tool.update(wait_policies(agent_limits, names))
        runnable = create_agent(
            chat_model(policies.get(agent) or _idle),
            tools=agent_tools,
            system_prompt=PROMPTS[agent],
            middleware=stack,
            name=agent,
        )
        destinations = tuple(t.receiver for t in transfers if t.sender == agent and t.receiver in AGENTS)
        builder.add_node(agent, runnable, destinations=destinations)
    builder.add_conditional_edges(START, _route_start, list(AGENTS))
    graph = builder.compile(checkpointer=checkpointer, interrupt_before=list(held_nodes) or None)
    return Team(graph=graph, wait_policies=policies_by_tool)


def _route_start(state: TeamState) -> str:
    return state.get("active_agent") or "triage"


def _idle(messages: Any, tool_names: Any) -> Say:
    return Say("Nothing for me to do here.")
