"""How long each tool call took (issue 30 §1): a `tool_call` report per call that is not a transfer.

The transfer has its receipts (`created` .. `destination`); any other call is timed here, from before the tool's
handler runs to after it returned or raised, and reported by name only: the tool, the call id, both times and
how it ended (`ok`, `error`, or `rejected` when an approver's rejection answered it). Never its arguments or
result. The call id is the report's attempt, so a call retried after a crash is stored once.

An interrupt (`GraphInterrupt`, or any `GraphBubbleUp` such as a raised parent `Command`) is no outcome: it
passes through untouched and nothing is reported, since the call runs again when the run resumes.
"""

from __future__ import annotations

from datetime import UTC, datetime

from langchain_core.messages import ToolMessage
from langgraph.errors import GraphBubbleUp

from . import evidence
from .kinds import ReportKind

OK, ERROR, REJECTED = "ok", "error", "rejected"
# How HumanInTheLoopMiddleware answers a call its approver rejected (langchain.agents.middleware.human_in_the_loop).
REJECTED_PREFIX = "User rejected the tool call for "


def started() -> datetime:
    return datetime.now(UTC)


def outcome_of(result: object) -> str:
    """How a call that returned ended: an error-status ToolMessage is an error, a rejection's answer a rejection."""
    if isinstance(result, ToolMessage) and result.status == "error":
        text = result.content if isinstance(result.content, str) else ""
        return REJECTED if text.startswith(REJECTED_PREFIX) else ERROR
    return OK


def report(context: dict | None, tool: str, since: datetime, outcome: str) -> None:
    """Hand the call's `tool_call` report to the writer (names and times only)."""
    if context is None:
        return
    detail = {
        "tool": tool,
        "call_id": context["tool_call_id"],
        "started_at": since.isoformat(),
        "ended_at": datetime.now(UTC).isoformat(),
        "outcome": outcome,
    }
    kind = ReportKind.TOOL_CALL
    evidence.submit_report(context["operation_id"], context["sender"], kind, detail, context["tool_call_id"])


def passes_through(exc: BaseException) -> bool:
    """An interrupt or a bubbled-up Command: the graph's control flow, not the tool's failure."""
    return isinstance(exc, GraphBubbleUp)
