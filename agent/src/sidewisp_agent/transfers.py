"""What a transfer looks like in the graph's stream and shape: the pure helpers the tracker, `reconcile`, the
middleware and `steps` share.

A *transfer* is a tool call that returned a `Command` to the parent graph, whoever wrote the tool. Its
destinations, handoff ids, the AI turn that made it and the namespaces it crosses are read here from plain
values; nothing is written here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.constants import END
from langgraph.types import Send

from . import bundle, evidence
from .entries import Entry, PartEntry, SettleEntry

# The contract version transfers follow when neither SidewispMiddleware nor observe names one.
DEFAULT_ROUTE_VERSION = "routes/1"
HANDOFF_EVENT = "sidewisp.handoff"
# State keys that route or carry the conversation, not context handed to an agent.
CONTROL_KEYS = frozenset({"messages", "active_agent", "remaining_steps", "structured_response"})
ROOT_SCOPE = "parent"

Namespace = tuple[str, ...]


def node_of(segment: str) -> str:
    """The node name of a namespace segment (`"desk:1e61…"` → `"desk"`)."""
    return segment.split(":", 1)[0]


def scope_name(ns: Namespace) -> str:
    """`graph_scope` of the graph at `ns`: its node names joined by `/`, `parent` for the root graph."""
    return "/".join(node_of(segment) for segment in ns)[: bundle.MAX_STRING_LENGTH] or ROOT_SCOPE


def transfer_gotos(goto: Any) -> list[str]:
    """The destinations a Command's goto addresses, in order: a `Send` by its node; END is no destination."""
    items = goto if isinstance(goto, list | tuple) else [goto]
    names = []
    for item in items:
        name = str(item.node) if isinstance(item, Send) else item if isinstance(item, str) else ""
        if name and name != END:
            names.append(name)
    return names


def sent_tool_message_ids(goto: Any) -> list[list[str]]:
    """Per destination of `transfer_gotos(goto)`: the ToolMessage ids its `Send` payload carries."""
    items = goto if isinstance(goto, list | tuple) else [goto]
    ids = []
    for item in items:
        if isinstance(item, Send):
            if item.node != END:
                ids.append([m.tool_call_id for m in messages_in(item.arg) if isinstance(m, ToolMessage)])
        elif isinstance(item, str) and item and item != END:
            ids.append([])
    return ids


def transfer_handoff_ids(operation_id: str, tool_call_id: str, count: int) -> list[str]:
    """One handoff id per destination; the first is the call's own (what a declared `created` used)."""
    keys = [tool_call_id if i == 0 else f"{tool_call_id}#{i}" for i in range(count)]
    return [evidence.handoff_id_for(operation_id, key) for key in keys]


def messages_in(value: Any) -> list:
    messages = value.get("messages") if isinstance(value, Mapping) else getattr(value, "messages", None)
    return list(messages) if isinstance(messages, list | tuple) else []


def turn_call_ids(messages: Iterable[Any], tool_call_id: str) -> list[str] | None:
    """The tool-call ids of the AI turn that made `tool_call_id`, that call's first; None when not found."""
    for message in reversed(list(messages)):
        if isinstance(message, AIMessage) and any(call.get("id") == tool_call_id for call in message.tool_calls):
            others = [call["id"] for call in message.tool_calls if call.get("id") and call["id"] != tool_call_id]
            return [tool_call_id, *others][: bundle.MAX_LIST_ENTRIES]
    return None


def node_transfer_calls(messages: Sequence[Any], nodes: Iterable[str], *, proven: bool) -> tuple[Any, list[dict]]:
    """(the update's last AI turn, its transfer calls) for a plain node's update: `transfer_to_<X>`, X in `nodes`.

    The calls the same update answers are the transfers. `proven` says the node's `Command` went to the parent
    graph (the graph's own word that a transfer happened): then, when none is answered, the first such call is
    the transfer, its ToolMessage missing.
    """
    turn = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    names = set(nodes)
    calls = [
        call
        for call in (turn.tool_calls if turn is not None else ())
        if call.get("id")
        and str(call.get("name") or "").startswith("transfer_to_")
        and str(call["name"]).removeprefix("transfer_to_") in names
    ]
    chosen = [call for call in calls if call["id"] in answered]
    return turn, chosen or (calls[:1] if proven else [])


def context_key_names(state: Mapping[str, Any]) -> list[str]:
    """The names of non-control keys present in `state`, as a receipt may hold them (at most 100)."""
    names = []
    for key in sorted(k for k, v in state.items() if isinstance(k, str) and k not in CONTROL_KEYS and v is not None):
        try:
            bundle.parse_part("reduced", {"context_keys": [key]})
        except bundle.BundleError:
            continue
        names.append(key)
    return names[: bundle.MAX_LIST_ENTRIES]


@dataclass
class Transfer:
    """One transfer tool call: who made it, where it is applied and what it addressed."""

    tool_call_id: str
    sender: str
    scope: Namespace  # the namespace of the graph that applies it
    tool_ns: Namespace  # the namespace of the graph the tool ran in
    gotos: list[str]
    sent_ids: list[list[str]]
    at: str
    tool_name: str | None = None
    announced: bool = False  # SidewispMiddleware recorded its `created`
    turn_ids: list[str] | None = None
    messages: list = field(default_factory=list)  # the update's messages, once applied

    def handoff_ids(self, operation_id: str) -> list[str]:
        return transfer_handoff_ids(operation_id, self.tool_call_id, len(self.gotos))


def destination_entries(operation_id: str, handoff_id: str, node: str, task_id: str, started_at: str) -> list[Entry]:
    """The destination part of a started task, and the settlement it brings (nothing more is due)."""
    destination = {"node_id": node, "started_at": started_at, "attempt_id": task_id[: bundle.MAX_STRING_LENGTH]}
    return [
        PartEntry(operation_id, handoff_id, "destination", destination, f"task-{task_id}"),
        SettleEntry(operation_id, handoff_id),
    ]


def update_messages(update: Any) -> list:
    updates = update if isinstance(update, list | tuple) else [update]
    return [m for u in updates if isinstance(u, Mapping) for m in (u.get("messages") or ())]


def graph_at(graph: Any, nodes: Sequence[str]) -> Any:
    """The compiled (sub)graph reached from `graph` through `nodes`, or None when it cannot be found."""
    for node in nodes:
        try:
            graph = dict(graph.get_subgraphs()).get(node) if graph is not None else None
        except Exception:  # noqa: BLE001 - a graph that cannot list its subgraphs is read from its state instead
            return None
    return graph


def find_tool(graph: Any, name: str) -> Any:
    """The tool named `name` in the ToolNodes of `graph` (an agent graph), or None."""
    from langgraph.prebuilt import ToolNode

    for node in (getattr(graph, "nodes", None) or {}).values():
        bound = getattr(node, "bound", None)
        if isinstance(bound, ToolNode) and name in bound.tools_by_name:
            return bound.tools_by_name[name]
    return None
