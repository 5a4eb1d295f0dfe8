"""Warnings about a valid document: the settings that would stop every run, and the agents they stop."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents.limits.checks import Checks
from agents.limits.document import resolve
from agents.limits.rules import is_int, listed

_LIMIT_WORDS = {"run_limit": "run", "thread_limit": "thread"}


def stopping_warnings(document: Mapping[str, Any], checks: Checks) -> list[str]:
    """What a valid document would do that stops runs, one sentence per setting, naming it and its agents.

    A zero limit is allowed (the middleware take it) but nothing runs under it:
    a saved run limit of 0 lets every run end "Complete · 0 handoffs". The admin
    shows these before saving and saves only after an explicit confirmation.
    """
    found: dict[tuple[str, str], list[str]] = {}
    for agent in sorted(checks.tools_by_agent):
        settings = resolve(document, agent, graph=checks.graph_of(agent))
        tools = set(checks.tools_by_agent[agent])
        for where, effect in _agent_stoppers(settings, tools):
            found.setdefault((_source(document, agent, where), effect), []).append(agent)
    return [
        f"{where} {effect.format(agents=listed(agents), its='its' if len(agents) == 1 else 'their')}"
        for (where, effect), agents in found.items()
    ]


def _agent_stoppers(settings: Mapping[str, Any], tools: set[str]) -> list[tuple[str, str]]:
    stoppers = []
    handoffs = sorted(t for t in tools if t.startswith("transfer_to_"))
    consequence = "{its} handoffs never happen" if handoffs else "{its} tools never run"
    for key, word in _LIMIT_WORDS.items():
        if _is_zero((settings.get("tool_call_limit") or {}).get(key)):
            stoppers.append(
                (f"tool_call_limit.{key}", f"= 0: every {word} of {{agents}} stops after 0 tool calls: {consequence}")
            )
        if _is_zero((settings.get("model_call_limit") or {}).get(key)):
            stoppers.append(
                (
                    f"model_call_limit.{key}",
                    f"= 0: every {word} of {{agents}} ends before {{its}} first model call: no answer, no handoff",
                )
            )
    for tool, limit in sorted((settings.get("per_tool_limits") or {}).items()):
        for key, word in _LIMIT_WORDS.items():
            if tool in tools and isinstance(limit, Mapping) and _is_zero(limit.get(key)):
                what = f"its handoff {tool} never happens" if tool in handoffs else f"{tool} never runs"
                stoppers.append((f"per_tool_limits.{tool}.{key}", f"= 0: in every {word} of {{agents}}, {what}"))
    retry = settings.get("model_retry") or {}
    if _is_zero(retry.get("max_retries")) and retry.get("on_failure") == "error":
        stoppers.append(
            ("model_retry.max_retries", "= 0 with on_failure “error”: one failed model call ends a run of {agents}")
        )
    return stoppers


def _is_zero(value: Any) -> bool:
    return is_int(value) and value == 0


def _source(document: Mapping[str, Any], agent: str, where: str) -> str:
    """Where the setting comes from: the agent's override when it sets it, else the default."""
    node: Any = ((document.get("agents") or {}).get(agent)) or {}
    for key in where.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return f"default.{where}"
        node = node[key]
    return f"agents.{agent}.{where}"
