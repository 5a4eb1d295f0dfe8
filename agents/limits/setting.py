"""The schema of an agent's settings: one typed `Setting` per setting, read off the defaults (the admin's form)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agents.limits.defaults import (
    DEFAULT_SETTINGS,
    MODEL_EXIT_BEHAVIORS,
    ON_EXPIRY,
    ON_FAILURE,
    SANDBOXES,
    SUMMARIZER_MODELS,
    TOOL_EXIT_BEHAVIORS,
)
from agents.limits.document import merge

# The settings whose value is one of a fixed set, and the lists whose entries are names (of tools, of errors).
CHOICES: dict[str, tuple[str, ...]] = {
    "tool_call_limit.exit_behavior": TOOL_EXIT_BEHAVIORS,
    "model_call_limit.exit_behavior": MODEL_EXIT_BEHAVIORS,
    "tool_retry.on_failure": ON_FAILURE,
    "model_retry.on_failure": ON_FAILURE,
    "summarization.model": SUMMARIZER_MODELS,
    "approval.on_expiry": ON_EXPIRY,
    "shell.sandbox": SANDBOXES,
}
TOOL_LISTS = frozenset(
    {"tool_errors.tools", "context_editing.exclude_tools", "tool_search.deferred_tools", "dry_run.emulate"}
)
ERROR_LISTS = frozenset({"tool_retry.retry_on", "model_retry.retry_on"})
# Lists whose null means "every tool" (an empty list means none).
NULL_MEANS_ALL = frozenset({"tool_errors.tools", "dry_run.emulate"})
# Whole numbers that may be empty (null): a call limit without a bound, output without a byte limit.
NULLABLE_NUMBERS = frozenset(
    {
        "tool_call_limit.thread_limit",
        "tool_call_limit.run_limit",
        "model_call_limit.thread_limit",
        "model_call_limit.run_limit",
        "shell.max_output_bytes",
    }
)


@dataclass(frozen=True)
class Setting:
    """One setting of the schema: its dotted path and the kind of value it takes.

    Kinds: "bool", "int", "number", "choice" (one of `choices`), "text", "tools" and "errors"
    (lists of names), "lines" (a list of one-line strings) and "json" (a structured value:
    per-tool objects, triggers, redaction rules).
    """

    path: str
    kind: str
    choices: tuple[str, ...] = ()
    nullable: bool = False

    @property
    def section(self) -> str:
        return self.path.split(".", 1)[0]

    @property
    def key(self) -> str:
        return self.path.split(".", 1)[1]


def schema() -> list[Setting]:
    """Every setting of an agent, in the order of the defaults, typed from its default value."""
    return [
        _setting(f"{section}.{key}", value)
        for section, values in DEFAULT_SETTINGS.items()
        for key, value in (values.items() if _is_section(section) else [("", values)])
    ]


def _is_section(section: str) -> bool:
    # A section holding only named entries (tool name -> limit) is one structured setting, not a group.
    return section != "per_tool_limits"


def _setting(path: str, value: Any) -> Setting:
    path = path.rstrip(".")
    nullable = path in NULLABLE_NUMBERS or path in NULL_MEANS_ALL
    if path in CHOICES:
        return Setting(path, "choice", CHOICES[path])
    if path in TOOL_LISTS:
        return Setting(path, "tools", nullable=nullable)
    if path in ERROR_LISTS:
        return Setting(path, "errors")
    if isinstance(value, bool):
        return Setting(path, "bool")
    if isinstance(value, int):
        return Setting(path, "int", nullable=nullable)
    if isinstance(value, float):
        return Setting(path, "number")
    if isinstance(value, str):
        return Setting(path, "text")
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return Setting(path, "lines")
    return Setting(path, "json")


def setting_value(settings: Mapping[str, Any], setting: Setting) -> Any:
    """The value of `setting` in one agent's (or the default's) settings."""
    section = settings.get(setting.section)
    if "." not in setting.path:
        return section
    return section.get(setting.key) if isinstance(section, Mapping) else None


def with_setting(layer: Mapping[str, Any], setting: Setting, value: Any) -> dict[str, Any]:
    """`layer` (a default or an agent's override) with `setting` set to `value`."""
    if "." not in setting.path:
        return {**copy.deepcopy(dict(layer)), setting.path: copy.deepcopy(value)}
    return merge(layer, {setting.section: {setting.key: value}})


def setting_of_error(error: str, where: str, settings: Iterable[Setting]) -> Setting | None:
    """The setting a validation message ("where.section.key...: what") is about, if it is one of `settings`."""
    place = error.split(": ", 1)[0]
    if not place.startswith(f"{where}."):
        return None
    rest = place.removeprefix(f"{where}.")
    found = [s for s in settings if rest == s.path or rest.startswith((f"{s.path}.", f"{s.path}["))]
    return max(found, key=lambda s: len(s.path), default=None)
