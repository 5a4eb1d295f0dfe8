"""Every middleware setting of an agent with its runtime default, and the fixed values settings choose from.

No graph's names are in here: a graph adds its own (its exception classes, its gated tools) in
its `GraphDescription.limits`, laid over these for its agents only (`agents.limits.document.resolve`).
"""

from __future__ import annotations

from typing import Any

# Which errors a retry may be configured to retry: names an admin picks from, never free text.
# "default" is the library's own rule (every Exception except a ModelError marked not retryable).
# Registered graphs add their own (GraphDescription.retryable_errors), see `agents.limits.described.retryable_errors`.
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
