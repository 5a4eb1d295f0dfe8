"""What a registered graph is, as values: the `HostedGraph` a factory returns, the `GraphDescription` it publishes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sidewisp_agent import Verifier, WaitPolicy


@dataclass(frozen=True)
class HostedGraph:
    """What a factory may return: the compiled graph with its wait policies and outcome verifier."""

    graph: Any
    wait_policies: Mapping[str, WaitPolicy] = field(default_factory=dict)
    verifier: Verifier | None = None


@dataclass(frozen=True)
class GraphDescription:
    """What the admin and the limits validation know about a graph without building it.

    `agents` maps each agent to its tool names; `sensitive_tools` maps a tool to
    the wait reason its approval must keep; `effect_tools` must be emulated in a
    dry run; `retryable_errors` adds exception classes an admin may retry by
    name; `amounts` gives, per tool, the amount of a call (its arguments) for an
    approval threshold; `variants` are named versions of the graph (each with
    `limits`, `route_version` and `tool_names(agent)`), chosen by `configurable.scenario`.

    `limits` are the graph's own settings for its agents (sections of the limits
    document, e.g. the exception classes its tool retry retries and the approval
    gates of its tools): laid over the runtime defaults for this graph only, under
    what an admin changes. `workspace_agents` work in a per-run workspace (a shell
    and file search); `todo_agents` get a to-do list.
    """

    agents: Mapping[str, Sequence[str]] = field(default_factory=dict)
    sensitive_tools: Mapping[str, str] = field(default_factory=dict)
    effect_tools: frozenset[str] = frozenset()
    retryable_errors: Mapping[str, type[Exception]] = field(default_factory=dict)
    amounts: Mapping[str, Callable[[Mapping[str, Any]], int]] = field(default_factory=dict)
    variants: Mapping[str, Any] = field(default_factory=dict)
    route_version: str = "routes/1"
    limits: Mapping[str, Any] = field(default_factory=dict)
    workspace_agents: frozenset[str] = frozenset()
    todo_agents: frozenset[str] = frozenset()
