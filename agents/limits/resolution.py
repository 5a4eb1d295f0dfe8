"""Reading the middleware stack an agent gets: the admin's preview of the next run, and what a run ran with.

Both go through the one builder (`agents.limits.stack.build_layers`), so what they show is what a run gets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agents.host import entries
from agents.limits.described import agent_tools, graph_limits
from agents.limits.document import AgentSettings, resolve
from agents.limits.stack import build_layers
from agents.models import RunLimits


@dataclass(frozen=True)
class _Plain:
    """An agent as its graph describes it, without a variant's overrides."""

    route_version: str
    limits: Mapping[str, Any] = field(default_factory=dict)

    def tool_names(self, agent: str) -> list[str]:
        return sorted(agent_tools().get(agent, ()))


def _plain(agent: str) -> _Plain:
    for described in entries.descriptions():
        if agent in described.agents:
            return _Plain(described.route_version)
    return _Plain("routes/1")


def preview(
    document: Mapping[str, Any],
    agent: str,
    scenario: Any = None,
    *,
    dry_run: bool = False,
    graph: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The middleware stack `agent` gets from `document`, in order: [{"middleware", "name", "args", "shown"}].

    With a scenario (a graph variant: `limits`, `route_version`, `tool_names(agent)`), its overrides and
    tools are included (what that scenario's next run gets).
    A setting that is off or not applicable shows as a row whose name ends in "(off)". `graph` is the
    limits of the agent's graph (default: the graph that describes `agent`).
    """
    scenario = scenario if scenario is not None else _plain(agent)
    own = graph if graph is not None else graph_limits(agent=agent)
    settings = AgentSettings(agent, resolve(document, agent, scenario.limits.get(agent), graph=own))
    layers = build_layers(
        settings, scenario.tool_names(agent), route_version=scenario.route_version, dry_run=dry_run, preview=True
    )
    return [_row(layer.describe()) for layer in layers]


def effective_stack(run: Any) -> dict[str, Any]:
    """What a run ran with: {"run", "version", "pinned_at", "agents": [{"agent", "stack": [row, ...]}]}.

    Each row is {"middleware": class name, "name": instance name, "args": {...}, "shown": [(arg, json)]}.

    `version` is None for a run that has not started (it will take the current
    version then) or that no agent ran (an imported run). The agents are those
    the run's registered graph describes (none for a graph without a description).
    """
    pin = RunLimits.objects.select_related("version").filter(run=run).first()
    if pin is None:
        return {"run": run.pk, "version": None, "pinned_at": None, "agents": []}
    described = entries.description(getattr(run, "graph", "") or "")
    names = list(described.agents) if described is not None else []
    scenario = described.variants.get(getattr(run, "scenario", "")) if described is not None else None
    dry_run = bool(getattr(run, "dry_run", False))
    own = described.limits if described is not None else {}
    agents = [
        {"agent": agent, "stack": preview(pin.version.document, agent, scenario, dry_run=dry_run, graph=own)}
        for agent in names
    ]
    return {"run": run.pk, "version": pin.version.number, "pinned_at": pin.pinned_at, "agents": agents}


def _row(described: dict[str, Any]) -> dict[str, Any]:
    shown = [(key, json.dumps(value, ensure_ascii=False, default=str)) for key, value in described["args"].items()]
    return {**described, "shown": shown}
