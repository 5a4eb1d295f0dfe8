"""`SidewispMiddleware`: the LangChain adapter that records handoff receipts.

Put it **last** in an agent's middleware list (innermost): it then sees the
request the model really got (after summarization and context editing) and
the value the tool itself returned (a transfer's `Command`). It observes with
the two wrap hooks only, in sync and async variants, so it adds no graph
super-step.

- A transfer is any tool call whose result is a `Command` to the parent graph,
  whichever library made the tool. A tool that declares its receiver (our
  `handoff_tool`, langgraph-swarm, langgraph-supervisor) records `created`
  before it runs; any other records it once it returned a parent `Command`
  (one per destination of a goto list; a Command to END only is no transfer).
  The transfer is announced on the custom stream (names and ids only), where
  the observer (`sidewisp_agent.tracking`) pairs it with what the parent graph did.
  The observer sees transfers without this middleware too (from the graph's
  `tools` stream); the middleware adds the declared receiver, the call's time,
  the middleware reports below and single-agent steps (`sidewisp_agent.steps`).
- Receipts and reports are handed to the batched writer (`sidewisp_agent.writer`): the
  agent's threads never wait on a database, and recording never raises into
  the agent (a receipt that does not validate becomes an `evidence_dropped` report).
- The effects of the other middleware, found in the history the model is
  given, become `MiddlewareReport` rows: an exhausted retry, a surfaced tool
  error, a tool-call limit hit, a summary, a context edit, and a model retry
  failure that `on_failure="continue"` turned into a normal-looking message.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse, ToolCallRequest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.config import get_config, get_stream_writer
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

from . import barrier as barrier_module
from . import evidence, steps, toolcalls, writer
from .handoffs import handoff_target
from .kinds import ReportKind
from .transfers import (
    DEFAULT_ROUTE_VERSION,
    HANDOFF_EVENT,
    messages_in,
    transfer_gotos,
    transfer_handoff_ids,
    turn_call_ids,
)

logger = logging.getLogger(__name__)
CLEARED_PLACEHOLDER = "[cleared]"
# What a report says for a tool the model named that is not bound to the agent: never the made-up name.
UNKNOWN_TOOL = "unknown_tool"
# The configurable key `sidewisp_agent.observe` marks its runs with: a transfer without it is streamed unobserved.
OBSERVED_KEY = "sidewisp_observed"
# How the observer keeps a transfer's `created` ahead of the checkpoint past it (`_before_next_checkpoint`).
BARRIER_KEY = "sidewisp_transfer_barrier"
BARRIER_CHECKPOINTER = "checkpointer"  # the run's checkpointer waits for the writer (sidewisp_agent.barrier)
BARRIER_NONE_NEEDED = "none"  # the run has no checkpointer
_RETRIES_EXHAUSTED = re.compile(r"failed after (\d+) attempts")
_MODEL_FAILED = re.compile(r"^Model call failed after (\d+) attempts")
_CALL_LIMIT = "Tool call limit exceeded"
_REJECTED = toolcalls.REJECTED_PREFIX
Kind = ReportKind


class SidewispMiddleware(AgentMiddleware):
    """Record handoff receipts and middleware reports for one agent.

    `agent` defaults to the `name=` given to `create_agent`; `route_version`
    names the contract version the agent's transfers follow. The run is found
    through `configurable.operation_id` (or the thread id). The sender of a
    transfer is the agent *node* that ran it (from the checkpoint namespace),
    falling back to the agent name.

    Single-agent steps (`sidewisp_agent.steps`): `step_key` names the step variable where
    the contracts cannot (remote mode); `first_step` is the step while it is unset.
    """

    def __init__(
        self,
        *,
        agent: str | None = None,
        route_version: str | None = None,
        step_key: str | None = None,
        first_step: str | None = None,
    ) -> None:
        super().__init__()
        if route_version is not None and not route_version:
            msg = "route_version must name a contract version"
            raise ValueError(msg)
        self.agent = agent
        # Without one, transfers follow the default version, and their receipts say so (reasons name it).
        self.route_version = route_version or DEFAULT_ROUTE_VERSION
        self.route_version_source = "middleware" if route_version else "default"
        self._steps = steps.StepWatch(
            self.route_version, step_key=step_key, first_step=first_step, source=self.route_version_source
        )

    def tool_node(self, tools: Sequence[Any], **kwargs: Any) -> ToolNode:
        """A `ToolNode` of `tools` observed by this middleware, for agents that take no middleware.

        E.g. `create_supervisor(agents, model=..., tools=mw.tool_node([handoff tools for every
        agent]))`: langgraph-supervisor keeps a ToolNode that already holds a handoff tool for
        each of its agents.
        """
        return ToolNode(tools, wrap_tool_call=self.wrap_tool_call, awrap_tool_call=self.awrap_tool_call, **kwargs)

    # --- tools ---------------------------------------------------------------

    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        context = self._tool_context(request)
        if context is not None and context["receiver"] is not None:
            self._record_created(context, context["receiver"], context["handoff_id"])
        since = toolcalls.started()
        try:
            result = handler(request)
        except Exception as exc:
            if not toolcalls.passes_through(exc):
                self._time_call(context, request, since, toolcalls.ERROR)
            raise
        self._steps.after_tool(request, result)
        if context is not None and self._record_transfer(context, result):
            _before_next_checkpoint(context)  # `created` is stored before the parent can checkpoint past it
        else:
            self._time_call(context, request, since, toolcalls.outcome_of(result))
        return result

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[Any]]
    ) -> Any:
        context = self._tool_context(request)
        if context is not None and context["receiver"] is not None:
            self._record_created(context, context["receiver"], context["handoff_id"])
        since = toolcalls.started()
        try:
            result = await handler(request)
        except Exception as exc:
            if not toolcalls.passes_through(exc):
                self._time_call(context, request, since, toolcalls.ERROR)
            raise
        await self._steps.aafter_tool(request, result)
        if context is not None and self._record_transfer(context, result):
            if _barrier_of(context) in (BARRIER_CHECKPOINTER, BARRIER_NONE_NEEDED):
                _before_next_checkpoint(context)  # holds at most: nothing waits here
            else:
                await asyncio.to_thread(writer.flush)  # as in wrap_tool_call, off the event loop
        else:
            self._time_call(context, request, since, toolcalls.outcome_of(result))
        return result

    @staticmethod
    def _time_call(context: dict | None, request: ToolCallRequest, since: Any, outcome: str) -> None:
        """Report how long a call that is no transfer took (`sidewisp_agent.toolcalls`): a declared one is one."""
        if context is None or context["declared"]:
            return
        tool = request.tool_call.get("name") if request.tool is not None else UNKNOWN_TOOL
        toolcalls.report(context, tool if isinstance(tool, str) else UNKNOWN_TOOL, since, outcome)

    def _tool_context(self, request: ToolCallRequest) -> dict | None:
        config = _config()
        operation_id = evidence.operation_id_of(config)
        tool_call_id = request.tool_call.get("id")
        if operation_id is None or not tool_call_id:
            return None
        target = handoff_target(request.tool)
        info = request.runtime.execution_info if request.runtime is not None else None
        return {
            "operation_id": operation_id,
            "handoff_id": evidence.handoff_id_for(operation_id, tool_call_id),
            "sender": sender_node(config) or self._agent_name(config),
            "receiver": target["to"] if target else None,
            "declared": target is not None,
            "context_keys": list(target["context_keys"]) if target else [],
            "tool_call_id": tool_call_id,
            "turn_ids": _turn_call_ids(request.state, tool_call_id),
            "attempt": str(getattr(info, "node_attempt", None) or 1),
            "thread_id": (config.get("configurable") or {}).get("thread_id"),
            "barrier": (config.get("configurable") or {}).get(BARRIER_KEY),
        }

    def _record_transfer(self, context: dict, result: Any) -> bool:
        """When the tool returned a Command to the parent graph: `created` per destination, the announcement, True.

        A goto list is one handoff per destination (the first keeps the call's own handoff id, which a
        declared receiver's `created` already used); a Command to END only is no handoff (spec v1.2).
        The caller then makes the next checkpoint of the run wait for the writer (`_before_next_checkpoint`):
        a worker killed after LangGraph saved the step that applies the transfer still leaves its `created`
        (with this middleware's route version) for the resumed run's observer to complete from the
        checkpoint history (`sidewisp_agent.reconcile`).
        """
        if not isinstance(result, Command) or result.graph != Command.PARENT:
            return False
        gotos = transfer_gotos(result.goto)
        if not gotos:
            return False
        handoff_ids = transfer_handoff_ids(context["operation_id"], context["tool_call_id"], len(gotos))
        for index, (goto, handoff_id) in enumerate(zip(gotos, handoff_ids, strict=True)):
            if not (context["declared"] and index == 0):
                self._record_created(context, goto, handoff_id)
        self._announce(context)
        return True

    def _record_created(self, context: dict, receiver: str, handoff_id: str) -> None:
        created = {
            "sender": context["sender"],
            "receiver": receiver,
            "route_version": self.route_version,
            "route_version_source": self.route_version_source,
            "tool_call_id": context["tool_call_id"],
            "required_context_keys": context["context_keys"],
            "at": evidence.now_iso(),
            # v1.3 the whole turn: check 3 requires each of these answered before the destination's model call.
            "turn_tool_call_ids": context["turn_ids"],
        }
        evidence.submit_part(context["operation_id"], handoff_id, "created", created, context["attempt"])

    @staticmethod
    def _announce(context: dict) -> None:
        # The observer pairs this with the transfer the `tools` stream showed: it records `created` for
        # the transfers nobody announced, and `reduced` and `destination` for all of them.
        event = {
            "event": HANDOFF_EVENT,
            "operation_id": context["operation_id"],
            "sender": context["sender"],
            "tool_call_id": context["tool_call_id"],
            "turn_ids": context["turn_ids"],
        }
        evidence.guarded(context["operation_id"], "reduced", lambda: get_stream_writer()(event))
        if not (_config().get("configurable") or {}).get(OBSERVED_KEY):
            # Only the observer sees the parent apply a transfer and start its destination: say so, once a run.
            kind = Kind.UNOBSERVED_STREAM
            evidence.submit_report(context["operation_id"], evidence.OBSERVER, kind, {}, "unobserved")

    # --- model ---------------------------------------------------------------

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        self._steps.before_model(request, tool_names(request.tools))
        scope = self._scope()
        if scope is not None:
            _submit_reports(scope, history_reports(request.messages, tool_names(request.tools), self._names()))
        response = handler(request)
        if scope is not None:
            _submit_reports(scope, model_failure_reports(_messages_of(response)))
        return response

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> Any:
        self._steps.before_model(request, tool_names(request.tools))
        scope = self._scope()
        if scope is not None:
            _submit_reports(scope, history_reports(request.messages, tool_names(request.tools), self._names()))
        response = await handler(request)
        if scope is not None:
            _submit_reports(scope, model_failure_reports(_messages_of(response)))
        return response

    def _scope(self) -> tuple[str, str] | None:
        config = _config()
        operation_id = evidence.operation_id_of(config)
        return None if operation_id is None else (operation_id, self._agent_name(config))

    def _names(self) -> frozenset[str]:
        """The names this agent goes by: the one it was given and the one `create_agent` gave its messages."""
        given = (self.agent, (_config().get("metadata") or {}).get("lc_agent_name"))
        return frozenset(name for name in given if isinstance(name, str) and name)

    def _agent_name(self, config: dict) -> str:
        return self.agent or (config.get("metadata") or {}).get("lc_agent_name") or "agent"


def _barrier_of(context: dict) -> str | None:
    return context.get("barrier")


def _before_next_checkpoint(context: dict) -> None:
    """Keep the crash promise for a recorded transfer at the least cost the run allows.

    The observer says how (`BARRIER_KEY`): its checkpointer waits for the writer before it saves anything
    of this thread (`sidewisp_agent.barrier`), or the run has no checkpointer to move past the transfer. A run
    observed otherwise (no observer, or a checkpointer that cannot be guarded) waits for the writer now.
    """
    barrier = _barrier_of(context)
    if barrier == BARRIER_CHECKPOINTER and context.get("thread_id") is not None:
        barrier_module.hold(str(context["thread_id"]))
    elif barrier != BARRIER_NONE_NEEDED:
        writer.flush()


def _submit_reports(scope: tuple[str, str], reports: list[tuple[str, dict, str]]) -> None:
    operation_id, agent = scope
    for kind, detail, attempt in reports:
        evidence.submit_report(operation_id, agent, kind, detail, attempt)


def sender_node(config: dict) -> str | None:
    """The graph node whose subgraph runs this tool: the namespace segment above the tool's own task."""
    namespace = (config.get("metadata") or {}).get("langgraph_checkpoint_ns") or (config.get("configurable") or {}).get(
        "checkpoint_ns"
    )
    segments = [segment for segment in str(namespace or "").split("|") if segment]
    return segments[-2].split(":", 1)[0] if len(segments) >= 2 else None


def _turn_call_ids(state: Any, tool_call_id: str) -> list[str]:
    """The tool-call ids of the AIMessage that made this call, this call's first (at most 100)."""
    return turn_call_ids(messages_in(state), tool_call_id) or [tool_call_id]


def tool_names(tools: Sequence[Any] | None) -> frozenset[str]:
    """The names of the tools bound to a model request (BaseTool objects or provider dicts)."""
    names = set()
    for item in tools or ():
        name = (item.get("name") or (item.get("function") or {}).get("name")) if isinstance(item, dict) else None
        name = name or getattr(item, "name", None)
        if isinstance(name, str):
            names.add(name)
    return frozenset(names)


def history_reports(
    messages: list[BaseMessage], tools: Collection[str] = (), agent: Collection[str] = ()
) -> list[tuple[str, dict, str]]:
    """(kind, detail, attempt) for every middleware effect visible in a model request.

    A tool is named only when it is one of `tools` (the agent's bound tools);
    any other name was made up by the model and is reported as UNKNOWN_TOOL.

    Decisions are not faults: a call an approver rejected (or whose wait expired into a rejection) is answered
    by HumanInTheLoopMiddleware with an error-status ToolMessage, which is the decision, shown on its wait, and
    no tool error. A failed call is reported only by the agent that made it (`agent`: the names the reporting
    agent goes by; the AI message that holds the call names one of them, or no one): in a swarm every agent
    later sees the whole history, and one failure is one report.
    """
    reports: list[tuple[str, dict, str]] = []
    cleared: list[str] = []
    callers = {call.get("id"): m.name for m in messages if isinstance(m, AIMessage) for call in m.tool_calls if m.name}
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
        if message.status != "error" or text.startswith(_REJECTED):
            continue
        if agent and (caller := callers.get(message.tool_call_id)) is not None and caller not in agent:
            continue  # another agent's call: that agent reports it
        attempt = f"tool-{evidence.digest(message.tool_call_id)}"
        tool = message.name if message.name in tools else UNKNOWN_TOOL
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
