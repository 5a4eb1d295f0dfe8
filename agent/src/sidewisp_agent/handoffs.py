"""Transfer tools: the documented handoff pattern, and the broken variants scenarios use.

`handoff_tool(to=..., context_keys=[...])` returns
`Command(goto=to, update={"active_agent": to, "messages": [the calling AIMessage,
its ToolMessage], <context keys>}, graph=Command.PARENT)`. The tool declares its
target and key names in its metadata, so `SidewispMiddleware` records what it was
meant to do before it runs. Any other tool that returns a `Command` to the parent
graph is a transfer too (langgraph-swarm, langgraph-supervisor, a hand-written
one); those libraries declare their target under `HANDOFF_DESTINATION_KEY`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pydantic
from langchain.tools import ToolRuntime
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.types import Command

HANDOFF_METADATA_KEY = "sidewisp_handoff"
# The key langgraph-swarm and langgraph-supervisor put on their transfer tools.
HANDOFF_DESTINATION_KEY = "__handoff_destination"


@dataclass(frozen=True)
class Fault:
    """How a deliberately broken transfer misbehaves (scenarios only)."""

    goto: str | None = None  # send control somewhere other than the declared target
    drop_tool_message: bool = False
    stale_active_agent: bool = False  # leave active_agent unchanged
    omit_keys: tuple[str, ...] = ()  # context keys left out of the update


def handoff_tool(
    to: str,
    context_keys: Sequence[str] = (),
    *,
    name: str | None = None,
    description: str | None = None,
    fault: Fault | None = None,
) -> BaseTool:
    """A transfer tool to agent `to`; the model supplies the values of `context_keys` as arguments."""
    keys = tuple(context_keys)
    tool_name = name or f"transfer_to_{to}"
    fault = fault or Fault()
    # `runtime` is a field of the schema (injected, hidden from the model): a schema with no
    # fields at all makes langchain-core drop every input, the injected runtime included.
    schema = pydantic.create_model(
        f"{tool_name}_args",
        __config__=pydantic.ConfigDict(arbitrary_types_allowed=True),
        runtime=(ToolRuntime, ...),
        **{key: (str | None, None) for key in keys},
    )

    def transfer(runtime: ToolRuntime, **values: str | None) -> Command:
        last_ai = next(m for m in reversed(runtime.state["messages"]) if isinstance(m, AIMessage))
        message = ToolMessage(content=f"Transferred to {to}", tool_call_id=runtime.tool_call_id, name=tool_name)
        update: dict = {"messages": [last_ai] if fault.drop_tool_message else [last_ai, message]}
        if not fault.stale_active_agent:
            update["active_agent"] = to
        for key in keys:
            value = values.get(key) or runtime.state.get(key)
            if value is not None and key not in fault.omit_keys:
                update[key] = value
        return Command(goto=fault.goto or to, update=update, graph=Command.PARENT)

    return StructuredTool.from_function(
        func=transfer,
        name=tool_name,
        description=description or f"Hand the conversation to the {to} agent.",
        args_schema=schema,
        metadata={HANDOFF_METADATA_KEY: {"to": to, "context_keys": list(keys)}},
    )


def handoff_target(tool: object) -> dict | None:
    """The declared {"to", "context_keys"} of a transfer tool, or None when the tool declares no receiver.

    Reads our own metadata, else the `__handoff_destination` that langgraph-swarm
    and langgraph-supervisor declare (no context keys then).
    """
    metadata = getattr(tool, "metadata", None) or {}
    declared = metadata.get(HANDOFF_METADATA_KEY)
    if isinstance(declared, dict) and isinstance(declared.get("to"), str):
        return {"to": declared["to"], "context_keys": [str(key) for key in declared.get("context_keys") or ()]}
    destination = metadata.get(HANDOFF_DESTINATION_KEY)
    if isinstance(destination, str) and destination:
        return {"to": destination, "context_keys": []}
    return None
