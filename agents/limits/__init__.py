"""The limits document: every middleware setting, a global default plus per-agent overrides.

A document is `{"default": {section: {...}}, "agents": {agent: {section: {...partial}}}}`.
An agent's settings are, from the bottom up: the runtime defaults here (no graph's
names in them), the limits its own graph registers (`GraphDescription.limits`: the demo's
retried exception class and its gated tools), what the document's default changes, then
the agent's override (dicts merge, everything else replaces). A default setting equal to
the runtime default changes nothing, so a stored copy of the defaults never hides a
graph's own. `validate_document` mirrors the rules the installed LangChain
middleware enforce in their constructors, adds Sidewisp's own rules, and names
the offending field in every message. The stack builder
(`agents.limits.stack`) and the admin form both go through this module.

The validation itself is pure: lookups that need the database (does this owner
exist? is this wait reason known?) are passed in as callables.
"""

from __future__ import annotations

import copy
import json
import re
import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Which errors a retry may be configured to retry: names an admin picks from, never free text.
# "default" is the library's own rule (every Exception except a ModelError marked not retryable).
# Registered graphs add their own (GraphDescription.retryable_errors), see `retryable_errors`.
RETRYABLE_ERRORS: dict[str, type[Exception] | None] = {
    "default": None,
    "ConnectionError": ConnectionError,
    "TimeoutError": TimeoutError,
}
TOOL_EXIT_BEHAVIORS = ("continue", "error", "end")
MODEL_EXIT_BEHAVIORS = ("end", "error")
ON_FAILURE = ("continue", "error")
# Sidewisp's approval actions send these three; "respond" has no action behind it.
DECISIONS = ("approve", "edit", "reject")
ON_EXPIRY = ("reject", "escalate")
SUMMARIZER_MODELS = ("scripted",)
CONTEXT_KINDS = ("messages", "tokens", "fraction")
MESSAGE_FIELDS = frozenset({"tool", "error_type", "attempts"})
RETRIED_MARKER = "failed after {attempts} attempts"
# Retries run inside a worker: they may pause, never for seconds.
MAX_INITIAL_DELAY = 1.0
MAX_DELAY = 5.0
MAX_RETRIES = 10
MAX_DEADLINE_MINUTES = 30 * 24 * 60
# The tools a workspace agent's middleware registers there (its graph names such agents: GraphDescription).
SHELL_TOOL = "shell"
FILE_SEARCH_TOOLS = ("glob_search", "grep_search")
SANDBOXES = ("namespace", "none")
REDACTION_STRATEGIES = ("redact", "mask", "hash", "block")
BUILTIN_REDACTIONS = frozenset({"email", "credit_card", "ip", "mac_address", "url"})
# Providers whose APIs defer tool loading behind a server-side tool search (langchain's list).
TOOL_SEARCH_PROVIDERS = frozenset({"anthropic", "openai"})
MAX_COMMAND_TIMEOUT = 120
MAX_STARTUP_COMMANDS = 10

DEFAULT_SETTINGS: dict[str, Any] = {
    "tool_call_limit": {"thread_limit": 20, "run_limit": 8, "exit_behavior": "continue"},
    "per_tool_limits": {},
    "model_call_limit": {"thread_limit": 40, "run_limit": 12, "exit_behavior": "end"},
    "tool_retry": {
        "max_retries": 2,
        # Any graph's: a lost connection or a timeout. A graph adds its own classes (the demo's limits).
        "retry_on": ["ConnectionError", "TimeoutError"],
        "on_failure": "error",
        "backoff_factor": 2.0,
        "initial_delay": 0.01,
        "max_delay": 0.05,
        "jitter": False,
    },
    "model_retry": {
        "max_retries": 2,
        "retry_on": ["default"],
        "on_failure": "continue",
        "backoff_factor": 2.0,
        "initial_delay": 0.01,
        "max_delay": 0.05,
        "jitter": False,
    },
    "tool_errors": {
        "tools": None,
        # The exception's type only: its text may carry internal details the model must not see.
        "message": "`{tool}` failed with {error_type}",
        "retried_message": "`{tool}` failed after {attempts} attempts with {error_type}",
    },
    "summarization": {"trigger": [{"messages": 24}], "keep": ["messages", 6], "model": "scripted"},
    "context_editing": {
        "trigger": 4000,
        "keep": 3,
        "clear_at_least": 0,
        "exclude_tools": [],
        "placeholder": "[cleared]",
        "clear_tool_inputs": False,
    },
    "approval": {
        # Sidewisp's own shell only (below); a graph gates its tools in its own limits.
        "tools": {},
        "owner": "ops-lead",
        "backup_owner": "",
        "deadline_minutes": 24 * 60,
        "on_expiry": "reject",
    },
    # The coder's shell: off unless an admin turns it on for the agent.
    "shell": {
        "enabled": False,
        "startup_commands": ["umask 022"],
        "command_timeout": 10,
        "max_output_lines": 200,
        "max_output_bytes": 16384,
        "sandbox": "namespace",
        "redaction": [
            {
                "type": "secret_assignment",
                "pattern": r"(?i)\b[\w-]*(?:password|passwd|secret|token|api[_-]?key)\b\s*[=:]\s*\S+",
                "strategy": "redact",
            },
            {
                "type": "api_key",
                "pattern": r"\b(?:sk|pk|rk|ghp|gho|xoxb|xoxp)[-_][A-Za-z0-9_-]{12,}",
                "strategy": "redact",
            },
        ],
    },
    "file_search": {"enabled": True, "max_file_size_mb": 1},
    "tool_search": {"enabled": False, "deferred_tools": []},
    # Tools a dry run emulates: null for all of them, or a list that names at least every tool with effects.
    "dry_run": {"emulate": None},
}
DEFAULT_SETTINGS["approval"]["tools"]["shell"] = {
    "allowed_decisions": list(DECISIONS),
    "reason": "destructive_command",
    "commands": ["rm", "rmdir", "shred", "truncate", "dd", "mkfs"],
}
DEFAULT_DOCUMENT: dict[str, Any] = {"default": DEFAULT_SETTINGS, "agents": {}}

_LIMIT_KEYS = ("thread_limit", "run_limit", "exit_behavior")
_TOOL_APPROVAL_KEYS = ("allowed_decisions", "reason", "threshold", "commands")


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


@dataclass
class Checks:
    """What validation needs to know about the world (tools, owners, wait reasons).

    The facts about tools (which are sensitive, which have effects, which have
    an amount, which errors may be retried) default to what the registered
    graphs describe (`agents.host.registry.GraphDescription`).
    """

    tools_by_agent: Mapping[str, Iterable[str]]
    owner_exists: Callable[[str], bool] | None = None
    reason_exists: Callable[[str], bool] | None = None
    sensitive_tools: Mapping[str, str] | None = None
    effect_tools: frozenset[str] | None = None
    amount_tools: frozenset[str] | None = None
    retryable_errors: Mapping[str, type[Exception] | None] | None = None
    graph_limits: Mapping[str, Mapping[str, Any]] | None = None
    workspace_agents: frozenset[str] | None = None
    all_tools: set[str] = field(init=False)

    def __post_init__(self) -> None:
        if self.sensitive_tools is None:
            self.sensitive_tools = sensitive_tools()
        if self.effect_tools is None:
            self.effect_tools = effect_tools()
        if self.amount_tools is None:
            self.amount_tools = frozenset(amounts())
        if self.retryable_errors is None:
            self.retryable_errors = retryable_errors()
        if self.graph_limits is None:
            self.graph_limits = limits_by_agent()
        if self.workspace_agents is None:
            self.workspace_agents = workspace_agents()
        self.tools_by_agent = {agent: set(names) for agent, names in self.tools_by_agent.items()}
        # A workspace agent's tools come from its middleware, whichever settings turn them on.
        for agent in self.workspace_agents & set(self.tools_by_agent):
            self.tools_by_agent[agent] |= {SHELL_TOOL, *FILE_SEARCH_TOOLS}
        self.all_tools = set().union(*self.tools_by_agent.values()) if self.tools_by_agent else set()

    def graph_of(self, agent: str) -> Mapping[str, Any]:
        """The limits the agent's own graph registers ({} for an agent no graph describes)."""
        return (self.graph_limits or {}).get(agent) or {}

    def every_graph(self) -> dict[str, Any]:
        """Every graph's own limits laid together: what "default" is checked over."""
        combined: dict[str, Any] = {}
        for layer in (self.graph_limits or {}).values():
            combined = merge(combined, layer)
        return combined


# --- merging ------------------------------------------------------------------


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


# --- validation ---------------------------------------------------------------


def validate_document(document: Any, checks: Checks) -> dict[str, Any]:
    """The document as stored, or LimitsError listing every problem ("where: what")."""
    if not isinstance(document, Mapping):
        raise LimitsError(["the document must be an object with “default” and “agents”"])
    errors: list[str] = []
    if unknown := set(document) - {"default", "agents"}:
        errors.append(f"{_names(unknown)}: unknown key; the document has “default” and “agents”")
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
            errors.append(f"{where}: unknown agent; known: {_names(checks.tools_by_agent)}")
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
    from agents.limits.stack import build_layers

    errors = []
    for agent, tools in checks.tools_by_agent.items():
        try:
            settings = AgentSettings(agent, resolve(document, agent, graph=checks.graph_of(agent)))
            build_layers(settings, sorted(tools), preview=True)
        except (TypeError, ValueError) as exc:
            errors.append(f"agents.{agent}: the middleware refuses these settings: {exc}")
    return errors


def check_settings(
    settings: Mapping[str, Any], where: str, checks: Checks, *, tools: set[str], gate_everything: bool
) -> list[str]:
    """Every problem of one agent's (or the default's) resolved settings."""
    errors: list[str] = []
    errors += _check_limit(settings.get("tool_call_limit"), f"{where}.tool_call_limit", TOOL_EXIT_BEHAVIORS, True)
    per_tool = settings.get("per_tool_limits")
    if not isinstance(per_tool, Mapping):
        errors.append(f"{where}.per_tool_limits: must be an object of tool name → limit")
    else:
        for name, limit in per_tool.items():
            if name not in checks.all_tools:
                errors.append(f"{where}.per_tool_limits.{name}: unknown tool")
                continue
            entry = merge({"thread_limit": None, "run_limit": None, "exit_behavior": "continue"}, limit)
            errors += _check_limit(entry, f"{where}.per_tool_limits.{name}", TOOL_EXIT_BEHAVIORS, False)
    errors += _check_limit(settings.get("model_call_limit"), f"{where}.model_call_limit", MODEL_EXIT_BEHAVIORS, None)
    errors += _check_retry(settings.get("tool_retry"), f"{where}.tool_retry", checks.retryable_errors)
    errors += _check_retry(settings.get("model_retry"), f"{where}.model_retry", checks.retryable_errors)
    errors += _check_tool_errors(settings.get("tool_errors"), f"{where}.tool_errors", checks)
    errors += _check_summarization(settings.get("summarization"), f"{where}.summarization")
    errors += _check_context_editing(settings.get("context_editing"), f"{where}.context_editing", checks)
    errors += _check_approval(settings.get("approval"), f"{where}.approval", checks, tools, gate_everything)
    errors += _check_shell(settings.get("shell"), f"{where}.shell", tools, per_agent=not gate_everything)
    errors += _check_file_search(settings.get("file_search"), f"{where}.file_search")
    errors += _check_tool_search(settings.get("tool_search"), f"{where}.tool_search", tools)
    errors += _check_dry_run(settings.get("dry_run"), f"{where}.dry_run", tools, checks.effect_tools)
    return errors


def workspace_tool_names(agent: str, settings: Mapping[str, Any]) -> list[str]:
    """The tools an agent's workspace middleware registers with these settings."""
    if agent not in workspace_agents():
        return []
    names = [SHELL_TOOL] if (settings.get("shell") or {}).get("enabled") else []
    return names + (list(FILE_SEARCH_TOOLS) if (settings.get("file_search") or {}).get("enabled") else [])


def _check_shell(config: Any, where: str, tools: set[str], *, per_agent: bool) -> list[str]:
    if not isinstance(config, Mapping):
        return [f"{where}: must be an object"]
    errors = [f"{where}.{key}: unknown setting" for key in config if key not in DEFAULT_SETTINGS["shell"]]
    enabled = config.get("enabled")
    if not isinstance(enabled, bool):
        errors.append(f"{where}.enabled: must be true or false")
    elif enabled and not per_agent:
        errors.append(f"{where}.enabled: turn the shell on for one agent (agents.<agent>.shell), not by default")
    elif enabled and SHELL_TOOL not in tools:
        errors.append(f"{where}.enabled: only {_names(workspace_agents())} works in a workspace with a shell")
    commands = config.get("startup_commands")
    if not isinstance(commands, list) or len(commands) > MAX_STARTUP_COMMANDS:
        errors.append(f"{where}.startup_commands: must be a list of at most {MAX_STARTUP_COMMANDS} commands")
    elif not all(isinstance(c, str) and c.strip() and len(c) <= 200 and "\n" not in c for c in commands):
        errors.append(f"{where}.startup_commands: each command is one line of 1 to 200 characters")
    timeout = config.get("command_timeout")
    if not _is_number(timeout) or not 0 < timeout <= MAX_COMMAND_TIMEOUT:
        errors.append(f"{where}.command_timeout: must be a number of seconds above 0, at most {MAX_COMMAND_TIMEOUT}")
    if not _is_int(config.get("max_output_lines"), minimum=1, maximum=10_000):
        errors.append(f"{where}.max_output_lines: must be a whole number from 1 to 10000")
    size = config.get("max_output_bytes")
    if size is not None and not _is_int(size, minimum=1, maximum=1_000_000):
        errors.append(f"{where}.max_output_bytes: must be a whole number from 1 to 1000000, or empty for no limit")
    if config.get("sandbox") not in SANDBOXES:
        errors.append(f"{where}.sandbox: must be one of {_names(SANDBOXES)}")
    rules = config.get("redaction")
    if not isinstance(rules, list):
        errors.append(f'{where}.redaction: must be a list of rules such as {{"type": "token", "pattern": "..."}}')
        rules = []
    for i, rule in enumerate(rules):
        errors += _check_redaction(rule, f"{where}.redaction[{i}]")
    return errors


def _check_redaction(rule: Any, where: str) -> list[str]:
    if not isinstance(rule, Mapping):
        return [f"{where}: must be an object with type, pattern and strategy"]
    errors = [f"{where}.{key}: unknown setting" for key in rule if key not in ("type", "pattern", "strategy")]
    kind, pattern = rule.get("type"), rule.get("pattern")
    if not isinstance(kind, str) or not re.fullmatch(r"[a-z][a-z0-9_]{0,39}", kind):
        errors.append(f"{where}.type: must be a lower-case name such as api_key")
    if pattern is None:
        if kind not in BUILTIN_REDACTIONS:
            errors.append(f"{where}.pattern: needed unless the type is built in ({_names(BUILTIN_REDACTIONS)})")
    elif not isinstance(pattern, str) or not pattern:
        errors.append(f"{where}.pattern: must be a regular expression")
    else:
        try:
            re.compile(pattern)
        except re.error as exc:
            errors.append(f"{where}.pattern: not a valid regular expression ({exc})")
    if rule.get("strategy", "redact") not in REDACTION_STRATEGIES:
        errors.append(f"{where}.strategy: must be one of {_names(REDACTION_STRATEGIES)}")
    return errors


def _check_file_search(config: Any, where: str) -> list[str]:
    if not isinstance(config, Mapping):
        return [f"{where}: must be an object"]
    errors = [f"{where}.{key}: unknown setting" for key in config if key not in DEFAULT_SETTINGS["file_search"]]
    if not isinstance(config.get("enabled"), bool):
        errors.append(f"{where}.enabled: must be true or false")
    if not _is_int(config.get("max_file_size_mb"), minimum=1, maximum=100):
        errors.append(f"{where}.max_file_size_mb: must be a whole number of megabytes from 1 to 100")
    return errors


def _check_tool_search(config: Any, where: str, tools: set[str]) -> list[str]:
    if not isinstance(config, Mapping):
        return [f"{where}: must be an object"]
    errors = [f"{where}.{key}: unknown setting" for key in config if key not in DEFAULT_SETTINGS["tool_search"]]
    enabled, deferred = config.get("enabled"), config.get("deferred_tools")
    if not isinstance(enabled, bool):
        errors.append(f"{where}.enabled: must be true or false")
    if not isinstance(deferred, list) or not all(isinstance(name, str) for name in deferred):
        errors.append(f"{where}.deferred_tools: must be a list of tool names")
    elif unknown := set(deferred) - tools:
        errors.append(f"{where}.deferred_tools: unknown tool {_names(unknown)}")
    elif enabled is True and not deferred:
        errors.append(f"{where}.deferred_tools: name at least one tool to load through the provider's tool search")
    return errors


def _check_dry_run(config: Any, where: str, tools: set[str], effect_tools: frozenset[str]) -> list[str]:
    if not isinstance(config, Mapping):
        return [f"{where}: must be an object"]
    errors = [f"{where}.{key}: unknown setting" for key in config if key not in DEFAULT_SETTINGS["dry_run"]]
    emulate = config.get("emulate")
    if emulate is None:
        return errors
    if not isinstance(emulate, list) or not all(isinstance(name, str) for name in emulate):
        return [*errors, f"{where}.emulate: must be a list of tool names, or empty (null) for every tool"]
    if unknown := set(emulate) - tools:
        errors.append(f"{where}.emulate: unknown tool {_names(unknown)}")
    if missing := (effect_tools & tools) - set(emulate):
        errors.append(f"{where}.emulate: a dry run must emulate every tool with effects; add {_names(missing)}")
    return errors


def _check_limit(limit: Any, where: str, behaviors: tuple[str, ...], global_limit: bool | None) -> list[str]:
    if not isinstance(limit, Mapping):
        return [f"{where}: must be an object with thread_limit, run_limit and exit_behavior"]
    errors = [f"{where}.{key}: unknown setting" for key in limit if key not in _LIMIT_KEYS]
    thread, run = limit.get("thread_limit"), limit.get("run_limit")
    for key, value in (("thread_limit", thread), ("run_limit", run)):
        if value is not None and not _is_int(value, minimum=0):
            errors.append(f"{where}.{key}: must be a whole number ≥ 0, or empty for no limit")
    if thread is None and run is None:
        errors.append(f"{where}: at least one limit must be specified (thread_limit or run_limit)")
    elif _is_int(thread) and _is_int(run) and run > thread:
        errors.append(f"{where}.run_limit: run_limit ({run}) cannot exceed thread_limit ({thread})")
    behavior = limit.get("exit_behavior")
    if behavior not in behaviors:
        errors.append(f"{where}.exit_behavior: must be one of {', '.join(behaviors)}, not {behavior!r}")
    elif behavior == "end" and global_limit:
        errors.append(f"{where}.exit_behavior: “end” is only allowed when one tool is limited (a per-tool limit)")
    return errors


def _check_retry(retry: Any, where: str, known: Mapping[str, Any]) -> list[str]:
    if not isinstance(retry, Mapping):
        return [f"{where}: must be an object"]
    errors = [f"{where}.{key}: unknown setting" for key in retry if key not in DEFAULT_SETTINGS["tool_retry"]]
    if not _is_int(retry.get("max_retries"), minimum=0, maximum=MAX_RETRIES):
        errors.append(f"{where}.max_retries: must be a whole number from 0 to {MAX_RETRIES}")
    for key, top in (("backoff_factor", 10.0), ("initial_delay", MAX_INITIAL_DELAY), ("max_delay", MAX_DELAY)):
        value = retry.get(key)
        if not _is_number(value) or value < 0:
            errors.append(f"{where}.{key}: must be a number ≥ 0")
        elif value > top:
            errors.append(f"{where}.{key}: at most {top:g} seconds: a retry must not hold a worker for long")
    delays = retry.get("initial_delay"), retry.get("max_delay")
    if all(_is_number(d) for d in delays) and delays[1] < delays[0]:
        errors.append(f"{where}.max_delay: must be at least initial_delay ({delays[0]:g})")
    if not isinstance(retry.get("jitter"), bool):
        errors.append(f"{where}.jitter: must be true or false")
    if retry.get("on_failure") not in ON_FAILURE:
        errors.append(f"{where}.on_failure: must be one of {', '.join(ON_FAILURE)}")
    retry_on = retry.get("retry_on")
    if not isinstance(retry_on, list) or not retry_on:
        errors.append(f"{where}.retry_on: name at least one error from: {_names(known)}")
    elif unknown := [name for name in retry_on if name not in known]:
        errors.append(f"{where}.retry_on: {_names(map(str, unknown))} not in the safe list: {_names(known)}")
    elif "default" in retry_on and len(retry_on) > 1:
        errors.append(f"{where}.retry_on: “default” already covers every error; use it alone")
    return errors


def _check_tool_errors(config: Any, where: str, checks: Checks) -> list[str]:
    if not isinstance(config, Mapping):
        return [f"{where}: must be an object"]
    errors = [f"{where}.{key}: unknown setting" for key in config if key not in DEFAULT_SETTINGS["tool_errors"]]
    tools = config.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not all(isinstance(name, str) for name in tools):
            errors.append(f"{where}.tools: must be a list of tool names, or empty for every tool")
        elif unknown := set(tools) - checks.all_tools:
            errors.append(f"{where}.tools: unknown tool {_names(unknown)}")
    for key in ("message", "retried_message"):
        errors += _check_template(config.get(key), f"{where}.{key}")
    retried = config.get("retried_message")
    if isinstance(retried, str) and RETRIED_MARKER not in retried:
        errors.append(f"{where}.retried_message: must contain “{RETRIED_MARKER}” (Sidewisp reports look for it)")
    return errors


def _check_template(template: Any, where: str) -> list[str]:
    if not isinstance(template, str) or not template.strip() or len(template) > 300:
        return [f"{where}: must be a non-empty text of at most 300 characters"]
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        return [f"{where}: not a valid template ({exc})"]
    if unknown := fields - MESSAGE_FIELDS:
        return [f"{where}: unknown placeholder {_names(unknown)}; allowed: {{tool}}, {{error_type}}, {{attempts}}"]
    return []


def _check_summarization(config: Any, where: str) -> list[str]:
    if not isinstance(config, Mapping):
        return [f"{where}: must be an object"]
    errors = [f"{where}.{key}: unknown setting" for key in config if key not in DEFAULT_SETTINGS["summarization"]]
    trigger, keep = config.get("trigger"), config.get("keep")
    uses_fraction = False
    if not isinstance(trigger, list):
        errors.append(f'{where}.trigger: must be a list of clauses such as {{"messages": 24}} (empty: never)')
    else:
        for i, clause in enumerate(trigger):
            at = f"{where}.trigger[{i}]"
            if not isinstance(clause, Mapping) or not clause:
                errors.append(f"{at}: trigger clause must specify at least one of 'tokens', 'messages', 'fraction'")
                continue
            for kind, value in clause.items():
                errors += _check_context_size(kind, value, f"{at}.{kind}", "trigger")
                uses_fraction |= kind == "fraction"
    if not (isinstance(keep, list) and len(keep) == 2):
        errors.append(f'{where}.keep: must be [kind, value], e.g. ["messages", 6]')
    else:
        errors += _check_context_size(keep[0], keep[1], f"{where}.keep", "keep")
        uses_fraction |= keep[0] == "fraction"
    model = config.get("model")
    if model not in SUMMARIZER_MODELS:
        errors.append(f"{where}.model: must be one of {_names(SUMMARIZER_MODELS)}")
    elif uses_fraction:
        errors.append(f"{where}: fraction triggers need a model profile (max_input_tokens); {model!r} has none")
    return errors


def _check_context_size(kind: Any, value: Any, where: str, parameter: str) -> list[str]:
    # The rules of SummarizationMiddleware._validate_context_size and its trigger clauses.
    if kind not in CONTEXT_KINDS:
        return [f"{where}: unsupported context size {kind!r}; use {_names(CONTEXT_KINDS)}"]
    if kind == "fraction":
        if not _is_number(value) or not 0 < value <= 1:
            return [f"{where}: fractional {parameter} values must be between 0 and 1, got {value!r}"]
    elif not _is_int(value) or value <= 0:
        return [f"{where}: {parameter} thresholds must be whole numbers greater than 0, got {value!r}"]
    return []


def _check_context_editing(config: Any, where: str, checks: Checks) -> list[str]:
    if not isinstance(config, Mapping):
        return [f"{where}: must be an object"]
    errors = [f"{where}.{key}: unknown setting" for key in config if key not in DEFAULT_SETTINGS["context_editing"]]
    if not _is_int(config.get("trigger"), minimum=1):
        errors.append(f"{where}.trigger: must be a whole number of tokens ≥ 1")
    for key in ("keep", "clear_at_least"):
        if not _is_int(config.get(key), minimum=0):
            errors.append(f"{where}.{key}: must be a whole number ≥ 0")
    excluded = config.get("exclude_tools")
    if not isinstance(excluded, list) or not all(isinstance(name, str) for name in excluded):
        errors.append(f"{where}.exclude_tools: must be a list of tool names")
    elif unknown := set(excluded) - checks.all_tools:
        errors.append(f"{where}.exclude_tools: unknown tool {_names(unknown)}")
    placeholder = config.get("placeholder")
    if not isinstance(placeholder, str) or not placeholder.strip() or len(placeholder) > 100:
        errors.append(f"{where}.placeholder: must be a non-empty text of at most 100 characters")
    if not isinstance(config.get("clear_tool_inputs"), bool):
        errors.append(f"{where}.clear_tool_inputs: must be true or false")
    return errors


def _check_approval(config: Any, where: str, checks: Checks, tools: set[str], gate_everything: bool) -> list[str]:
    if not isinstance(config, Mapping):
        return [f"{where}: must be an object"]
    errors = [f"{where}.{key}: unknown setting" for key in config if key not in DEFAULT_SETTINGS["approval"]]
    gated = config.get("tools")
    if not isinstance(gated, Mapping):
        errors.append(f"{where}.tools: must be an object of tool name → approval rule")
        gated = {}
    must_gate = set(checks.sensitive_tools) if gate_everything else set(checks.sensitive_tools) & tools
    if missing := must_gate - set(gated):
        errors.append(f"{where}.tools: {_names(missing)} must keep an approval (sensitive tools)")
    for name, rule in gated.items():
        at = f"{where}.tools.{name}"
        # The runtime's own gates (its shell) stand whichever graphs are registered.
        if name not in checks.all_tools and name not in DEFAULT_SETTINGS["approval"]["tools"]:
            errors.append(f"{at}: unknown tool")
            continue
        if not isinstance(rule, Mapping):
            errors.append(f"{at}: must be an object with allowed_decisions and reason")
            continue
        errors += [f"{at}.{key}: unknown setting" for key in rule if key not in _TOOL_APPROVAL_KEYS]
        decisions = rule.get("allowed_decisions")
        if not isinstance(decisions, list) or not decisions:
            errors.append(
                f"{at}.allowed_decisions: must be a non-empty list of decision types (e.g. ['approve', 'reject'])"
            )
        elif unknown := [d for d in decisions if d not in DECISIONS]:
            errors.append(
                f"{at}.allowed_decisions: {_names(map(str, unknown))} not allowed; choose from {_names(DECISIONS)}"
            )
        reason = rule.get("reason")
        if not isinstance(reason, str) or not reason:
            errors.append(f"{at}.reason: must name a wait reason code")
        elif checks.reason_exists is not None and not checks.reason_exists(reason):
            errors.append(f"{at}.reason: {reason!r} is not a known wait reason code")
        if "commands" in rule:
            commands = rule["commands"]
            if name != SHELL_TOOL:
                errors.append(f"{at}.commands: only the {SHELL_TOOL} tool is gated by command")
            elif not isinstance(commands, list) or not commands:
                errors.append(f"{at}.commands: must be a non-empty list of command names (e.g. ['rm'])")
            elif not all(isinstance(c, str) and re.fullmatch(r"[A-Za-z0-9_.+-]+", c) for c in commands):
                errors.append(f"{at}.commands: each entry is one command name, such as rm")
        if "threshold" in rule:
            if name not in checks.amount_tools:
                errors.append(f"{at}.threshold: only {_names(checks.amount_tools)} can be gated by amount")
            elif not _is_int(rule["threshold"], minimum=0):
                errors.append(f"{at}.threshold: must be a whole amount ≥ 0")
    owner, backup = config.get("owner"), config.get("backup_owner")
    if not isinstance(owner, str) or not owner:
        errors.append(f"{where}.owner: an approval needs an owner (a user or group)")
    elif checks.owner_exists is not None and not checks.owner_exists(owner):
        errors.append(f"{where}.owner: no user or group named {owner!r}")
    if not isinstance(backup, str):
        errors.append(f"{where}.backup_owner: must be a user or group name, or empty")
    elif backup:
        if backup == owner:
            errors.append(f"{where}.backup_owner: must differ from the owner")
        elif checks.owner_exists is not None and not checks.owner_exists(backup):
            errors.append(f"{where}.backup_owner: no user or group named {backup!r}")
    if not _is_int(config.get("deadline_minutes"), minimum=1, maximum=MAX_DEADLINE_MINUTES):
        errors.append(f"{where}.deadline_minutes: a deadline must be positive (1 to {MAX_DEADLINE_MINUTES} minutes)")
    expiry = config.get("on_expiry")
    if expiry not in ON_EXPIRY:
        errors.append(f"{where}.on_expiry: must be one of {_names(ON_EXPIRY)}")
    elif expiry == "escalate" and not backup:
        errors.append(f"{where}.on_expiry: “escalate” needs a backup_owner")
    return errors


def _unknown_keys(settings: Mapping[str, Any], where: str) -> list[str]:
    return [f"{where}.{key}: unknown section" for key in settings if key not in DEFAULT_SETTINGS]


def _is_int(value: Any, *, minimum: int | None = None, maximum: int | None = None) -> bool:
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    return (minimum is None or value >= minimum) and (maximum is None or value <= maximum)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _names(values: Iterable[Any]) -> str:
    return ", ".join(sorted(str(v) for v in values))


def _unique(errors: list[str]) -> list[str]:
    return list(dict.fromkeys(errors))


# --- warnings: valid settings that would stop every run ------------------------

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
        f"{where} {effect.format(agents=_names(agents), its='its' if len(agents) == 1 else 'their')}"
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
    return _is_int(value) and value == 0


def _source(document: Mapping[str, Any], agent: str, where: str) -> str:
    """Where the setting comes from: the agent's override when it sets it, else the default."""
    node: Any = ((document.get("agents") or {}).get(agent)) or {}
    for key in where.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return f"default.{where}"
        node = node[key]
    return f"agents.{agent}.{where}"


# --- reading ------------------------------------------------------------------


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


# --- the schema: one typed entry per setting, read off the defaults (the admin's form) ----

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


# --- the database side: checks against the team, the stack of a run ------------


def team_checks() -> Checks:
    """Checks against the registered graphs: their agents' tools, existing users and groups, known wait reasons."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from receipts.models import WaitReason

    user_model = get_user_model()

    def owner_exists(name: str) -> bool:
        return user_model.objects.filter(**{user_model.USERNAME_FIELD: name}).exists() or (
            Group.objects.filter(name=name).exists()
        )

    return Checks(
        tools_by_agent=agent_tools(),
        owner_exists=owner_exists,
        reason_exists=lambda code: WaitReason.objects.filter(code=code).exists(),
    )


# --- what the registered graphs describe (agents.host.registry.GraphDescription) ------------


def agent_tools() -> dict[str, set[str]]:
    """Every described agent with its tool names, across the registered graphs."""
    from agents.host import registry

    tools: dict[str, set[str]] = {}
    for described in registry.descriptions():
        for agent, names in described.agents.items():
            tools.setdefault(agent, set()).update(names)
    return tools


def sensitive_tools() -> dict[str, str]:
    from agents.host import registry

    return {tool: reason for d in registry.descriptions() for tool, reason in d.sensitive_tools.items()}


def effect_tools() -> frozenset[str]:
    from agents.host import registry

    return frozenset().union(*(d.effect_tools for d in registry.descriptions()))


def amounts() -> dict[str, Callable[[Mapping[str, Any]], int]]:
    """Per tool, the amount of a call (from its arguments) that an approval threshold compares."""
    from agents.host import registry

    return {tool: amount for d in registry.descriptions() for tool, amount in d.amounts.items()}


def retryable_errors() -> dict[str, type[Exception] | None]:
    from agents.host import registry

    extra = {name: cls for d in registry.descriptions() for name, cls in d.retryable_errors.items()}
    return {**RETRYABLE_ERRORS, **extra}


def limits_by_agent() -> dict[str, Mapping[str, Any]]:
    """Each described agent with the limits its own graph registers (the first graph that names it)."""
    from agents.host import registry

    found: dict[str, Mapping[str, Any]] = {}
    for described in registry.descriptions():
        for agent in described.agents:
            found.setdefault(agent, described.limits)
    return found


def graph_limits(*, graph: str | None = None, agent: str = "") -> Mapping[str, Any]:
    """The limits the registered `graph` sets for its agents; without a graph, those of `agent`'s graph."""
    from agents.host import registry

    if graph:
        described = registry.description(graph)
        return described.limits if described is not None else {}
    return limits_by_agent().get(agent) or {}


def workspace_agents() -> frozenset[str]:
    """The agents their graphs say work in a per-run workspace (a shell and file search there)."""
    from agents.host import registry

    return frozenset().union(*(d.workspace_agents for d in registry.descriptions()))


def variants() -> dict[str, Any]:
    """The named variants of the registered graphs (the demo's scenarios), by name."""
    from agents.host import registry

    return {name: variant for d in registry.descriptions() for name, variant in d.variants.items()}


@dataclass(frozen=True)
class _Plain:
    """An agent as its graph describes it, without a variant's overrides."""

    route_version: str
    limits: Mapping[str, Any] = field(default_factory=dict)

    def tool_names(self, agent: str) -> list[str]:
        return sorted(agent_tools().get(agent, ()))


def _plain(agent: str) -> _Plain:
    from agents.host import registry

    for described in registry.descriptions():
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
    from agents.limits.stack import build_layers

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
    from agents.host import registry
    from agents.models import RunLimits

    pin = RunLimits.objects.select_related("version").filter(run=run).first()
    if pin is None:
        return {"run": run.pk, "version": None, "pinned_at": None, "agents": []}
    described = registry.description(getattr(run, "graph", "") or "")
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
