"""The coder's stack and the provider tool search setting, as the preview and the run page show them."""

from __future__ import annotations

import pytest
from langchain.agents.middleware import ProviderToolSearchMiddleware

from agents.demo.scenarios import SCENARIOS
from agents.host.scripted import MODEL_ENV
from agents.limits import AgentSettings, LimitsError, preview, resolve, team_checks, validate_document
from agents.limits.stack import build_layers

TOOL_SEARCH = {"tool_search": {"enabled": True, "deferred_tools": ["confirm_with_supplier"]}}
SALES_TOOLS = ["check_inventory", "place_order", "confirm_with_supplier"]


def _sales(overrides=None) -> AgentSettings:
    return AgentSettings("sales", resolve({}, "sales", overrides))


def test_tool_search_with_the_scripted_model_is_shown_as_not_applicable(monkeypatch):
    monkeypatch.delenv(MODEL_ENV, raising=False)

    rows = [layer.describe() for layer in build_layers(_sales(TOOL_SEARCH), SALES_TOOLS)]

    (row,) = [r for r in rows if r["middleware"] == "ProviderToolSearchMiddleware"]
    assert row["name"] == "ProviderToolSearchMiddleware (off)"
    assert row["args"]["status"] == "not applicable: the scripted model has no provider tool search"


def test_tool_search_with_a_provider_without_it_is_shown_as_not_applicable(monkeypatch):
    monkeypatch.setenv(MODEL_ENV, "ollama:llama3")

    rows = [layer.describe() for layer in build_layers(_sales(TOOL_SEARCH), SALES_TOOLS)]

    (row,) = [r for r in rows if r["middleware"] == "ProviderToolSearchMiddleware"]
    assert row["args"]["status"] == "not applicable: provider 'ollama' has no provider tool search"


def test_tool_search_with_a_provider_that_has_it_defers_the_chosen_tools(monkeypatch):
    monkeypatch.setenv(MODEL_ENV, "anthropic:claude-sonnet-4-5")

    layers = build_layers(_sales(TOOL_SEARCH), SALES_TOOLS)

    (search,) = [layer.middleware for layer in layers if isinstance(layer.middleware, ProviderToolSearchMiddleware)]
    assert search.searchable_tool_names == {"confirm_with_supplier"}


def test_tool_search_is_absent_unless_enabled(monkeypatch):
    monkeypatch.setenv(MODEL_ENV, "anthropic:claude-sonnet-4-5")

    rows = [layer.describe()["middleware"] for layer in build_layers(_sales(), SALES_TOOLS)]

    assert "ProviderToolSearchMiddleware" not in rows


def test_tool_search_must_defer_a_tool_the_agent_has(db):
    document = {"agents": {"sales": {"tool_search": {"enabled": True, "deferred_tools": ["refund"]}}}}

    with pytest.raises(LimitsError) as caught:
        validate_document(document, team_checks())

    assert "agents.sales.tool_search.deferred_tools: unknown tool refund" in caught.value.errors


def test_tool_search_enabled_with_nothing_deferred_is_refused(db):
    document = {"agents": {"sales": {"tool_search": {"enabled": True, "deferred_tools": []}}}}

    with pytest.raises(LimitsError) as caught:
        validate_document(document, team_checks())

    assert any(e.startswith("agents.sales.tool_search.deferred_tools: name at least one") for e in caught.value.errors)


def test_the_coder_scenarios_preview_shows_its_shell_in_its_workspace(db):
    rows = preview({}, "coder", SCENARIOS["coder_fixes_function"])

    (shell,) = [row for row in rows if row["middleware"] == "ShellToolMiddleware"]
    assert shell["args"]["enabled"] is True
    assert shell["args"]["workspace"] == "var/workspaces/<operation_id>"
    assert shell["args"]["execution_policy"]["sandbox"] == "namespace"
    assert shell["args"]["redaction_rules"] == ["secret_assignment:redact", "api_key:redact"]
    assert [row["middleware"] for row in rows][-1] == "SidewispMiddleware"


def test_the_coder_scenarios_gate_destructive_commands(db):
    rows = preview({}, "coder", SCENARIOS["coder_fixes_function"])

    (approval,) = [row for row in rows if row["middleware"] == "HumanInTheLoopMiddleware"]
    assert approval["args"]["interrupt_on"]["shell"]["reason"] == "destructive_command"
    assert "rm" in approval["args"]["interrupt_on"]["shell"]["commands"]


def test_a_shell_gate_on_a_tool_other_than_the_shell_is_refused(db):
    rule = {"allowed_decisions": ["approve"], "reason": "purchase_approval", "commands": ["rm"]}
    document = {"agents": {"sales": {"approval": {"tools": {"check_inventory": rule}}}}}

    with pytest.raises(LimitsError) as caught:
        validate_document(document, team_checks())

    assert "agents.sales.approval.tools.check_inventory.commands: only the shell tool is gated by command" in (
        caught.value.errors
    )
