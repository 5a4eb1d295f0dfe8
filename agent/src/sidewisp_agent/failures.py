"""What a run that raised records: a retry expected, a closed stream, or a failure and where it was raised."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import ToolMessage

from . import bundle, evidence
from .kinds import ReportKind, RunStatus
from .runs import record_final, submit_run
from .transfers import node_of

logger = logging.getLogger(__name__)

# What a run that raised says when its caller closed the stream before the run ended.
STREAM_CLOSED = "StreamClosed"
_NODE_SEPARATOR = " › "  # noqa: RUF001 - a single guillemet between node names is meant
_REMEMBERED_TOOL_CALLS = 1000


def raised(operation_id: str, exc: BaseException, culprit: Culprit, *, retry: bool) -> None:
    """Record what the caller is about to get: a retry expected, a closed stream, or a failure and where."""
    error = type(exc).__name__
    if isinstance(exc, GeneratorExit):
        logger.info("run %s: its caller closed the stream before the run ended", operation_id)
        _failed(operation_id, STREAM_CLOSED)
    elif retry:
        logger.warning("run %s: %s, a retry is expected", operation_id, error)
        _retry_expected(operation_id, error)
    else:
        logger.warning("run %s failed: %s", operation_id, error)
        if isinstance(exc, Exception):
            detail = culprit.detail(error)
            attempt = f"error-{evidence.digest(*detail.values())}"
            evidence.submit_report(operation_id, evidence.OBSERVER, ReportKind.GRAPH_ERROR, detail, attempt)
        _failed(operation_id, error)


def _failed(operation_id: str, error: str) -> None:
    record_final(operation_id, "failed", "error")
    submit_run(operation_id, RunStatus.FAILED, error=error, final=True)


def _retry_expected(operation_id: str, error: str) -> None:
    submit_run(operation_id, RunStatus.QUEUED, error=error)  # an existing run only: a start named no thread


@dataclass
class Culprit:
    """Where a run raised, from its `tasks` and `tools` streams: the failing node's path and tool, names only.

    A tool error whose ToolMessage a later task result carries was handled (ToolNode, ToolRetryMiddleware)
    and names nothing.
    """

    node: tuple[str, ...] = ()
    tool: str | None = None
    started: dict[str, str] = field(default_factory=dict)  # tool call id -> tool name
    tool_errors: dict[tuple[str, ...], tuple[str, str]] = field(default_factory=dict)  # ns -> (call id, tool)

    def see(self, ns: tuple[str, ...], mode: str, chunk: Any) -> None:
        if not isinstance(chunk, Mapping):
            return
        if mode == "tools":
            self._see_tool(ns, chunk)
        elif mode == "tasks" and "input" not in chunk:
            if chunk.get("error") is not None:
                self._see_error(ns, str(chunk.get("name")))
            else:
                answered = _tool_call_ids_in(chunk.get("result"))
                for key, (call_id, _) in list(self.tool_errors.items()):
                    if call_id in answered:
                        del self.tool_errors[key]

    def _see_tool(self, ns: tuple[str, ...], chunk: Mapping) -> None:
        call_id, event = str(chunk.get("tool_call_id")), chunk.get("event")
        if event == "tool-started" and len(self.started) < _REMEMBERED_TOOL_CALLS:
            self.started[call_id] = str(chunk.get("tool_name") or "")
        elif event == "tool-error":
            self.tool_errors[ns] = (call_id, self.started.pop(call_id, ""))
        elif event == "tool-finished":
            self.started.pop(call_id, None)

    def _see_error(self, ns: tuple[str, ...], name: str) -> None:
        path = (*(node_of(segment) for segment in ns), name)
        # The innermost failing task is seen first; the tasks around it fail with the same error.
        if self.node and path[: len(self.node)] != self.node:
            return
        self.node = path
        _, tool = self.tool_errors.get(ns, ("", None))
        self.tool = bundle.identifier(tool) if tool else None

    def detail(self, error: str) -> dict[str, str]:
        detail = {"error": error}
        if self.node:
            detail["node"] = _NODE_SEPARATOR.join(self.node)[: bundle.MAX_STRING_LENGTH]
        if self.tool:
            detail["tool"] = self.tool
        return detail


def _tool_call_ids_in(result: Any) -> set[str]:
    writes = result.items() if isinstance(result, Mapping) else result if isinstance(result, list | tuple) else ()
    ids = set()
    for write in writes:
        value = write[1] if isinstance(write, tuple) and len(write) == 2 else write
        for message in value if isinstance(value, list | tuple) else [value]:
            if isinstance(message, ToolMessage):
                ids.add(message.tool_call_id)
    return ids
