"""The middleware list of one agent, built from its settings (see `agents.limits`).

Order matters: for wrap hooks the first middleware is the outermost. The
error handler sits outside the retries (it sees only what retries could not
fix), and `SidewispMiddleware` comes last so it sees exactly what the model
got and what the tool returned.

`build_layers` is the one builder: it returns each middleware with the
arguments it was given, in a form safe to show (names, numbers, codes; no
callables, prompts or secrets), so the admin preview and the run page show
exactly what a run gets. A workspace agent's shell and file search layers come from
`agents.limits.workspace_layers`; a legacy `AgentLimits` row is read by `agents.limits.legacy`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from django.conf import settings as django_settings
from langchain.agents.middleware import (
    AgentMiddleware,
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    HumanInTheLoopMiddleware,
    InterruptOnConfig,
    LLMToolEmulator,
    ModelCallLimitMiddleware,
    ModelRetryMiddleware,
    SummarizationMiddleware,
    TodoListMiddleware,
    ToolCallLimitMiddleware,
    ToolCallRequest,
    ToolErrorMiddleware,
    ToolRetryMiddleware,
)
from sidewisp_agent import WaitPolicy
from sidewisp_agent.middleware import SidewispMiddleware

from agents.host import workspaces
from agents.host.scripted import Say, ScriptedChatModel, emulator_model, summarize
from agents.limits.described import amounts, retryable_errors, todo_agents, workspace_agents, workspace_tool_names
from agents.limits.document import AgentSettings
from agents.limits.layer import Layer
from agents.limits.legacy import as_settings
from agents.limits.workspace_layers import PREVIEW_WORKSPACE, tool_search_layer, workspace_layers
from agents.models import AgentLimits


def build_middleware(
    limits: AgentSettings | AgentLimits,
    tool_names: Sequence[str],
    *,
    route_version: str | None = None,
    workspace: Path | None = None,
    dry_run: bool = False,
) -> list[AgentMiddleware]:
    layers = build_layers(limits, tool_names, route_version=route_version, workspace=workspace, dry_run=dry_run)
    return [layer.middleware for layer in layers if layer.middleware is not None]


def build_layers(
    limits: AgentSettings | AgentLimits,
    tool_names: Sequence[str],
    *,
    route_version: str | None = None,
    workspace: Path | None = None,
    dry_run: bool = False,
    preview: bool = False,
) -> list[Layer]:
    """Each middleware of the agent, in order, with its arguments. Raises the library's ValueError.

    `workspace` is the run's workspace (the coder's shell and file search work
    there); `preview` builds them on a placeholder path that nothing ever runs in.
    """
    agent = as_settings(limits)
    s = agent.settings
    tool_names = [*tool_names, *(n for n in workspace_tool_names(agent.agent, s) if n not in tool_names)]
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
    if agent.agent in todo_agents():
        layers.append(Layer(TodoListMiddleware(), {}))
    if agent.agent in workspace_agents():
        root = workspace or (Path(django_settings.VAR_DIR) / "workspaces" / PREVIEW_WORKSPACE if preview else None)
        shown = workspaces.display_path(workspace.name) if workspace else workspaces.display_path()
        layers += workspace_layers(s, root, shown, dry_run=dry_run)
    if s["tool_search"]["enabled"]:
        layers.append(tool_search_layer(s["tool_search"], tool_names))
    if dry_run:
        emulated = emulated_tools(s, tool_names)
        layers.append(Layer(LLMToolEmulator(tools=emulated, model=emulator_model()), {"tools": emulated}))
    layers.append(
        Layer(
            SidewispMiddleware(agent=agent.agent, route_version=route_version),
            {"agent": agent.agent, "route_version": route_version or "routes/1 (the default)"},
        )
    )
    return layers


def with_extra(stack: Sequence[AgentMiddleware], extra: Sequence[AgentMiddleware], *, agent: str) -> list:
    """`stack` with the graph's own middleware `extra` inside it, SidewispMiddleware still last.

    An agent has one approval gate: `create_agent` refuses a second HumanInTheLoopMiddleware ("Please
    remove duplicate middleware instances"). When `extra` brings one, the limits' gates of the tools it
    does not name join it, its own rules and options standing; Sidewisp's own gate is left out.
    """
    ours = next((m for m in stack if isinstance(m, HumanInTheLoopMiddleware)), None)
    theirs = next((m for m in extra if isinstance(m, HumanInTheLoopMiddleware)), None)
    if ours is None or theirs is None:
        return [*stack[:-1], *extra, stack[-1]]
    joined = theirs
    if missing := {name: rule for name, rule in ours.interrupt_on.items() if name not in theirs.interrupt_on}:
        if type(theirs) is not HumanInTheLoopMiddleware:
            msg = (
                f"agent {agent!r}: its {type(theirs).__name__} does not gate {', '.join(sorted(missing))}, "
                "which the admin limits gate; gate them there too, or remove them from the limits"
            )
            raise ValueError(msg)
        joined = HumanInTheLoopMiddleware(
            interrupt_on={**missing, **theirs.interrupt_on},
            description_prefix=theirs.description_prefix,
            edit_notice=theirs.edit_notice,
            interrupt_mode=theirs.interrupt_mode,
        )
    kept = [m for m in stack[:-1] if m is not ours]
    return [*kept, *(joined if m is theirs else m for m in extra), stack[-1]]


def emulated_tools(settings: Mapping[str, Any], tool_names: Sequence[str]) -> list[str]:
    """The tools a dry run emulates: the chosen list (or all), never a transfer (routes are what it rehearses)."""
    chosen = settings["dry_run"]["emulate"]
    names = [n for n in tool_names if not n.startswith("transfer_to_")]
    return names if chosen is None else [n for n in names if n in chosen]


def wait_policies(limits: AgentSettings | AgentLimits, tool_names: Sequence[str]) -> dict[str, WaitPolicy]:
    """Owner, reason and deadline of the approval wait for each gated tool of this agent."""
    settings = as_settings(limits)
    approval = settings.settings["approval"]
    tool_names = [*tool_names, *workspace_tool_names(settings.agent, settings.settings)]
    return {
        name: WaitPolicy(
            owner=approval["owner"] or None,
            reason=rule.get("reason") or None,
            deadline_minutes=approval["deadline_minutes"] or None,
        )
        for name, rule in approval["tools"].items()
        if name in tool_names
    }


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
    known = retryable_errors()
    # A class only an unregistered graph names matches nothing this process runs: retried by none.
    return tuple(known[name] for name in names if known.get(name) is not None)


def _tool_failure(attempts: int):
    # What "continue" means here: the library's message shape, without the exception's text.
    def on_failure(exc: Exception) -> str:
        return f"Tool call failed after {attempts} attempts with {type(exc).__name__}"

    return on_failure


def _interrupt_on(approval: Mapping[str, Any], tool_names: Sequence[str]) -> dict[str, InterruptOnConfig]:
    gated: dict[str, InterruptOnConfig] = {}
    amount_of = amounts()
    for name, rule in approval["tools"].items():
        if name not in tool_names:
            continue
        config = InterruptOnConfig(allowed_decisions=list(rule["allowed_decisions"]))
        if "threshold" in rule and name in amount_of:
            config["when"] = _above(int(rule["threshold"]), amount_of[name])
        if "commands" in rule:
            config["when"] = _runs_any(rule["commands"])
        gated[name] = config
    return gated


def _approval_args(approval: Mapping[str, Any], tool_names: Sequence[str]) -> dict[str, Any]:
    tools = {name: dict(rule) for name, rule in approval["tools"].items() if name in tool_names}
    wait = {key: approval[key] for key in ("owner", "backup_owner", "deadline_minutes", "on_expiry")}
    return {"interrupt_on": tools, "wait": wait}


def _above(threshold: int, amount_of: Callable[[Mapping[str, Any]], int]):
    # A tool without a described amount is gated on every call (the threshold cannot be checked).
    def needs_approval(request: ToolCallRequest) -> bool:
        return amount_of(request.tool_call["args"]) > threshold

    return needs_approval


def _runs_any(commands: Sequence[str]):
    # A command word at the start or after a separator: `rm x`, `cd a && rm -rf b`, `x | xargs rm`.
    pattern = re.compile(rf"(?:^|[\s;&|(`$])(?:{'|'.join(map(re.escape, commands))})(?=\s|$|[;&|)`])")

    def needs_approval(request: ToolCallRequest) -> bool:
        return bool(pattern.search(str(request.tool_call["args"].get("command") or "")))

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
