"""Legacy per-agent settings: what an `AgentLimits` row stands for in the settings a stack builder takes."""

from __future__ import annotations

from agents.limits.defaults import DEFAULT_SETTINGS
from agents.limits.described import graph_limits
from agents.limits.document import AgentSettings, merge
from agents.models import AgentLimits


def as_settings(limits: AgentSettings | AgentLimits) -> AgentSettings:
    return limits if isinstance(limits, AgentSettings) else settings_from_agent_limits(limits)


def settings_from_agent_limits(limits: AgentLimits) -> AgentSettings:
    """The settings a legacy `AgentLimits` row stands for (over the limits of the graph that has the agent)."""
    reason = limits.approval_reason
    base = merge(DEFAULT_SETTINGS, graph_limits(agent=limits.agent))
    gates = {
        name: {**rule, "reason": reason or rule["reason"]}
        | ({"threshold": limits.approval_threshold} if "threshold" in rule else {})
        for name, rule in base["approval"]["tools"].items()
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
    return AgentSettings(agent=limits.agent, settings=merge(base, override))
