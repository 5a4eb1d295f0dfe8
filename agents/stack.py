"""The middleware list of one agent, built from its settings (see `agents.limits`).

Order matters: for wrap hooks the first middleware is the outermost. The
error handler sits outside the retries (it sees only what retries could not
fix), and `SidewispMiddleware` comes last so it sees exactly what the model
got and what the tool returned.

`build_layers` is the one builder: it returns each middleware with the
arguments it was given, in a form safe to show (names, numbers, codes; no
callables, prompts or secrets), so the admin preview and the run page show
exactly what a run gets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware import (
    AgentMiddleware,
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    HumanInTheLoopMiddleware,
    InterruptOnConfig,
    ModelCallLimitMiddleware,
    ModelRetryMiddleware,
    SummarizationMiddleware,
    TodoListMiddleware,
    ToolCallLimitMiddleware,
    ToolCallRequest,
    ToolErrorMiddleware,
    ToolRetryMiddleware,
)

from agents.limits import DEFAULT_SETTINGS, RETRYABLE_ERRORS, AgentSettings, merge
from agents.middleware import SidewispMiddleware
from agents.models import AgentLimits
from agents.observer import WaitPolicy
from agents.scripted import Say, ScriptedChatModel, summarize
from agents.tools import order_amount

TODO_AGENTS = frozenset({"support"})


@dataclass(frozen=True)
class Layer:
    middleware: AgentMiddleware
    args: dict[str, Any]

    def describe(self) -> dict[str, Any]:
        return {"middleware": type(self.middleware).__name__, "name": self.middleware.name, "args": self.args}


def build_middleware(
    limits: AgentSettings | AgentLimits, tool_names: Sequence[str], *, route_version: str = "routes/1"
) -> list[AgentMiddleware]:
    return [layer.middleware for layer in build_layers(limits, tool_names, route_version=route_version)]


def build_layers(
    limits: AgentSettings | AgentLimits, tool_names: Sequence[str], *, route_version: str = "routes/1"
) -> list[Layer]:
    """Each middleware of the agent, in order, with its arguments. Raises the library's ValueError."""
    agent = as_settings(limits)
    s = agent.settings
    retry, errors = s["tool_retry"], s["tool_errors"]
    attempts = retry["max_retries"] + 1
    layers = [
        Layer(
            ToolErrorMiddleware(on_error=_error_message(errors, retry, attempts), tools=errors["tools"]),
            {"tools": errors["tools"], "message": errors["message"], "retried_message": errors["retried_message"]},
        ),
        Layer(
            ToolRetryMiddleware(
                **_retry_kwargs(retry),
                retry_on=_retry_on(retry["retry_on"]),
                on_failure=_tool_failure(attempts) if retry["on_failure"] == "continue" else "error",
            ),
            dict(retry),
        ),
        Layer(
            ModelRetryMiddleware(
                **_retry_kwargs(s["model_retry"]),
                retry_on=_retry_on(s["model_retry"]["retry_on"]),
                on_failure=s["model_retry"]["on_failure"],
            ),
            dict(s["model_retry"]),
        ),
        _limit_layer(ToolCallLimitMiddleware, s["tool_call_limit"]),
        *[
            _limit_layer(ToolCallLimitMiddleware, {**_PER_TOOL, **limit}, tool_name=name)
            for name, limit in sorted(s["per_tool_limits"].items())
            if name in tool_names
        ],
        _limit_layer(ModelCallLimitMiddleware, s["model_call_limit"]),
        Layer(
            SummarizationMiddleware(
                model=ScriptedChatModel(policy=lambda *_: Say("")),
                trigger=[dict(clause) for clause in s["summarization"]["trigger"]] or None,
                keep=tuple(s["summarization"]["keep"]),
                summarizer=summarize,
            ),
            dict(s["summarization"]),
        ),
        Layer(
            ContextEditingMiddleware(
                edits=[
                    ClearToolUsesEdit(
                        **{k: v for k, v in s["context_editing"].items() if k != "exclude_tools"},
                        exclude_tools=tuple(s["context_editing"]["exclude_tools"]),
                    )
                ]
            ),
            {"edits": [{"edit": "ClearToolUsesEdit", **s["context_editing"]}]},
        ),
    ]
    gated = _interrupt_on(s["approval"], tool_names)
    if gated:
        layers.append(Layer(HumanInTheLoopMiddleware(interrupt_on=gated), _approval_args(s["approval"], tool_names)))
    if agent.agent in TODO_AGENTS:
        layers.append(Layer(TodoListMiddleware(), {}))
    layers.append(
        Layer(
            SidewispMiddleware(agent=agent.agent, route_version=route_version),
            {"agent": agent.agent, "route_version": route_version},
        )
    )
    return layers


def wait_policies(limits: AgentSettings | AgentLimits, tool_names: Sequence[str]) -> dict[str, WaitPolicy]:
    """Owner, reason and deadline of the approval wait for each gated tool of this agent."""
    approval = as_settings(limits).settings["approval"]
    return {
        name: WaitPolicy(
            owner=approval["owner"] or None,
            reason=rule.get("reason") or None,
            deadline_minutes=approval["deadline_minutes"] or None,
        )
        for name, rule in approval["tools"].items()
        if name in tool_names
    }


def as_settings(limits: AgentSettings | AgentLimits) -> AgentSettings:
    return limits if isinstance(limits, AgentSettings) else settings_from_agent_limits(limits)


def settings_from_agent_limits(limits: AgentLimits) -> AgentSettings:
    """The settings a legacy `AgentLimits` row stands for."""
    reason = limits.approval_reason
    gates = {
        name: {**rule, "reason": reason or rule["reason"]}
        | ({"threshold": limits.approval_threshold} if "threshold" in rule else {})
        for name, rule in DEFAULT_SETTINGS["approval"]["tools"].items()
    }
    override = {
        "tool_call_limit": {"run_limit": limits.tool_run_limit, "thread_limit": limits.tool_thread_limit},
        "per_tool_limits": {name: {"run_limit": int(n)} for name, n in (limits.per_tool_run_limits or {}).items()},
        "model_call_limit": {"run_limit": limits.model_run_limit, "thread_limit": limits.model_thread_limit},
        "tool_retry": {
            "max_retries": limits.tool_max_retries,
            "initial_delay": limits.retry_initial_delay,
            "max_delay": limits.retry_max_delay,
        },
        "model_retry": {
            "max_retries": limits.model_max_retries,
            "initial_delay": limits.retry_initial_delay,
            "max_delay": limits.retry_max_delay,
        },
        "summarization": {
            "trigger": [{"messages": limits.summarize_after_messages}],
            "keep": ["messages", limits.summarize_keep_messages],
        },
        "context_editing": {"trigger": limits.context_edit_trigger_tokens, "keep": limits.context_edit_keep},
        "approval": {
            "tools": gates,
            "owner": limits.approval_owner,
            "deadline_minutes": limits.approval_deadline_minutes,
        },
    }
    return AgentSettings(agent=limits.agent, settings=merge(DEFAULT_SETTINGS, override))


_PER_TOOL = {"thread_limit": None, "run_limit": None, "exit_behavior": "continue"}


def _limit_layer(cls: type[AgentMiddleware], limit: Mapping[str, Any], **extra: Any) -> Layer:
    kwargs = {"thread_limit": limit["thread_limit"], "run_limit": limit["run_limit"]}
    kwargs["exit_behavior"] = limit["exit_behavior"]
    return Layer(cls(**extra, **kwargs), {**extra, **kwargs})


def _retry_kwargs(retry: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("max_retries", "backoff_factor", "initial_delay", "max_delay", "jitter")
    return {key: retry[key] for key in keys}


def _retry_on(names: Sequence[str]) -> Any:
    if "default" in names:
        from langchain.agents.middleware._retry import default_retry_on

        return default_retry_on
    return tuple(RETRYABLE_ERRORS[name] for name in names)


def _tool_failure(attempts: int):
    # What "continue" means here: the library's message shape, without the exception's text.
    def on_failure(exc: Exception) -> str:
        return f"Tool call failed after {attempts} attempts with {type(exc).__name__}"

    return on_failure


def _interrupt_on(approval: Mapping[str, Any], tool_names: Sequence[str]) -> dict[str, InterruptOnConfig]:
    gated: dict[str, InterruptOnConfig] = {}
    for name, rule in approval["tools"].items():
        if name not in tool_names:
            continue
        config = InterruptOnConfig(allowed_decisions=list(rule["allowed_decisions"]))
        if "threshold" in rule:
            config["when"] = _above(int(rule["threshold"]))
        gated[name] = config
    return gated


def _approval_args(approval: Mapping[str, Any], tool_names: Sequence[str]) -> dict[str, Any]:
    tools = {name: dict(rule) for name, rule in approval["tools"].items() if name in tool_names}
    wait = {key: approval[key] for key in ("owner", "backup_owner", "deadline_minutes", "on_expiry")}
    return {"interrupt_on": tools, "wait": wait}


def _above(threshold: int):
    def needs_approval(request: ToolCallRequest) -> bool:
        args = request.tool_call["args"]
        return order_amount(str(args.get("sku", "")), int(args.get("quantity", 0) or 0)) > threshold

    return needs_approval


def _error_message(errors: Mapping[str, Any], retry: Mapping[str, Any], attempts: int):
    # The exception's type only, through the admin's templates: its text may carry internal details.
    retried = _retry_on(retry["retry_on"]) if retry["max_retries"] else ()
    message, retried_message = errors["message"], errors["retried_message"]

    def on_error(exc: Exception, request: ToolCallRequest) -> str:
        values = {"tool": request.tool_call["name"], "error_type": type(exc).__name__, "attempts": attempts}
        was_retried = retried(exc) if callable(retried) else isinstance(exc, retried)
        return (retried_message if was_retried else message).format(**values)

    return on_error
