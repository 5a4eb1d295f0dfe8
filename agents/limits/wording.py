"""The limits form in words (issue 30 §5): a human label and help text for every setting, never a raw key.

`agents.limits.setting.schema` gives the settings; this gives what the admin's form calls them. A setting
missing here still gets a label made of its key (tests/agents/test_limits_wording.py checks none is).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agents.limits.setting import Setting

SECTIONS: dict[str, str] = {
    "tool_call_limit": "Tool call limits",
    "per_tool_limits": "Limits per tool",
    "model_call_limit": "Model call limits",
    "tool_retry": "Retrying a failed tool call",
    "model_retry": "Retrying a failed model call",
    "tool_errors": "Tool errors shown to the model",
    "summarization": "Summarizing a long history",
    "context_editing": "Clearing old tool results",
    "approval": "Approval before sensitive tools",
    "shell": "Shell in the run's workspace",
    "file_search": "File search in the run's workspace",
    "tool_search": "Tool search",
    "dry_run": "Dry run",
}

# path -> (label, help text)
WORDS: dict[str, tuple[str, str]] = {
    "tool_call_limit.thread_limit": ("Tool calls per conversation", "The most tool calls in one conversation thread."),
    "tool_call_limit.run_limit": ("Tool calls per run", "The most tool calls in one run of the agent."),
    "tool_call_limit.exit_behavior": ("When the tool limit is reached", "Go on without it, raise an error, or end."),
    "per_tool_limits": ("Limit per tool", 'A limit for single tools, e.g. {"refund": {"run_limit": 1}}.'),
    "model_call_limit.thread_limit": ("Model calls per conversation", "The most model calls in one thread."),
    "model_call_limit.run_limit": ("Model calls per run", "The most model calls in one run of the agent."),
    "model_call_limit.exit_behavior": ("When the model limit is reached", "End the run, or raise an error."),
    "tool_retry.max_retries": ("Tool retries", "How many times a failed tool call is tried again."),
    "tool_retry.retry_on": ("Tool errors retried", "Only these errors are retried."),
    "tool_retry.on_failure": ("When tool retries run out", "Tell the model the error, or raise it."),
    "tool_retry.backoff_factor": ("Tool retry backoff", "Each wait is this many times the one before."),
    "tool_retry.initial_delay": ("First tool retry after (s)", "Seconds before the first retry."),
    "tool_retry.max_delay": ("Longest tool retry wait (s)", "No wait between retries is longer."),
    "tool_retry.jitter": ("Randomize tool retry waits", "Spread retries so they do not all come at once."),
    "model_retry.max_retries": ("Model retries", "How many times a failed model call is tried again."),
    "model_retry.retry_on": ("Model errors retried", "Only these errors are retried."),
    "model_retry.on_failure": ("When model retries run out", "Continue with an error message, or raise it."),
    "model_retry.backoff_factor": ("Model retry backoff", "Each wait is this many times the one before."),
    "model_retry.initial_delay": ("First model retry after (s)", "Seconds before the first retry."),
    "model_retry.max_delay": ("Longest model retry wait (s)", "No wait between retries is longer."),
    "model_retry.jitter": ("Randomize model retry waits", "Spread retries so they do not all come at once."),
    "tool_errors.tools": ("Tools whose errors the model sees", "Their errors become a message to the model."),
    "tool_errors.message": ("Message for a tool error", "What the model is told when a tool fails."),
    "tool_errors.retried_message": ("Message after retries", "What the model is told when retries ran out."),
    "summarization.trigger": ("Summarize when", 'When the history is summarized, e.g. {"tokens": 4000}.'),
    "summarization.keep": ("Messages kept", 'What stays as it is after a summary, e.g. {"messages": 20}.'),
    "summarization.model": ("Summarizing model", "The model that writes the summary."),
    "context_editing.trigger": ("Clear tool results above (tokens)", "Old tool results are cleared past this size."),
    "context_editing.keep": ("Tool results kept", "How many of the newest tool results stay."),
    "context_editing.clear_at_least": ("Clear at least (tokens)", "Clear no fewer tokens than this at a time."),
    "context_editing.exclude_tools": ("Tools never cleared", "Results of these tools always stay."),
    "context_editing.placeholder": ("Placeholder text", "What a cleared result is replaced by."),
    "context_editing.clear_tool_inputs": ("Clear tool inputs too", "Also clear the arguments of cleared calls."),
    "approval.tools": ("Tools that need approval", 'Per tool: when it needs a person, e.g. {"refund": {}}.'),
    "approval.owner": ("Who approves", "The user or group that decides a wait."),
    "approval.backup_owner": ("Who approves next", "The wait goes to them when the first owner is late."),
    "approval.deadline_minutes": ("Approval deadline (minutes)", "How long a wait may wait for a decision."),
    "approval.on_expiry": ("When the deadline passes", "Reject the undecided wait, or escalate it."),
    "shell.enabled": ("Shell enabled", "Give the agent a shell in the run's workspace."),
    "shell.startup_commands": ("Commands at start", "Run in the workspace before the agent starts."),
    "shell.command_timeout": ("Command timeout (s)", "A command running longer is stopped."),
    "shell.max_output_lines": ("Output lines kept", "Longer output is cut to this many lines."),
    "shell.max_output_bytes": ("Output bytes kept", "Longer output is cut to this many bytes."),
    "shell.sandbox": ("Sandbox", "Where commands run."),
    "shell.redaction": ("Redaction rules", "What is hidden from command output before the model sees it."),
    "file_search.enabled": ("File search enabled", "Let the agent search files in the run's workspace."),
    "file_search.max_file_size_mb": ("Largest file searched (MB)", "Larger files are skipped."),
    "tool_search.enabled": ("Tool search enabled", "The model finds deferred tools by searching for them."),
    "tool_search.deferred_tools": ("Tools found by search", "Not given up front: found when the model asks."),
    "dry_run.emulate": ("Tools emulated in a dry run", "A dry run fakes these tools instead of calling them."),
}


def label(setting: Setting) -> str:
    found = WORDS.get(setting.path)
    return found[0] if found else setting.path.rsplit(".", 1)[-1].replace("_", " ").capitalize()


def help_text(setting: Setting) -> str:
    found = WORDS.get(setting.path)
    return found[1] if found else ""


def section(name: str) -> str:
    return SECTIONS.get(name, name.replace("_", " ").capitalize())


# --- validation messages in words (issue 30 §5): the form's user reads labels, never a key or a JSON path ---

_INDEX = re.compile(r"\[(\d+)\]")
_SNAKE = re.compile(r"\b[a-z]+(?:_[a-z]+)+\b")
_AGENT_PATH = re.compile(r"\bagents\.<agent>\.\w+")


def message(error: str, scope: str, settings: Iterable[Setting]) -> str:
    """A validation message ("default.section.key[0].part: what") as the settings form shows it.

    The place becomes the field's label (with what lies inside a structured value, in words), preceded by the
    scope when the problem is in another one (a default that an agent's settings break); a setting's key that
    the message names becomes that setting's label in quotes.
    """
    settings = list(settings)
    place, said, what = error.partition(": ")
    if not said:
        return _keys_in_words(error, "", settings)
    owner, rest = _scope_of(place)
    setting, where = _setting_in_words(rest, settings)
    if owner and owner != scope:
        who = "For every agent (the default)" if owner == "default" else f"For agent {owner.removeprefix('agents.')}"
        where = f"{who}, {where}" if where else who
    what = _keys_in_words(what, setting.section if setting else rest.split(".", 1)[0], settings, itself=setting)
    return f"{where}: {what}" if where else what


def place(path: str, settings: Iterable[Setting]) -> str:
    """Where a setting of a limits document is, in words: "agents.sales.tool_call_limit.run_limit" →
    "Agent sales · Tool calls per run" (a diff's row; the path is shown beside it for the JSON's editors)."""
    owner, rest = _scope_of(path)
    who = "Every agent (the default)" if owner == "default" else owner.replace("agents.", "Agent ", 1)
    return " · ".join(part for part in (who, _setting_in_words(rest, list(settings))[1]) if part)


def _setting_in_words(rest: str, settings: list[Setting]) -> tuple[Setting | None, str]:
    """The setting at `rest` (a path inside a scope) and the place in words: its label and what lies inside."""
    setting = _setting_at(rest, settings)
    if setting is not None:
        return setting, ", ".join([label(setting), *_inside(rest.removeprefix(setting.path), settings)])
    return None, section(rest.split(".", 1)[0]) if rest else ""


def _scope_of(place: str) -> tuple[str, str]:
    """("default" or "agents.<name>", the path inside it)."""
    if place == "default" or place.startswith("default."):
        return "default", place.removeprefix("default").removeprefix(".")
    if place.startswith("agents."):
        agent, _, rest = place.removeprefix("agents.").partition(".")
        return f"agents.{agent}", rest
    return "", place


def _setting_at(rest: str, settings: list[Setting]) -> Setting | None:
    found = [s for s in settings if rest == s.path or rest.startswith((f"{s.path}.", f"{s.path}["))]
    return max(found, key=lambda s: len(s.path), default=None)


def _inside(path: str, settings: list[Setting]) -> list[str]:
    """What lies inside a structured value, in words: ".refund.run_limit" → ["refund", "run limit"]."""
    keys = _keys(settings)
    path = _INDEX.sub(lambda m: f".entry {int(m.group(1)) + 1}", path)
    return [part.replace("_", " ") if part in keys else part for part in path.split(".") if part]


def _keys(settings: list[Setting]) -> set[str]:
    return {s.path.rsplit(".", 1)[-1] for s in settings}


def _keys_in_words(what: str, section_name: str, settings: list[Setting], itself: Setting | None = None) -> str:
    what = _AGENT_PATH.sub("in that agent's own settings", what)
    # Only the keys of settings: a tool, an error or a wait reason named in a message keeps its own name.
    own = {s.key: label(s) for s in settings if s.section == section_name and "." in s.path}
    keys = _keys(settings)

    def worded(match: re.Match[str]) -> str:
        key = match.group(0)
        if itself is not None and "." in itself.path and key == itself.key:
            return "the value"  # the field's label already opens the message
        if key in own:
            return f"“{own[key]}”"
        return key.replace("_", " ") if key in keys else key

    return _SNAKE.sub(worded, what)
