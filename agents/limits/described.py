"""What the registered graphs describe about their agents (`GraphDescription`), gathered across every graph.

Nothing here builds a graph: the names, tools, gates and variants come from each graph module's
`sidewisp_description` (agents.host.entries).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agents.host import entries
from agents.limits.defaults import FILE_SEARCH_TOOLS, RETRYABLE_ERRORS, SHELL_TOOL


def agent_tools() -> dict[str, set[str]]:
    """Every described agent with its tool names, across the registered graphs."""
    tools: dict[str, set[str]] = {}
    for described in entries.descriptions():
        for agent, names in described.agents.items():
            tools.setdefault(agent, set()).update(names)
    return tools


def sensitive_tools() -> dict[str, str]:
    return {tool: reason for d in entries.descriptions() for tool, reason in d.sensitive_tools.items()}


def effect_tools() -> frozenset[str]:
    return frozenset().union(*(d.effect_tools for d in entries.descriptions()))


def amounts() -> dict[str, Callable[[Mapping[str, Any]], int]]:
    """Per tool, the amount of a call (from its arguments) that an approval threshold compares."""
    return {tool: amount for d in entries.descriptions() for tool, amount in d.amounts.items()}


def retryable_errors() -> dict[str, type[Exception] | None]:
    extra = {name: cls for d in entries.descriptions() for name, cls in d.retryable_errors.items()}
    return {**RETRYABLE_ERRORS, **extra}


def limits_by_agent() -> dict[str, Mapping[str, Any]]:
    """Each described agent with the limits its own graph registers (the first graph that names it)."""
    found: dict[str, Mapping[str, Any]] = {}
    for described in entries.descriptions():
        for agent in described.agents:
            found.setdefault(agent, described.limits)
    return found


def graph_limits(*, graph: str | None = None, agent: str = "") -> Mapping[str, Any]:
    """The limits the registered `graph` sets for its agents; without a graph, those of `agent`'s graph."""
    if graph:
        described = entries.description(graph)
        return described.limits if described is not None else {}
    return limits_by_agent().get(agent) or {}


def workspace_agents() -> frozenset[str]:
    """The agents their graphs say work in a per-run workspace (a shell and file search there)."""
    return frozenset().union(*(d.workspace_agents for d in entries.descriptions()))


def variants() -> dict[str, Any]:
    """The named variants of the registered graphs (the demo's scenarios), by name."""
    return {name: variant for d in entries.descriptions() for name, variant in d.variants.items()}


def workspace_tool_names(agent: str, settings: Mapping[str, Any]) -> list[str]:
    """The tools an agent's workspace middleware registers with these settings."""
    if agent not in workspace_agents():
        return []
    names = [SHELL_TOOL] if (settings.get("shell") or {}).get("enabled") else []
    return names + (list(FILE_SEARCH_TOOLS) if (settings.get("file_search") or {}).get("enabled") else [])


def todo_agents() -> frozenset[str]:
    """The agents their graphs give a to-do list (GraphDescription.todo_agents)."""
    return frozenset().union(*(d.todo_agents for d in entries.descriptions()))
