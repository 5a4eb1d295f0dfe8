"""A single-agent step team built as the LangChain docs' handoffs tutorial shows it (customer support), scripted.

Tools move the agent between steps with `Command(update={"current_step": ...})` (no `graph=PARENT`); a
`@wrap_model_call` middleware gives each model call its step's prompt and tools. Only SidewispMiddleware is
added, last in the list. The faults: a step whose model call is not given the tools the contract declares
for it (`short_tools`), and a tool that skips to a step the contract does not route to (`skip`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NotRequired

from langchain.agents import AgentState, create_agent
from langchain.agents.middleware import ModelRequest, ModelResponse, wrap_model_call
from langchain.tools import ToolRuntime
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command
from sidewisp_agent.middleware import SidewispMiddleware

from agents.host.scripted import Call, Say, Script, ScriptedChatModel, Step

ROUTE_VERSION = "steps/1"
FIRST_STEP = "warranty_collector"
ROUTES = {
    "warranty_collector": {"issue_classifier": ["warranty_status"]},
    "issue_classifier": {"resolution_specialist": ["warranty_status", "issue_type"]},
}
STEPS = {
    "key": "current_step",
    "tools": {
        "issue_classifier": ["record_issue_type"],
        "resolution_specialist": ["escalate_to_human", "provide_solution"],
    },
}


def contracts_document() -> dict:
    return {"wait_reasons": [], "routes": {ROUTE_VERSION: ROUTES}, "steps": {ROUTE_VERSION: STEPS}}


class SupportState(AgentState):
    current_step: NotRequired[str]
    warranty_status: NotRequired[str]
    issue_type: NotRequired[str]


def _to_step(runtime: ToolRuntime, step: str, text: str, **values: str) -> Command:
    message = ToolMessage(content=text, tool_call_id=runtime.tool_call_id)
    return Command(update={"messages": [message], "current_step": step, **values})


@tool
def record_warranty_status(status: str, runtime: ToolRuntime) -> Command:
    """Record the customer's warranty status and move on to classifying the issue."""
    return _to_step(runtime, "issue_classifier", f"Warranty status recorded as {status}", warranty_status=status)


@tool
def record_issue_type(issue_type: str, runtime: ToolRuntime) -> Command:
    """Record the kind of issue and move on to resolving it."""
    return _to_step(runtime, "resolution_specialist", f"Issue type recorded as {issue_type}", issue_type=issue_type)


@tool
def skip_to_resolution(runtime: ToolRuntime) -> Command:
    """Jump straight to resolving the issue (a route the contract does not declare)."""
    return _to_step(runtime, "resolution_specialist", "Skipped ahead", warranty_status="unknown")


@tool
def provide_solution(solution: str) -> str:
    """Give the customer a solution."""
    return "Solution provided"


@tool
def escalate_to_human(reason: str) -> str:
    """Hand the case to a person."""
    return "Escalated"


def step_config(*, short_tools: bool = False, skip: bool = False) -> dict[str, dict]:
    """Each step's prompt and tools, as the tutorial's STEP_CONFIG."""
    specialist = [provide_solution] if short_tools else [provide_solution, escalate_to_human]
    return {
        "warranty_collector": {
            "prompt": "Ask whether the device is under warranty.",
            "tools": [skip_to_resolution] if skip else [record_warranty_status],
        },
        "issue_classifier": {"prompt": "Classify the issue as hardware or software.", "tools": [record_issue_type]},
        "resolution_specialist": {"prompt": "Resolve the issue.", "tools": specialist},
    }


def step_middleware(config: dict[str, dict], *, asynchronous: bool) -> object:
    """The tutorial's `@wrap_model_call` that applies the current step's prompt and tools (an async twin for
    `ainvoke`: a decorated sync function has no async hook)."""

    def configured(request: ModelRequest) -> ModelRequest:
        step = config[request.state.get("current_step", FIRST_STEP)]
        return request.override(system_prompt=step["prompt"], tools=step["tools"])

    if asynchronous:

        @wrap_model_call
        async def apply_step_config(request: ModelRequest, handler: Callable) -> ModelResponse:
            return await handler(configured(request))

        return apply_step_config

    @wrap_model_call
    def apply_step_config(request: ModelRequest, handler: Callable) -> ModelResponse:
        return handler(configured(request))

    return apply_step_config


# Each step's script: the model picks the one whose tools it was given.
_SCRIPTS: dict[str, Script] = {
    "record_warranty_status": Script((Call("record_warranty_status", {"status": "in_warranty"}),)),
    "skip_to_resolution": Script((Call("skip_to_resolution"),)),
    "record_issue_type": Script((Call("record_issue_type", {"issue_type": "hardware"}),)),
    "provide_solution": Script((Call("provide_solution", {"solution": "restart it"}), Say("Fixed: restart it."))),
}


def support_policy(messages: Sequence[BaseMessage], tool_names: Sequence[str]) -> Step:
    for name, script in _SCRIPTS.items():
        if name in tool_names:
            return script(messages, tool_names)
    return Say("I cannot help with that.")


def support_agent(
    checkpointer,
    *,
    asynchronous: bool = False,
    short_tools: bool = False,
    skip: bool = False,
    sidewisp: SidewispMiddleware | None = None,
    observed: bool = True,
):
    """The support agent; `observed=False` leaves SidewispMiddleware out (the unobserved twin)."""
    config = step_config(short_tools=short_tools, skip=skip)
    everything: list[BaseTool] = [t for step in config.values() for t in step["tools"]]
    sidewisp = sidewisp or SidewispMiddleware(route_version=ROUTE_VERSION, first_step=FIRST_STEP)
    return create_agent(
        ScriptedChatModel(policy=support_policy),
        tools=list({t.name: t for t in everything}.values()),
        state_schema=SupportState,
        middleware=[step_middleware(config, asynchronous=asynchronous), *([sidewisp] if observed else [])],
        checkpointer=checkpointer,
    )


class DeskState(SupportState):
    pass


def help_desk(checkpointer, *, asynchronous: bool = False):
    """The support agent as the `desk` node of an app graph (its steps handed off one level down)."""
    builder = StateGraph(DeskState)
    builder.add_node("desk", support_agent(None, asynchronous=asynchronous))
    builder.add_edge(START, "desk")
    builder.add_edge("desk", END)
    return builder.compile(checkpointer=checkpointer)


def ask() -> dict:
    return {"messages": [HumanMessage("My phone is broken.")]}
