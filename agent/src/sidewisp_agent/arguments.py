"""A gated tool call's arguments: their JSON schema (names and constraints) and their values, redacted.

`arg_schemas` reads the argument schema of the tools a graph can call (walking the
compiled graph and its agent subgraphs down to their ToolNodes): names, types and
declared ranges only, never a value, so it may be kept in `Run.pending_call` and
shown on pages. `redacted_values` is for the confirmation page only: each value
passes through the agent's shell redaction rules (secrets) and an absolute-path
rule; the result is never stored, audited or sent in an event.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from langchain.agents.middleware import RedactionRule
from langchain.agents.middleware._redaction import PIIDetectionError
from langgraph.prebuilt import ToolNode
from langgraph.pregel import Pregel

# What a property's schema may keep: its type and declared constraints (enum members are the schema's own).
_KEPT = ("type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "enum")
MAX_ENUM = 50
MAX_VALUE_CHARS = 500
PATH_MARK = "[REDACTED_PATH]"
WITHHELD = "[withheld: matches a redaction rule]"
# An absolute local path (POSIX, home, Windows drive, UNC, file: URL): what receipts.verdicts.bundle refuses.
_ABSOLUTE_PATH = re.compile(
    r"(?:(?<![\w.])(?:~|\$HOME|\$\{HOME\})?[/\\][^\s'\"]*|\b[A-Za-z]:[/\\][^\s'\"]*|\bfile:\S*)"
)


def arg_schemas(graph: Any, tool_names: Iterable[str]) -> dict[str, dict[str, dict]]:
    """{tool name: {argument: minimized JSON schema}} for the named tools the graph's ToolNodes hold."""
    wanted = set(tool_names)
    found: dict[str, dict[str, dict]] = {}
    for tool in _tools(graph, depth=0):
        if tool.name in wanted and tool.name not in found:
            found[tool.name] = minimized_schema(tool)
    return found


def minimized_schema(tool: Any) -> dict[str, dict]:
    try:
        schema = tool.tool_call_schema.model_json_schema()
    except (AttributeError, TypeError, ValueError):
        return {}
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    required = set(schema.get("required") or ()) if isinstance(schema, Mapping) else set()
    out: dict[str, dict] = {}
    for name, prop in (properties or {}).items():
        if isinstance(prop, Mapping):
            out[str(name)] = {**_constraints(prop), "required": name in required}
    return out


def _constraints(prop: Mapping) -> dict:
    options = [p for p in prop.get("anyOf") or () if isinstance(p, Mapping) and p.get("type") != "null"]
    base = options[0] if len(options) == 1 else prop
    kept = {key: base[key] for key in _KEPT if key in base}
    enum = kept.get("enum")
    if enum is not None and not (
        isinstance(enum, list) and len(enum) <= MAX_ENUM and all(isinstance(v, str | int | float) for v in enum)
    ):
        kept.pop("enum")
    if prop.get("anyOf") and any(isinstance(p, Mapping) and p.get("type") == "null" for p in prop["anyOf"]):
        kept["nullable"] = True
    return kept


def _tools(graph: Any, *, depth: int) -> Iterable[Any]:
    if depth > 5 or not isinstance(graph, Pregel):
        return
    for node in graph.nodes.values():
        bound = getattr(node, "bound", None)
        if isinstance(bound, ToolNode):
            yield from bound.tools_by_name.values()
        elif isinstance(bound, Pregel):
            yield from _tools(bound, depth=depth + 1)


def redacted_values(args: Mapping[str, Any], rules: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Each argument's value as text for the owner's eyes: secrets redacted by `rules` (the shell's
    redaction rules), absolute paths replaced, long values cut. A rule with strategy "block" withholds it."""
    resolved = []
    for rule in rules:
        try:
            resolved.append(RedactionRule(rule["type"], rule.get("strategy", "redact"), rule.get("pattern")).resolve())
        except (KeyError, ValueError, TypeError, re.error):
            continue
    shown: dict[str, str] = {}
    for name, value in args.items():
        text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
        try:
            for rule in resolved:
                text, _ = rule.apply(text)
        except PIIDetectionError:
            text = WITHHELD
        text = _ABSOLUTE_PATH.sub(PATH_MARK, text)
        shown[str(name)] = text if len(text) <= MAX_VALUE_CHARS else f"{text[:MAX_VALUE_CHARS]}…"
    return shown
