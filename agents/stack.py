"""The middleware list of one agent, built from its `AgentLimits`.

Order matters: for wrap hooks the first middleware is the outermost. The
error handler sits outside the retries (it sees only what retries could not
fix), and `SidewispMiddleware` comes last so it sees exactly what the model
got and what the tool returned.
"""

from __future__ import annotations

from collections.abc import Sequence

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

from agents.middleware import SidewispMiddleware
from agents.models import AgentLimits
from agents.observer import WaitPolicy
from agents.scripted import Say, ScriptedChatModel, summarize
from agents.tools import SENSITIVE_TOOLS, TransientServiceError, order_amount

TODO_AGENTS = frozenset({"support"})


def build_middleware(
    limits: AgentLimits, tool_names: Sequence[str], *, route_version: str = "routes/1"
) -> list[AgentMiddleware]:
    attempts = limits.tool_max_retries + 1
    stack: list[AgentMiddleware] = [
        ToolErrorMiddleware(on_error=_error_message(attempts)),
        ToolRetryMiddleware(
            max_retries=limits.tool_max_retries,
            retry_on=(TransientServiceError,),
            on_failure="error",
            initial_delay=limits.retry_initial_delay,
            max_delay=limits.retry_max_delay,
            jitter=False,
        ),
        ModelRetryMiddleware(
            max_retries=limits.model_max_retries,
            on_failure="continue",
            initial_delay=limits.retry_initial_delay,
            max_delay=limits.retry_max_delay,
            jitter=False,
        ),
        ToolCallLimitMiddleware(run_limit=limits.tool_run_limit, thread_limit=limits.tool_thread_limit),
        *[
            ToolCallLimitMiddleware(tool_name=name, run_limit=int(limit))
            for name, limit in sorted((limits.per_tool_run_limits or {}).items())
            if name in tool_names
        ],
        ModelCallLimitMiddleware(run_limit=limits.model_run_limit, thread_limit=limits.model_thread_limit),
        SummarizationMiddleware(
            model=ScriptedChatModel(policy=lambda *_: Say("")),
            trigger=("messages", limits.summarize_after_messages),
            keep=("messages", limits.summarize_keep_messages),
            summarizer=summarize,
        ),
        ContextEditingMiddleware(
            edits=[ClearToolUsesEdit(trigger=limits.context_edit_trigger_tokens, keep=limits.context_edit_keep)]
        ),
    ]
    gated = _interrupt_on(limits, tool_names)
    if gated:
        stack.append(HumanInTheLoopMiddleware(interrupt_on=gated))
    if limits.agent in TODO_AGENTS:
        stack.append(TodoListMiddleware())
    stack.append(SidewispMiddleware(agent=limits.agent, route_version=route_version))
    return stack


def wait_policies(limits: AgentLimits, tool_names: Sequence[str]) -> dict[str, WaitPolicy]:
    """Owner, reason and deadline of the approval wait for each gated tool of this agent."""
    return {
        name: WaitPolicy(
            owner=limits.approval_owner or None,
            reason=limits.approval_reason or reason,
            deadline_minutes=limits.approval_deadline_minutes or None,
        )
        for name, reason in SENSITIVE_TOOLS.items()
        if name in tool_names
    }


def _interrupt_on(limits: AgentLimits, tool_names: Sequence[str]) -> dict[str, InterruptOnConfig]:
    decisions = ["approve", "edit", "reject"]
    gated: dict[str, InterruptOnConfig] = {}
    for name in SENSITIVE_TOOLS:
        if name not in tool_names:
            continue
        config = InterruptOnConfig(allowed_decisions=decisions)
        if name == "place_order":
            config["when"] = _above(limits.approval_threshold)
        gated[name] = config
    return gated


def _above(threshold: int):
    def needs_approval(request: ToolCallRequest) -> bool:
        args = request.tool_call["args"]
        return order_amount(str(args.get("sku", "")), int(args.get("quantity", 0) or 0)) > threshold

    return needs_approval


def _error_message(attempts: int):
    # The exception's type only: its text may carry internal details the model must not see.
    def on_error(exc: Exception, request: ToolCallRequest) -> str:
        name = request.tool_call["name"]
        if isinstance(exc, TransientServiceError):
            return f"`{name}` failed after {attempts} attempts with {type(exc).__name__}"
        return f"`{name}` failed with {type(exc).__name__}"

    return on_error
