"""A langgraph-swarm team in an app with no Django, observed by a Sidewisp server (issue 31 §2).

Run by tests/agents/test_agent_venv_swarm.py with the fresh virtualenv's Python, outside the repository: only the
agent package, LangChain, LangGraph and langgraph-swarm are there, so the scripted model is this module's own.
alice hands over to bob with langgraph-swarm's transfer tool; bob's `place_order` waits for a person's approval
(HumanInTheLoopMiddleware). The team's code has nothing of Sidewisp; the app adds it one of two ways (argv[1]):

- `observe`: the two-line setup, `sidewisp_agent.configure()` then `sidewisp_agent.observe(graph, input, config)`;
- `instrument`: `sidewisp_agent.instrument()` at start, then the app's own `graph.invoke` and `graph.stream`.

Either way the approver's decision comes back through `sidewisp_agent.await_decision`, and the run goes on from it.
Configured by SIDEWISP_URL and SIDEWISP_TOKEN; argv[2] is the operation id. Prints one JSON line per run of the
graph: {"operation_id", "status": "waiting" | "complete", "django": whether Django was imported}.

The test imports this module too, to run the very same team in its own observed mode.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import sidewisp_agent
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph_swarm import create_handoff_tool, create_swarm

ROUTE_VERSION = "teams/1"  # the contract version, declared on the server, that alice's transfer to bob follows
# What observing is told (the same for both ways of adding Sidewisp, and for the test's local run).
OBSERVING = {
    "route_version": ROUTE_VERSION,
    "wait_policies": {
        "place_order": sidewisp_agent.WaitPolicy(owner="ops-lead", reason="purchase_approval", deadline_minutes=60)
    },
    "verifier": lambda operation_id: ("order_exists", "pass", f"v-{operation_id}"),
}
DECISION_TIMEOUT = 120.0


class ScriptedModel(BaseChatModel):
    """A chat model that takes `steps` in turn: a tool call `(name, args)`, or a text that ends the agent's turn.

    The next step is the number of results of this agent's own tools in the conversation, so each agent of the
    swarm follows its own script over the shared history, and a run resumed from its checkpoint goes on alike.
    """

    steps: tuple[tuple[str, dict] | str, ...]

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], tool_choice=tool_choice, **kwargs)

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs: Any) -> ChatResult:
        own = {spec["function"]["name"] for spec in kwargs.get("tools") or ()}
        done = sum(isinstance(m, ToolMessage) and m.name in own for m in messages)
        step = self.steps[min(done, len(self.steps) - 1)]
        if isinstance(step, str):
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=step))])
        name, args = step
        call = {"name": name, "args": args, "id": f"call_{name}_{len(messages)}", "type": "tool_call"}
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="", tool_calls=[call]))])


@tool
def place_order(item: str) -> str:
    """Place an order for an item."""
    return f"ordered {item}"


def build_team() -> Any:
    """alice hands over to bob; bob orders a widget (once a person approved) and says so."""
    alice = create_agent(
        ScriptedModel(steps=(("transfer_to_bob", {}), "alice done")),
        tools=[create_handoff_tool(agent_name="bob")],
        name="alice",
    )
    bob = create_agent(
        ScriptedModel(steps=(("place_order", {"item": "widget"}), "I placed the order.")),
        tools=[place_order, create_handoff_tool(agent_name="alice")],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"place_order": True})],
        name="bob",
    )
    return create_swarm([alice, bob], default_active_agent="alice").compile(checkpointer=InMemorySaver())


def ask() -> dict:
    return {"messages": [HumanMessage("buy a widget")]}


def say(operation_id: str, status: str) -> None:
    print(json.dumps({"operation_id": operation_id, "status": status, "django": "django" in sys.modules}), flush=True)


def decision(graph: Any, config: dict) -> Any:
    """The approver's decision as the `Command` that resumes the graph (SystemExit when none came)."""
    pending = graph.get_state(config).interrupts
    command = sidewisp_agent.await_decision(
        config["configurable"]["operation_id"], timeout=DECISION_TIMEOUT, poll=0.1, pending=pending
    )
    if command is None:
        raise SystemExit("no decision came back in time")
    return command


def observed(operation_id: str, config: dict) -> None:
    """The two-line setup: configure, then drive the graph through `observe`."""
    sidewisp_agent.configure()
    graph = build_team()
    outcome = sidewisp_agent.observe(graph, ask(), config, **OBSERVING)
    say(operation_id, outcome.status)
    if outcome.status == "waiting":
        outcome = sidewisp_agent.observe(graph, decision(graph, config), config, **OBSERVING)
        say(operation_id, outcome.status)


def instrumented(operation_id: str, config: dict) -> None:
    """`instrument()` alone: the app invokes and streams its graph as it would without Sidewisp."""
    sidewisp_agent.instrument(**OBSERVING)
    graph = build_team()
    result = graph.invoke(ask(), config)
    say(operation_id, "waiting" if result.get("__interrupt__") else "complete")
    if result.get("__interrupt__"):
        for _ in graph.stream(decision(graph, config), config, stream_mode="updates"):
            pass
        say(operation_id, "waiting" if graph.get_state(config).interrupts else "complete")


def main() -> int:
    how, operation_id = sys.argv[1], sys.argv[2]
    config = {"configurable": {"thread_id": operation_id, "operation_id": operation_id}}
    {"observe": observed, "instrument": instrumented}[how](operation_id, config)
    assert "django" not in sys.modules, "the agent package imported Django"
    return 0


if __name__ == "__main__":
    sys.exit(main())
