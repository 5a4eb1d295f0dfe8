"""The limits document: validation mirrors the middleware's own rules; a run keeps the version it started with."""

from __future__ import annotations

import copy
import importlib

import pytest
from langchain.agents.middleware import (
    ContextEditingMiddleware,
    HumanInTheLoopMiddleware,
    ModelCallLimitMiddleware,
    ModelRetryMiddleware,
    SummarizationMiddleware,
    ToolCallLimitMiddleware,
    ToolErrorMiddleware,
    ToolRetryMiddleware,
)

from agents import limits
from agents.demo.contracts import install_team_contracts
from agents.demo.limits import DEMO_LIMITS
from agents.demo.scenarios import SCENARIOS, create_run
from agents.demo.team import AGENT_TOOLS
from agents.demo.tools import TransientServiceError
from agents.host import runner
from agents.limits import DEFAULT_DOCUMENT, AgentSettings, Checks, LimitsError, resolve, validate_document
from agents.limits.stack import build_middleware
from agents.models import LimitsVersion, Order, RunLimits
from receipts.models import MiddlewareReport

SALES_TOOLS = ["check_inventory", "place_order", "confirm_with_supplier", "transfer_to_billing"]
TOOLS = {agent: {t.name for t in tools} for agent, tools in AGENT_TOOLS.items()}
TOOLS["triage"] |= {"transfer_to_sales", "transfer_to_support"}
TOOLS["sales"] |= {"transfer_to_billing"}
KNOWN_OWNERS = {"ops-lead", "approvers", "dana"}
CHECKS = Checks(TOOLS, owner_exists=KNOWN_OWNERS.__contains__, reason_exists=lambda code: code != "made_up")


def _with(path: str, value, document=None) -> dict:
    """A copy of the document (default: the built-in one) with one setting changed; None deletes it."""
    document = copy.deepcopy(document or DEFAULT_DOCUMENT)
    *parents, leaf = path.split(".")
    node = document
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return document


def _refused(document) -> list[str]:
    with pytest.raises(LimitsError) as refused:
        validate_document(document, CHECKS)
    return refused.value.errors


def _sales(document) -> list:
    # The demo's sales agent: its graph's own limits (the retried error, the order gate) under the document.
    return build_middleware(AgentSettings("sales", resolve(document, "sales", graph=DEMO_LIMITS)), SALES_TOOLS)


def _one(stack: list, cls: type):
    (found,) = [m for m in stack if type(m) is cls and getattr(m, "tool_name", None) is None]
    return found


# --- invalid settings are refused, naming the field ------------------------------

INVALID = [
    (
        "default.tool_call_limit",
        {"thread_limit": None, "run_limit": None, "exit_behavior": "continue"},
        "default.tool_call_limit: at least one limit must be specified (thread_limit or run_limit)",
    ),
    (
        "default.tool_call_limit",
        {"thread_limit": 3, "run_limit": 5, "exit_behavior": "continue"},
        "default.tool_call_limit.run_limit: run_limit (5) cannot exceed thread_limit (3)",
    ),
    (
        "default.tool_call_limit.exit_behavior",
        "end",
        "default.tool_call_limit.exit_behavior: “end” is only allowed when one tool is limited (a per-tool limit)",
    ),
    (
        "default.tool_call_limit.exit_behavior",
        "stop",
        "default.tool_call_limit.exit_behavior: must be one of continue, error, end, not 'stop'",
    ),
    (
        "default.model_call_limit.exit_behavior",
        "continue",
        "default.model_call_limit.exit_behavior: must be one of end, error, not 'continue'",
    ),
    (
        "default.model_call_limit",
        {"thread_limit": None, "run_limit": None, "exit_behavior": "end"},
        "default.model_call_limit: at least one limit must be specified (thread_limit or run_limit)",
    ),
    (
        "agents.sales.per_tool_limits",
        {"refund": {"run_limit": 1}},
        "agents.sales.per_tool_limits.refund: sales has no tool 'refund'",
    ),
    ("default.per_tool_limits", {"teleport": {"run_limit": 1}}, "default.per_tool_limits.teleport: unknown tool"),
    ("default.tool_retry.max_retries", -1, "default.tool_retry.max_retries: must be a whole number from 0 to 10"),
    (
        "default.tool_retry.initial_delay",
        3,
        "default.tool_retry.initial_delay: at most 1 seconds: a retry must not hold a worker for long",
    ),
    ("default.model_retry.backoff_factor", -1, "default.model_retry.backoff_factor: must be a number ≥ 0"),
    (
        "default.tool_retry.retry_on",
        ["os.system"],
        "default.tool_retry.retry_on: os.system not in the safe list: "
        "ConnectionError, TimeoutError, TransientServiceError, default",
    ),
    ("default.tool_retry.on_failure", "raise", "default.tool_retry.on_failure: must be one of continue, error"),
    (
        "default.tool_errors.message",
        "{tool} failed: {error}",
        "default.tool_errors.message: unknown placeholder error; allowed: {tool}, {error_type}, {attempts}",
    ),
    (
        "default.summarization.trigger",
        [{"messages": 0}],
        "default.summarization.trigger[0].messages: trigger thresholds must be whole numbers greater than 0, got 0",
    ),
    (
        "default.summarization.trigger",
        [{"fraction": 0.8}],
        "default.summarization: fraction triggers need a model profile (max_input_tokens); 'scripted' has none",
    ),
    (
        "default.summarization.keep",
        ["fraction", 2],
        "default.summarization.keep: fractional keep values must be between 0 and 1, got 2",
    ),
    ("default.context_editing.trigger", 0, "default.context_editing.trigger: must be a whole number of tokens ≥ 1"),
    (
        "default.approval.tools.place_order.allowed_decisions",
        [],
        "default.approval.tools.place_order.allowed_decisions: must be a non-empty list of decision types "
        "(e.g. ['approve', 'reject'])",
    ),
    (
        "default.approval.tools.refund",
        None,
        "default.approval.tools: refund must keep an approval (sensitive tools)",
    ),
    (
        "default.approval.tools.refund.reason",
        "made_up",
        "default.approval.tools.refund.reason: 'made_up' is not a known wait reason code",
    ),
    ("default.approval.owner", "nobody", "default.approval.owner: no user or group named 'nobody'"),
    (
        "default.approval.deadline_minutes",
        0,
        "default.approval.deadline_minutes: a deadline must be positive (1 to 43200 minutes)",
    ),
    ("default.approval.on_expiry", "escalate", "default.approval.on_expiry: “escalate” needs a backup_owner"),
    ("default.speed", {}, "default.speed: unknown section"),
    ("agents.janitor", {}, "agents.janitor: unknown agent; known: billing, coder, sales, support, triage"),
]


@pytest.mark.parametrize(("path", "value", "message"), INVALID, ids=[case[2][:60] for case in INVALID])
def test_an_invalid_setting_is_refused_with_its_message(path, value, message):
    assert message in _refused(_with(path, value))


def test_an_invalid_agent_override_names_the_agent():
    document = _with("agents.sales", {"tool_call_limit": {"run_limit": 30}})

    assert _refused(document) == [
        "agents.sales.tool_call_limit.run_limit: run_limit (30) cannot exceed thread_limit (20)"
    ]


def test_a_problem_of_the_default_is_reported_once():
    document = _with("agents.sales", {"note": 1}, _with("default.approval.owner", "nobody"))

    assert _refused(document).count("default.approval.owner: no user or group named 'nobody'") == 1


def test_the_built_in_defaults_are_valid():
    assert validate_document(DEFAULT_DOCUMENT, CHECKS) == DEFAULT_DOCUMENT


# --- valid settings build the expected middleware ----------------------------------


def test_the_built_in_defaults_keep_the_stack_order():
    stack = _sales(DEFAULT_DOCUMENT)

    assert [m.name for m in stack] == [
        "ToolErrorMiddleware",
        "ToolRetryMiddleware",
        "ModelRetryMiddleware",
        "ToolCallLimitMiddleware",
        "ModelCallLimitMiddleware",
        "SummarizationMiddleware",
        "ContextEditingMiddleware",
        "HumanInTheLoopMiddleware",
        "SidewispMiddleware",
    ]


def test_tool_call_limits_reach_the_middleware():
    document = _with("agents.sales", {"tool_call_limit": {"run_limit": 1, "thread_limit": 5, "exit_behavior": "error"}})
    document["agents"]["sales"]["per_tool_limits"] = {"check_inventory": {"run_limit": 2, "exit_behavior": "end"}}
    validate_document(document, CHECKS)

    stack = _sales(document)

    every = _one(stack, ToolCallLimitMiddleware)
    (per_tool,) = [m for m in stack if getattr(m, "tool_name", None) == "check_inventory"]
    assert (every.run_limit, every.thread_limit, every.exit_behavior) == (1, 5, "error")
    assert (per_tool.run_limit, per_tool.thread_limit, per_tool.exit_behavior) == (2, None, "end")


def test_a_per_tool_limit_of_another_agent_is_left_out():
    document = _with("default.per_tool_limits", {"refund": {"run_limit": 1}})
    validate_document(document, CHECKS)

    assert [m.name for m in _sales(document) if m.name.startswith("ToolCallLimit")] == ["ToolCallLimitMiddleware"]


def test_model_call_limits_reach_the_middleware():
    document = _with("default.model_call_limit", {"thread_limit": None, "run_limit": 3, "exit_behavior": "error"})
    validate_document(document, CHECKS)

    limit = _one(_sales(document), ModelCallLimitMiddleware)

    assert (limit.run_limit, limit.thread_limit, limit.exit_behavior) == (3, None, "error")


def test_retry_settings_reach_both_retry_middlewares():
    document = _with("default.tool_retry.retry_on", ["TransientServiceError", "TimeoutError"])
    document["default"]["model_retry"] = {**document["default"]["model_retry"], "max_retries": 0, "on_failure": "error"}
    validate_document(document, CHECKS)
    stack = _sales(document)

    tool, model = _one(stack, ToolRetryMiddleware), _one(stack, ModelRetryMiddleware)

    assert tool.retry_on == (TransientServiceError, TimeoutError)
    assert (tool.max_retries, tool.initial_delay, tool.max_delay, tool.jitter) == (2, 0.01, 0.05, False)
    assert (model.max_retries, model.on_failure) == (0, "error")


def test_a_tool_retry_that_continues_never_shows_the_exception_text():
    retry = _one(_sales(_with("default.tool_retry.on_failure", "continue")), ToolRetryMiddleware)

    message = retry.on_failure(ValueError("db=prod-7 password=hunter2"))

    assert message == "Tool call failed after 3 attempts with ValueError"


def test_the_tool_error_template_names_the_error_type_only():
    document = _with("default.tool_errors.message", "{tool} could not run ({error_type})")
    handler = _one(_sales(document), ToolErrorMiddleware)
    request = type("Request", (), {"tool_call": {"name": "place_order"}})()

    assert handler.on_error(KeyError("secret internals"), request) == "place_order could not run (KeyError)"


def test_summarization_and_context_editing_settings_reach_the_middleware():
    document = _with("default.summarization.trigger", [{"messages": 10, "tokens": 500}, {"messages": 30}])
    document["default"]["context_editing"] = {**document["default"]["context_editing"], "trigger": 99, "keep": 1}
    document["default"]["context_editing"]["exclude_tools"] = ["place_order"]
    validate_document(document, CHECKS)
    stack = _sales(document)

    summary, editing = _one(stack, SummarizationMiddleware), _one(stack, ContextEditingMiddleware)

    assert summary._trigger_clauses == [{"messages": 10, "tokens": 500}, {"messages": 30}]
    (edit,) = editing.edits
    assert (edit.trigger, edit.keep, edit.exclude_tools) == (99, 1, ("place_order",))


def test_approval_settings_reach_the_middleware_and_the_wait_policy():
    from agents.limits.stack import wait_policies

    document = _with("default.approval.tools.place_order.allowed_decisions", ["approve", "reject"])
    document["default"]["approval"]["owner"] = "dana"
    validate_document(document, CHECKS)
    settings = AgentSettings("sales", resolve(document, "sales", graph=DEMO_LIMITS))

    gate = _one(build_middleware(settings, SALES_TOOLS), HumanInTheLoopMiddleware)

    assert gate.interrupt_on["place_order"]["allowed_decisions"] == ["approve", "reject"]
    assert wait_policies(settings, SALES_TOOLS)["place_order"].owner == "dana"


# --- versions and runs -------------------------------------------------------------


@pytest.fixture
def contracts(transactional_db):
    install_team_contracts()


def _save(path: str, value, *, note: str = "") -> LimitsVersion:
    return LimitsVersion.save_new(_with(path, value, LimitsVersion.current().document), note=note)


def _reports(run, kind: str) -> list[MiddlewareReport]:
    return list(MiddlewareReport.objects.filter(run=run, kind=kind))


def test_a_changed_limit_stops_the_next_runs_second_tool_call(contracts):
    version = _save("agents.sales", {"tool_call_limit": {"run_limit": 1}})
    run = create_run("slow_supplier_purchase")

    runner.start_run(run)

    (report,) = _reports(run, MiddlewareReport.Kind.CALL_LIMIT)
    assert (report.agent, report.detail) == ("sales", {"tool": "confirm_with_supplier"})
    effective = limits.effective_stack(run)
    sales = next(entry["stack"] for entry in effective["agents"] if entry["agent"] == "sales")
    assert effective["version"] == version.number
    assert sales[3]["args"] == {"thread_limit": 20, "run_limit": 1, "exit_behavior": "continue"}


def test_a_run_started_before_a_change_keeps_its_version(contracts):
    run = create_run("waiting_on_approval")
    runner.start_run(run)
    started_with = RunLimits.objects.get(run=run).version
    _save("agents.sales", {"tool_call_limit": {"run_limit": 0}})

    runner.resume_run(run, {"type": "approve"})

    assert limits.effective_stack(run)["version"] == started_with.number
    assert Order.objects.filter(operation_id=run.operation_id).exists()
    assert not _reports(run, MiddlewareReport.Kind.CALL_LIMIT)


def test_a_run_started_after_the_change_gets_the_new_limit(contracts):
    _save("agents.sales", {"tool_call_limit": {"run_limit": 0}})
    run = create_run("waiting_on_approval")
    runner.start_run(run)

    runner.resume_run(run, {"type": "approve"})

    assert not Order.objects.filter(operation_id=run.operation_id).exists()
    assert limits.effective_stack(run)["version"] == LimitsVersion.current().number


def test_rolling_back_restores_the_earlier_behaviour(contracts):
    before = LimitsVersion.current()
    _save("agents.sales", {"tool_call_limit": {"run_limit": 1}})
    restored = LimitsVersion.save_new(before.document, note="rollback", rolled_back_from=before.number)
    run = create_run("slow_supplier_purchase")

    runner.start_run(run)

    assert limits.effective_stack(run)["version"] == restored.number
    assert not _reports(run, MiddlewareReport.Kind.CALL_LIMIT)
    assert run.handoffs.get().verdict == "HEALTHY"


def test_a_redelivered_start_keeps_the_pinned_version(contracts):
    run = create_run("healthy_purchase")
    first = RunLimits.pin(run)
    _save("agents.sales", {"tool_call_limit": {"run_limit": 1}})

    runner.start_run(run)

    assert RunLimits.objects.get(run=run).version == first


def test_a_run_not_started_has_no_effective_version_yet(contracts):
    run = create_run("healthy_purchase")

    assert limits.effective_stack(run) == {"run": run.pk, "version": None, "pinned_at": None, "agents": []}


def test_the_diff_names_each_changed_setting():
    new = _with("agents.sales", {"tool_call_limit": {"run_limit": 1}})

    assert limits.diff(DEFAULT_DOCUMENT, new) == [
        {"setting": "agents.sales.tool_call_limit.run_limit", "before": "—", "after": "1"}
    ]


def test_every_scenario_override_is_a_valid_partial_settings_section():
    for scenario in SCENARIOS.values():
        for agent, override in scenario.limits.items():
            assert set(override) <= set(limits.DEFAULT_SETTINGS), (scenario.name, agent)


def test_the_run_fragment_shows_the_version_and_each_agents_stack(contracts):
    from django.template.loader import render_to_string

    version = _save("agents.sales", {"tool_call_limit": {"run_limit": 1}})
    run = create_run("slow_supplier_purchase")
    runner.start_run(run)

    html = render_to_string("agents/_effective_limits.html", {"effective": limits.effective_stack(run)})

    assert f'<strong id="run-{run.pk}-limits-version">v{version.number}</strong>' in html
    assert f'id="run-{run.pk}-limits-sales"' in html
    assert "<code>run_limit</code> = <code>1</code>" in html


# --- the runtime defaults are any graph's; a graph brings its own (issue 18) --------------------


def test_a_stored_copy_of_the_defaults_does_not_hide_the_demos_own_limits():
    settings = resolve(DEFAULT_DOCUMENT, "sales", graph=DEMO_LIMITS)

    assert settings["tool_retry"]["retry_on"] == ["TransientServiceError"]
    assert settings["approval"]["tools"]["place_order"]["threshold"] == 500


def test_a_default_the_admin_changed_beats_a_graphs_own_setting():
    document = _with("default.approval.tools.place_order.threshold", 300)

    settings = resolve(document, "sales", graph=DEMO_LIMITS)

    assert settings["approval"]["tools"]["place_order"] == {
        **DEMO_LIMITS["approval"]["tools"]["place_order"],
        "threshold": 300,
    }


def test_an_agent_no_graph_describes_gets_the_runtime_defaults_only():
    settings = resolve(DEFAULT_DOCUMENT, "buyer")

    assert list(settings["approval"]["tools"]) == ["shell"]
    assert settings["tool_retry"]["retry_on"] == ["ConnectionError", "TimeoutError"]


def test_a_retried_error_no_registered_graph_names_retries_nothing(settings):
    settings.SIDEWISP_GRAPHS = '{"desk": "tests/agents/hosted_graph.py:make_graph"}'
    old = _with("default.tool_retry.retry_on", ["TransientServiceError"])

    retry = _one(
        build_middleware(AgentSettings("desk", resolve(old, "desk")), ["transfer_to_payments"]), ToolRetryMiddleware
    )

    assert retry.retry_on == ()


_MOVE = importlib.import_module("agents.migrations.0007_reserved")


def test_the_migration_moves_the_old_built_in_demo_limits_out_of_a_stored_version():
    old_gates = _MOVE.OLD_BUILT_INS["approval"]["tools"]
    stored = _with(
        "default.approval.tools", {**old_gates, "shell": DEFAULT_DOCUMENT["default"]["approval"]["tools"]["shell"]}
    )
    stored["default"]["tool_retry"]["retry_on"] = ["TransientServiceError"]
    stored["agents"]["billing"] = {
        "approval": {"tools": {"refund": {**old_gates["refund"], "reason": "made_by_admin"}}}
    }

    moved = _MOVE._moved(stored)

    assert moved["default"] == DEFAULT_DOCUMENT["default"] | {"tool_retry": _without_retry_on()}
    assert moved["agents"]["billing"] == {"approval": {"tools": {"refund": {"reason": "made_by_admin"}}}}
    assert resolve(moved, "sales", graph=DEMO_LIMITS)["tool_retry"]["retry_on"] == ["TransientServiceError"]
    assert resolve(moved, "buyer")["tool_retry"]["retry_on"] == ["ConnectionError", "TimeoutError"]


def _without_retry_on() -> dict:
    return {k: v for k, v in DEFAULT_DOCUMENT["default"]["tool_retry"].items() if k != "retry_on"}
