"""The limits form's validation messages in words (issue 30 §5): each kind of invalid value is refused on its
field with the field's human label, never its raw key or a JSON path, in the row and in the summary above."""

from __future__ import annotations

import re
from html import unescape

import pytest

from agents.limits import wording
from agents.limits.setting import schema
from agents.models import LimitsVersion
from tests.agents.test_admin_limits_form import _post, alex, oona, world

__all__ = ["alex", "oona", "world"]

# (what is wrong, the scope, the fields posted, the field the message is on, words the message must hold)
CASES = [
    (
        "a whole number past another",
        "agents.sales",
        {"tool_call_limit__run_limit": "50"},
        "tool_call_limit__run_limit",
        "Tool calls per run: the value (50) cannot exceed “Tool calls per conversation” (20)",
    ),
    (
        "a whole number out of range",
        "agents.sales",
        {"tool_retry__max_retries": "99"},
        "tool_retry__max_retries",
        "Tool retries: must be a whole number from 0 to",
    ),
    (
        "a number below another",
        "agents.sales",
        {"tool_retry__initial_delay": "5", "tool_retry__max_delay": "1"},
        "tool_retry__max_delay",
        "Longest tool retry wait (s): must be at least “First tool retry after (s)” (5)",
    ),
    (
        "a choice that needs another setting",
        "agents.sales",
        {"approval__on_expiry": "escalate", "approval__backup_owner": ""},
        "approval__on_expiry",
        "When the deadline passes: “escalate” needs a “Who approves next”",
    ),
    (
        "a tool list naming an unknown tool",
        "agents.sales",
        {"context_editing__exclude_tools": "no_such_tool"},
        "context_editing__exclude_tools",
        "Tools never cleared: unknown tool no_such_tool",  # the tool keeps its own name
    ),
    (
        "a text without what it must contain",
        "agents.sales",
        {"tool_errors__retried_message": "it failed"},
        "tool_errors__retried_message",
        "Message after retries: must contain",
    ),
    (
        "a structured value with a bad entry",
        "agents.sales",
        {"shell__redaction": '[{"type": "token", "pattern": "(", "strategy": "redact"}]'},
        "shell__redaction",
        "Redaction rules, entry 1, pattern: not a valid regular expression",
    ),
    (
        "a structured list with an unknown kind",
        "agents.sales",
        {"summarization__trigger": '[{"bogus": 1}]'},
        "summarization__trigger",
        "Summarize when, entry 1, bogus: unsupported context size",
    ),
    (
        "a section left without any limit",
        "agents.sales",
        {"tool_call_limit__thread_limit": "", "tool_call_limit__run_limit": ""},
        "tool_call_limit__thread_limit",
        "Tool call limits: at least one limit must be specified "
        "(“Tool calls per conversation” or “Tool calls per run”)",
    ),
]
RAW_KEYS = re.compile(r"\b[a-z]+(?:_[a-z]+)+\b|\b(?:default|agents)\.[a-z_]+")
# The snake_case words a message may keep: names that are not settings (tools, errors, reasons).
NOT_KEYS = {"no_such_tool"}


def _raw_keys(text: str) -> set[str]:
    keys = {s.path.rsplit(".", 1)[-1] for s in schema()} | {s.section for s in schema()}
    return {m for m in RAW_KEYS.findall(text) if m not in NOT_KEYS and (m in keys or "." in m)}


@pytest.mark.parametrize(("scope", "changed", "field", "said"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_kind_of_invalid_value_is_refused_in_words(client, alex, world, scope, changed, field, said):
    client.force_login(alex)

    response = _post(client, scope, **changed)

    assert response.status_code == 400
    message = response.context["form"].errors[field][0]
    label = response.context["form"].fields[field].label
    page = unescape(response.content.decode())
    row = page.split(f"field-{field}", 1)[1].split("</fieldset>", 1)[0]
    summary = page.split('id="error-summary"', 1)[1].split("</div>", 1)[0]
    assert message.startswith(said.split(":", 1)[0] + ":")
    assert said in message
    assert said in row
    assert re.search(rf'<a href="#id_{field}">{re.escape(label)}</a>: ', summary)
    assert _raw_keys(message) == set(), message
    assert _raw_keys(summary) == set(), summary
    assert LimitsVersion.current() == world


def test_a_message_about_another_scope_names_it_in_words():
    settings = schema()

    said = wording.message(
        "agents.sales.tool_call_limit.run_limit: run_limit (8) cannot exceed thread_limit (1)", "default", settings
    )
    shell = wording.message(
        "default.shell.enabled: turn the shell on for one agent (agents.<agent>.shell), not by default",
        "default",
        settings,
    )

    assert said == "For agent sales, Tool calls per run: the value (8) cannot exceed “Tool calls per conversation” (1)"
    assert shell == "Shell enabled: turn the shell on for one agent (in that agent's own settings), not by default"


def test_names_that_are_not_settings_keep_their_own_spelling():
    said = wording.message(
        "agents.sales.approval.tools.refund_order.reason: 'purchase_approval' is not a known wait reason code",
        "agents.sales",
        schema(),
    )

    assert said == "Tools that need approval, refund_order, reason: 'purchase_approval' is not a known wait reason code"
