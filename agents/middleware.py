"""`SidewispMiddleware`: the LangChain adapter that records handoff receipts.

Put it **last** in an agent's middleware list (innermost): it then sees the
request the model really got (after summarization and context editing) and
the value the tool itself returned (a transfer's `Command`). It observes with
the two wrap hooks only, in sync and async variants, so it adds no graph
super-step.

- A transfer tool call (see `agents.handoffs.handoff_tool`) records `created`
  and announces the returned `Command` on the custom stream, where
  `agents.observer.observe` pairs it with the parent's state update.
- The effects of the other middleware, found in the history the model is
  given, become `MiddlewareReport` rows: an exhausted retry, a surfaced tool
  error, a tool-call limit hit, a summary, a context edit, and a model retry
  failure that `on_failure="continue"` turned into a normal-looking message.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import sync_to_async
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse, ToolCallRequest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.config import get_config, get_stream_writer
from langgraph.types import Command

from agents import evidence
from agents.handoffs import handoff_target
from receipts.bundle import BundleError
from receipts.models import MiddlewareReport
from receipts.recording import record

logger = logging.getLogger(__name__)
HANDOFF_EVENT = "sidewisp.handoff"
CLEARED_PLACEHOLDER = "[cleared]"
_RETRIES_EXHAUSTED = re.compile(r"failed after (\d+) attempts")
_MODEL_FAILED = re.compile(r"^Model call failed after (\d+) attempts")
_CALL_LIMIT = "Tool call limit exceeded"
Kind = MiddlewareReport.Kind


class SidewispMiddleware(AgentMiddleware):
    """Record handoff receipts and middleware reports for one agent.

    `agent` defaults to the `name=` given to `create_agent`; `route_version`
    names the contract version the agent's transfers follow. The run is found
    through `configurable.operation_id` (or the thread id).
    """

    def __init__(self, *, agent: str | None = None, route_version: str = "routes/1") -> None:
        super().__init__()
        if not route_version:
            msg = "route_version must name a contract version"
            raise ValueError(msg)
        self.agent = agent
        self.route_version = route_version

    # --- tools ---------------------------------------------------------------

    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        context = self._tool_context(request)
        if context is not None:
            self._record_created(context)
        result = handler(request)
        if context is not None:
            self._announce(context, result)
        return result

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[Any]]
    ) -> Any:
        context = self._tool_context(request)
        if context is not None:
            await sync_to_async(self._record_created)(context)
        result = await handler(request)
        if context is not None:
            self._announce(context, result)
        return result

    def _tool_context(self, request: ToolCallRequest) -> dict | None:
        target = handoff_target(request.tool)
        config = _config()
        operation_id = evidence.operation_id_of(config)
        if target is None or operation_id is None:
            return None
        tool_call_id = request.tool_call["id"]
        info = request.runtime.execution_info if request.runtime is not None else None
        return {
            "operation_id": operation_id,
            "handoff_id": evidence.handoff_id_for(operation_id, tool_call_id),
            "sender": self._agent_name(config),
            "receiver": target["to"],
            "context_keys": list(target.get("context_keys", [])),
            "tool_call_id": tool_call_id,
            "attempt": str(getattr(info, "node_attempt", None) or 1),
        }

    @evidence.closes_own_connection
    def _record_created(self, context: dict) -> None:
        created = {
            "sender": context["sender"],
            "receiver": context["receiver"],
            "route_version": self.route_version,
            "tool_call_id": context["tool_call_id"],
            "required_context_keys": context["context_keys"],
            "at": evidence.now_iso(),
        }
        try:
            record(
                handoff_id=context["handoff_id"],
                operation_id=context["operation_id"],
                part="created",
                value=created,
                attempt=context["attempt"],
            )
        except BundleError as exc:
            # Observation must never change what the agent does; the field name is safe to log.
            logger.warning("created receipt not recorded: %s", exc.field)

    def _announce(self, context: dict, result: Any) -> None:
        # The parent applies the Command after this returns; the observer reads
        # the applied update from the parent stream and pairs it by handoff id.
        if not isinstance(result, Command):
            return
        goto = result.goto if isinstance(result.goto, str) else ",".join(str(g) for g in result.goto)
        get_stream_writer()(
            {
                "event": HANDOFF_EVENT,
                "handoff_id": context["handoff_id"],
                "operation_id": context["operation_id"],
                "sender": context["sender"],
                "tool_call_id": context["tool_call_id"],
                "goto": goto or None,
                "graph_scope": "parent" if result.graph == Command.PARENT else "agent",
            }
        )

    # --- model ---------------------------------------------------------------

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        scope = self._scope()
        if scope is not None:
            self._report_history(scope, request.messages)
        response = handler(request)
        if scope is not None:
            self._report_model_failure(scope, _messages_of(response))
        return response

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> Any:
        scope = self._scope()
        if scope is not None:
            await sync_to_async(self._report_history)(scope, request.messages)
        response = await handler(request)
        if scope is not None:
            await sync_to_async(self._report_model_failure)(scope, _messages_of(response))
        return response

    def _scope(self) -> tuple[str, str] | None:
        config = _config()
        operation_id = evidence.operation_id_of(config)
        return None if operation_id is None else (operation_id, self._agent_name(config))

    @evidence.closes_own_connection
    def _report_history(self, scope: tuple[str, str], messages: list[BaseMessage]) -> None:
        operation_id, agent = scope
        for report in history_reports(messages):
            evidence.add_report(operation_id, agent, *report)

    @evidence.closes_own_connection
    def _report_model_failure(self, scope: tuple[str, str], messages: list[BaseMessage]) -> None:
        operation_id, agent = scope
        for report in model_failure_reports(messages):
            evidence.add_report(operation_id, agent, *report)

    def _agent_name(self, config: dict) -> str:
        return self.agent or (config.get("metadata") or {}).get("lc_agent_name") or "agent"


def history_reports(messages: list[BaseMessage]) -> list[tuple[str, dict, str]]:
    """(kind, detail, attempt) for every middleware effect visible in a model request."""
    reports: list[tuple[str, dict, str]] = []
    cleared: list[str] = []
    for message in messages:
        if isinstance(message, HumanMessage) and message.additional_kwargs.get("lc_source") == "summarization":
            detail = {"messages_after": len(messages)}
            reports.append((Kind.SUMMARIZED, detail, f"summary-{message.id or evidence.digest(len(messages))}"))
        if not isinstance(message, ToolMessage):
            continue
        text = message.content if isinstance(message.content, str) else ""
        if text == CLEARED_PLACEHOLDER:
            cleared.append(message.tool_call_id)
            continue
        if message.status != "error":
            continue
        attempt = f"tool-{evidence.digest(message.tool_call_id)}"
        tool = message.name or "unknown"
        if text.startswith(_CALL_LIMIT):
            reports.append((Kind.CALL_LIMIT, {"tool": tool}, attempt))
        elif match := _RETRIES_EXHAUSTED.search(text):
            reports.append((Kind.RETRY_EXHAUSTED, {"tool": tool, "attempts": int(match.group(1))}, attempt))
        else:
            reports.append((Kind.TOOL_ERROR, {"tool": tool}, attempt))
    if cleared:
        reports.append((Kind.CONTEXT_EDITED, {"cleared": len(cleared)}, f"edit-{evidence.digest(*sorted(cleared))}"))
    return reports


def model_failure_reports(messages: list[BaseMessage]) -> list[tuple[str, dict, str]]:
    reports = []
    for message in messages:
        text = message.content if isinstance(message, AIMessage) and isinstance(message.content, str) else ""
        if match := _MODEL_FAILED.match(text):
            attempt = f"model-{message.id or evidence.digest(text)}"
            reports.append((Kind.MODEL_FAILED, {"attempts": int(match.group(1))}, attempt))
    return reports


def _messages_of(response: Any) -> list[BaseMessage]:
    if isinstance(response, AIMessage):
        return [response]
    return list(getattr(response, "result", None) or [])


def _config() -> dict:
    try:
        return get_config()
    except RuntimeError:
        return {}
