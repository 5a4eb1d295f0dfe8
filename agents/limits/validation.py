"""Validating a whole limits document: every problem named by its field, then the library's own last word.

`validate_document` resolves the default and each agent's settings as a run would
(`agents.limits.document.resolve`), checks them (`agents.limits.rules`), and when
they pass, builds every agent's middleware stack: a setting the library's
constructors refuse is an error too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agents.limits.checks import Checks
from agents.limits.defaults import DEFAULT_SETTINGS
from agents.limits.document import AgentSettings, LimitsError, resolve
from agents.limits.rules import check_settings, listed
from agents.limits.stack import build_layers


def validate_document(document: Any, checks: Checks) -> dict[str, Any]:
    """The document as stored, or LimitsError listing every problem ("where: what")."""
    if not isinstance(document, Mapping):
        raise LimitsError(["the document must be an object with “default” and “agents”"])
    errors: list[str] = []
    if unknown := set(document) - {"default", "agents"}:
        errors.append(f"{listed(unknown)}: unknown key; the document has “default” and “agents”")
    default = document.get("default") or {}
    agents = document.get("agents") or {}
    if not isinstance(default, Mapping):
        errors.append("default: must be an object")
        default = {}
    if not isinstance(agents, Mapping):
        errors.append("agents: must be an object of agent name → overrides")
        agents = {}
    errors += _unknown_keys(default, "default")
    base = resolve({"default": default}, "", graph=checks.every_graph())
    errors += check_settings(base, "default", checks, tools=checks.all_tools, gate_everything=True)
    inherited = {error.removeprefix("default") for error in errors}
    for agent, override in agents.items():
        where = f"agents.{agent}"
        if agent not in checks.tools_by_agent:
            errors.append(f"{where}: unknown agent; known: {listed(checks.tools_by_agent)}")
            continue
        if not isinstance(override, Mapping):
            errors.append(f"{where}: must be an object of settings")
            continue
        errors += _unknown_keys(override, where)
        own = set(checks.tools_by_agent[agent])
        for name in (
            (override.get("per_tool_limits") or {}) if isinstance(override.get("per_tool_limits"), Mapping) else ()
        ):
            if name not in own:
                errors.append(f"{where}.per_tool_limits.{name}: {agent} has no tool {name!r}")
        settings = resolve({"default": default, "agents": {agent: override}}, agent, graph=checks.graph_of(agent))
        found = check_settings(settings, where, checks, tools=own, gate_everything=False)
        # A problem of the default shows once, under "default", not again for every agent.
        errors += [error for error in found if error.removeprefix(where) not in inherited]
    if not errors:
        errors += _construct(document, checks)
    if errors:
        raise LimitsError(_unique(errors))
    return json.loads(json.dumps({"default": dict(default), "agents": dict(agents)}))


def _construct(document: Mapping[str, Any], checks: Checks) -> list[str]:
    # The last word is the library's: build every agent's stack as a run would.
    errors = []
    for agent, tools in checks.tools_by_agent.items():
        try:
            settings = AgentSettings(agent, resolve(document, agent, graph=checks.graph_of(agent)))
            build_layers(settings, sorted(tools), preview=True)
        except (TypeError, ValueError) as exc:
            errors.append(f"agents.{agent}: the middleware refuses these settings: {exc}")
    return errors


def _unknown_keys(settings: Mapping[str, Any], where: str) -> list[str]:
    return [f"{where}.{key}: unknown section" for key in settings if key not in DEFAULT_SETTINGS]


def _unique(errors: list[str]) -> list[str]:
    return list(dict.fromkeys(errors))
