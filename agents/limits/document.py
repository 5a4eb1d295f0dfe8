"""A limits document in layers: an agent's resolved settings, and what changed between two documents.

A document is `{"default": {section: {...}}, "agents": {agent: {section: {...partial}}}}`.
An agent's settings are, from the bottom up: the runtime defaults (`agents.limits.defaults`), the
limits its own graph registers, what the document's default changes, then the agent's override
(dicts merge, everything else replaces). A default setting equal to the runtime default changes
nothing, so a stored copy of the defaults never hides a graph's own.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents.limits.defaults import DEFAULT_SETTINGS


class LimitsError(ValueError):
    """Invalid limits; `errors` holds one message per problem, each naming its field."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


@dataclass(frozen=True)
class AgentSettings:
    """One agent's resolved settings, as the stack builder takes them."""

    agent: str
    settings: dict[str, Any]
    version: int | None = None


def merge(base: Mapping[str, Any], override: Mapping[str, Any] | None) -> dict[str, Any]:
    """`base` deep-merged with `override`: dicts merge key by key, anything else replaces."""
    merged = copy.deepcopy(dict(base))
    for key, value in (override or {}).items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def resolve(
    document: Mapping[str, Any],
    agent: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    graph: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The settings of `agent`: runtime defaults, its `graph`'s own limits, what the document's default
    changes, the agent's override, then `overrides` (scenario fixtures)."""
    settings = merge(DEFAULT_SETTINGS, graph or {})
    settings = merge(settings, changes(DEFAULT_SETTINGS, document.get("default") or {}))
    settings = merge(settings, (document.get("agents") or {}).get(agent) or {})
    settings = merge(settings, overrides or {})
    # A null per-tool entry in an override removes the limit or the gate it inherited.
    if isinstance(settings.get("per_tool_limits"), Mapping):
        settings["per_tool_limits"] = {k: v for k, v in settings["per_tool_limits"].items() if v is not None}
    approval = settings.get("approval")
    if isinstance(approval, Mapping) and isinstance(approval.get("tools"), Mapping):
        approval["tools"] = {k: v for k, v in approval["tools"].items() if v is not None}
    return settings


def changes(base: Mapping[str, Any], value: Mapping[str, Any]) -> dict[str, Any]:
    """What `value` changes in `base`: its keys whose value differs, objects compared key by key."""
    changed: dict[str, Any] = {}
    for key, item in value.items():
        if key not in base:
            changed[key] = copy.deepcopy(item)
        elif isinstance(item, Mapping) and isinstance(base[key], Mapping):
            if inner := changes(base[key], item):
                changed[key] = inner
        elif item != base[key]:
            changed[key] = copy.deepcopy(item)
    return changed


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """{"a.b.c": leaf} for every leaf of a nested document (lists are leaves, empty objects vanish)."""
    if isinstance(value, Mapping):  # an empty object sets nothing, so it shows nothing
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value} if prefix else {}


def diff(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[dict[str, str]]:
    """What changed between two documents, one row per setting: {"setting", "before", "after"}."""
    before, after = flatten(old or {}), flatten(new)
    rows = []
    for key in sorted(set(before) | set(after)):
        if before.get(key, _MISSING) != after.get(key, _MISSING):
            rows.append(
                {"setting": key, "before": _show(before.get(key, _MISSING)), "after": _show(after.get(key, _MISSING))}
            )
    return rows


_MISSING = object()


def _show(value: Any) -> str:
    if value is _MISSING:
        return "—"
    return json.dumps(value, ensure_ascii=False)
