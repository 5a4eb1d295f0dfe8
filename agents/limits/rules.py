"""The rules of one agent's (or the default's) resolved settings: one check per section, each naming its field.

They mirror the rules the installed LangChain middleware enforce in their constructors and add
Sidewisp's own. Every message reads "where: what", e.g. "default.tool_retry.max_delay: must be at least
initial_delay (0.01)".
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping
from typing import Any

from agents.limits.checks import Checks
from agents.limits.defaults import (
    BUILTIN_REDACTIONS,
    CONTEXT_KINDS,
    DECISIONS,
    DEFAULT_SETTINGS,
    MAX_COMMAND_TIMEOUT,
    MAX_DEADLINE_MINUTES,
    MAX_DELAY,
    MAX_INITIAL_DELAY,
    MAX_RETRIES,
    MAX_STARTUP_COMMANDS,
    MESSAGE_FIELDS,
    MODEL_EXIT_BEHAVIORS,
    ON_EXPIRY,
    ON_FAILURE,
    REDACTION_STRATEGIES,
    RETRIED_MARKER,
    SANDBOXES,
    SHELL_TOOL,
    SUMMARIZER_MODELS,
    TOOL_EXIT_BEHAVIORS,
)
from agents.limits.described import workspace_agents
from agents.limits.document import merge

_LIMIT_KEYS = ("thread_limit", "run_limit", "exit_behavior")
_TOOL_APPROVAL_KEYS = ("allowed_decisions", "reason", "threshold", "commands")


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
        errors.append(f"{where}.enabled: only {listed(workspace_agents())} works in a workspace with a shell")
    commands = config.get("startup_commands")
    if not isinstance(commands, list) or len(commands) > MAX_STARTUP_COMMANDS:
        errors.append(f"{where}.startup_commands: must be a list of at most {MAX_STARTUP_COMMANDS} commands")
    elif not all(isinstance(c, str) and c.strip() and len(c) <= 200 and "\n" not in c for c in commands):
        errors.append(f"{where}.startup_commands: each command is one line of 1 to 200 characters")
    timeout = config.get("command_timeout")
    if not is_number(timeout) or not 0 < timeout <= MAX_COMMAND_TIMEOUT:
        errors.append(f"{where}.command_timeout: must be a number of seconds above 0, at most {MAX_COMMAND_TIMEOUT}")
    if not is_int(config.get("max_output_lines"), minimum=1, maximum=10_000):
        errors.append(f"{where}.max_output_lines: must be a whole number from 1 to 10000")
    size = config.get("max_output_bytes")
    if size is not None and not is_int(size, minimum=1, maximum=1_000_000):
        errors.append(f"{where}.max_output_bytes: must be a whole number from 1 to 1000000, or empty for no limit")
    if config.get("sandbox") not in SANDBOXES:
        errors.append(f"{where}.sandbox: must be one of {listed(SANDBOXES)}")
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
            errors.append(f"{where}.pattern: needed unless the type is built in ({listed(BUILTIN_REDACTIONS)})")
    elif not isinstance(pattern, str) or not pattern:
        errors.append(f"{where}.pattern: must be a regular expression")
    else:
        try:
            re.compile(pattern)
        except re.error as exc:
            errors.append(f"{where}.pattern: not a valid regular expression ({exc})")
    if rule.get("strategy", "redact") not in REDACTION_STRATEGIES:
        errors.append(f"{where}.strategy: must be one of {listed(REDACTION_STRATEGIES)}")
    return errors


def _check_file_search(config: Any, where: str) -> list[str]:
    if not isinstance(config, Mapping):
        return [f"{where}: must be an object"]
    errors = [f"{where}.{key}: unknown setting" for key in config if key not in DEFAULT_SETTINGS["file_search"]]
    if not isinstance(config.get("enabled"), bool):
        errors.append(f"{where}.enabled: must be true or false")
    if not is_int(config.get("max_file_size_mb"), minimum=1, maximum=100):
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
        errors.append(f"{where}.deferred_tools: unknown tool {listed(unknown)}")
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
        errors.append(f"{where}.emulate: unknown tool {listed(unknown)}")
    if missing := (effect_tools & tools) - set(emulate):
        errors.append(f"{where}.emulate: a dry run must emulate every tool with effects; add {listed(missing)}")
    return errors


def _check_limit(limit: Any, where: str, behaviors: tuple[str, ...], global_limit: bool | None) -> list[str]:
    if not isinstance(limit, Mapping):
        return [f"{where}: must be an object with thread_limit, run_limit and exit_behavior"]
    errors = [f"{where}.{key}: unknown setting" for key in limit if key not in _LIMIT_KEYS]
    thread, run = limit.get("thread_limit"), limit.get("run_limit")
    for key, value in (("thread_limit", thread), ("run_limit", run)):
        if value is not None and not is_int(value, minimum=0):
            errors.append(f"{where}.{key}: must be a whole number ≥ 0, or empty for no limit")
    if thread is None and run is None:
        errors.append(f"{where}: at least one limit must be specified (thread_limit or run_limit)")
    elif is_int(thread) and is_int(run) and run > thread:
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
    if not is_int(retry.get("max_retries"), minimum=0, maximum=MAX_RETRIES):
        errors.append(f"{where}.max_retries: must be a whole number from 0 to {MAX_RETRIES}")
    for key, top in (("backoff_factor", 10.0), ("initial_delay", MAX_INITIAL_DELAY), ("max_delay", MAX_DELAY)):
        value = retry.get(key)
        if not is_number(value) or value < 0:
            errors.append(f"{where}.{key}: must be a number ≥ 0")
        elif value > top:
            errors.append(f"{where}.{key}: at most {top:g} seconds: a retry must not hold a worker for long")
    delays = retry.get("initial_delay"), retry.get("max_delay")
    if all(is_number(d) for d in delays) and delays[1] < delays[0]:
        errors.append(f"{where}.max_delay: must be at least initial_delay ({delays[0]:g})")
    if not isinstance(retry.get("jitter"), bool):
        errors.append(f"{where}.jitter: must be true or false")
    if retry.get("on_failure") not in ON_FAILURE:
        errors.append(f"{where}.on_failure: must be one of {', '.join(ON_FAILURE)}")
    retry_on = retry.get("retry_on")
    if not isinstance(retry_on, list) or not retry_on:
        errors.append(f"{where}.retry_on: name at least one error from: {listed(known)}")
    elif unknown := [name for name in retry_on if name not in known]:
        errors.append(f"{where}.retry_on: {listed(map(str, unknown))} not in the safe list: {listed(known)}")
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
            errors.append(f"{where}.tools: unknown tool {listed(unknown)}")
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
        return [f"{where}: unknown placeholder {listed(unknown)}; allowed: {{tool}}, {{error_type}}, {{attempts}}"]
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
        errors.append(f"{where}.model: must be one of {listed(SUMMARIZER_MODELS)}")
    elif uses_fraction:
        errors.append(f"{where}: fraction triggers need a model profile (max_input_tokens); {model!r} has none")
    return errors


def _check_context_size(kind: Any, value: Any, where: str, parameter: str) -> list[str]:
    # The rules of SummarizationMiddleware._validate_context_size and its trigger clauses.
    if kind not in CONTEXT_KINDS:
        return [f"{where}: unsupported context size {kind!r}; use {listed(CONTEXT_KINDS)}"]
    if kind == "fraction":
        if not is_number(value) or not 0 < value <= 1:
            return [f"{where}: fractional {parameter} values must be between 0 and 1, got {value!r}"]
    elif not is_int(value) or value <= 0:
        return [f"{where}: {parameter} thresholds must be whole numbers greater than 0, got {value!r}"]
    return []


def _check_context_editing(config: Any, where: str, checks: Checks) -> list[str]:
    if not isinstance(config, Mapping):
        return [f"{where}: must be an object"]
    errors = [f"{where}.{key}: unknown setting" for key in config if key not in DEFAULT_SETTINGS["context_editing"]]
    if not is_int(config.get("trigger"), minimum=1):
        errors.append(f"{where}.trigger: must be a whole number of tokens ≥ 1")
    for key in ("keep", "clear_at_least"):
        if not is_int(config.get(key), minimum=0):
            errors.append(f"{where}.{key}: must be a whole number ≥ 0")
    excluded = config.get("exclude_tools")
    if not isinstance(excluded, list) or not all(isinstance(name, str) for name in excluded):
        errors.append(f"{where}.exclude_tools: must be a list of tool names")
    elif unknown := set(excluded) - checks.all_tools:
        errors.append(f"{where}.exclude_tools: unknown tool {listed(unknown)}")
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
        errors.append(f"{where}.tools: {listed(missing)} must keep an approval (sensitive tools)")
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
                f"{at}.allowed_decisions: {listed(map(str, unknown))} not allowed; choose from {listed(DECISIONS)}"
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
                errors.append(f"{at}.threshold: only {listed(checks.amount_tools)} can be gated by amount")
            elif not is_int(rule["threshold"], minimum=0):
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
    if not is_int(config.get("deadline_minutes"), minimum=1, maximum=MAX_DEADLINE_MINUTES):
        errors.append(f"{where}.deadline_minutes: a deadline must be positive (1 to {MAX_DEADLINE_MINUTES} minutes)")
    expiry = config.get("on_expiry")
    if expiry not in ON_EXPIRY:
        errors.append(f"{where}.on_expiry: must be one of {listed(ON_EXPIRY)}")
    elif expiry == "escalate" and not backup:
        errors.append(f"{where}.on_expiry: “escalate” needs a backup_owner")
    return errors


def is_int(value: Any, *, minimum: int | None = None, maximum: int | None = None) -> bool:
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    return (minimum is None or value >= minimum) and (maximum is None or value <= maximum)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def listed(values: Iterable[Any]) -> str:
    return ", ".join(sorted(str(v) for v in values))
