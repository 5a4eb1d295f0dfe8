"""The limits room: every middleware setting of an agent, as one versioned document an admin edits.

An agent's settings lay the runtime defaults (defaults), its own graph's limits (described), the
document's default and the agent's override (document). validation, rules and stoppers check a
document; setting, form and admin are its admin form; stack builds the middleware a run gets and
resolution reads it back. The package re-exports the names other rooms use (`from agents.limits import X`).

May import: agents.models, agents.observe, the runtime's lower modules (agents.host.entries, graphs,
workspaces, scripted), receipts (models, admin helpers, audit), Django, LangChain; never:
agents.host.registry and the modules above it (runner, waits, hosting, execution), agents.tasks,
agents.demo, sidewisp.
"""

from agents.limits.checks import Checks, team_checks
from agents.limits.defaults import (
    BUILTIN_REDACTIONS,
    CONTEXT_KINDS,
    DECISIONS,
    DEFAULT_DOCUMENT,
    DEFAULT_SETTINGS,
    FILE_SEARCH_TOOLS,
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
    RETRYABLE_ERRORS,
    SANDBOXES,
    SHELL_TOOL,
    SUMMARIZER_MODELS,
    TOOL_EXIT_BEHAVIORS,
    TOOL_SEARCH_PROVIDERS,
)
from agents.limits.described import (
    agent_tools,
    amounts,
    effect_tools,
    graph_limits,
    limits_by_agent,
    retryable_errors,
    sensitive_tools,
    variants,
    workspace_agents,
    workspace_tool_names,
)
from agents.limits.document import AgentSettings, LimitsError, changes, diff, flatten, merge, resolve
from agents.limits.resolution import effective_stack, preview
from agents.limits.rules import check_settings
from agents.limits.setting import (
    CHOICES,
    ERROR_LISTS,
    NULL_MEANS_ALL,
    NULLABLE_NUMBERS,
    TOOL_LISTS,
    Setting,
    schema,
    setting_of_error,
    setting_value,
    with_setting,
)
from agents.limits.stoppers import stopping_warnings
from agents.limits.validation import validate_document

__all__ = [
    "BUILTIN_REDACTIONS",
    "CHOICES",
    "CONTEXT_KINDS",
    "DECISIONS",
    "DEFAULT_DOCUMENT",
    "DEFAULT_SETTINGS",
    "ERROR_LISTS",
    "FILE_SEARCH_TOOLS",
    "MAX_COMMAND_TIMEOUT",
    "MAX_DEADLINE_MINUTES",
    "MAX_DELAY",
    "MAX_INITIAL_DELAY",
    "MAX_RETRIES",
    "MAX_STARTUP_COMMANDS",
    "MESSAGE_FIELDS",
    "MODEL_EXIT_BEHAVIORS",
    "NULLABLE_NUMBERS",
    "NULL_MEANS_ALL",
    "ON_EXPIRY",
    "ON_FAILURE",
    "REDACTION_STRATEGIES",
    "RETRIED_MARKER",
    "RETRYABLE_ERRORS",
    "SANDBOXES",
    "SHELL_TOOL",
    "SUMMARIZER_MODELS",
    "TOOL_EXIT_BEHAVIORS",
    "TOOL_LISTS",
    "TOOL_SEARCH_PROVIDERS",
    "AgentSettings",
    "Checks",
    "LimitsError",
    "Setting",
    "agent_tools",
    "amounts",
    "changes",
    "check_settings",
    "diff",
    "effect_tools",
    "effective_stack",
    "flatten",
    "graph_limits",
    "limits_by_agent",
    "merge",
    "preview",
    "resolve",
    "retryable_errors",
    "schema",
    "sensitive_tools",
    "setting_of_error",
    "setting_value",
    "stopping_warnings",
    "team_checks",
    "validate_document",
    "variants",
    "with_setting",
    "workspace_agents",
    "workspace_tool_names",
]
