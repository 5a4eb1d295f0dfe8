"""Operator decisions in the shape LangGraph's human-in-the-loop middleware resumes with.

A resume value is persisted by LangGraph, so a malformed one would poison the
thread (every later resume replays it): decisions are validated here, before
anything reaches a graph, for hosted and observed runs alike.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.types import Command

from . import evidence, store
from .http import RemoteUnavailable
from .kinds import DecisionKind
from .reopening import reopen_command
from .waits import gated_tools

DECISION_TYPES = (DecisionKind.APPROVE, DecisionKind.REJECT, DecisionKind.EDIT)
MAX_REJECT_MESSAGE = 1000
logger = logging.getLogger(__name__)


def resume_value(pending: Sequence[Any], decision: dict) -> dict:
    """`Command(resume=...)`'s value answering every pending interrupt with `decision` (validated)."""
    clean = validate_decision(decision)
    return {item.id: {"decisions": decisions_for(item, clean)} for item in pending}


def validate_decision(decision: object) -> dict:
    """The decision in a known shape, or ValueError naming what is wrong."""
    if not isinstance(decision, dict):
        msg = "decision must be an object"
        raise ValueError(msg)
    kind = decision.get("type")
    if kind not in DECISION_TYPES:
        msg = f"decision.type must be one of {', '.join(DECISION_TYPES)}"
        raise ValueError(msg)
    allowed = {"approve": {"type"}, "reject": {"type", "message"}, "edit": {"type", "args"}}[kind]
    if extra := set(decision) - allowed:
        msg = f"decision has unexpected fields: {', '.join(sorted(map(str, extra)))}"
        raise ValueError(msg)
    if kind == "reject":
        message = decision.get("message")
        if not isinstance(message, str) or not message.strip() or len(message) > MAX_REJECT_MESSAGE:
            msg = f"decision.message must be a non-empty string of at most {MAX_REJECT_MESSAGE} characters"
            raise ValueError(msg)
    if kind == "edit":
        args = decision.get("args")
        if not isinstance(args, dict) or not args or not all(isinstance(key, str) for key in args):
            msg = "decision.args must be a non-empty object"
            raise ValueError(msg)
    return dict(decision)


def decisions_for(pending: Any, decision: dict) -> list[dict]:
    """The HITL decisions list answering one interrupt (one decision per gated call, in order)."""
    value = pending.value if isinstance(pending.value, dict) else {}
    requests = value.get("action_requests", [])
    for review in value.get("review_configs", []):
        if decision["type"] not in review.get("allowed_decisions", DECISION_TYPES):
            msg = f"decision.type {decision['type']} is not allowed for this approval"
            raise ValueError(msg)
    if decision["type"] == "approve":
        return [{"type": "approve"} for _ in requests]
    if decision["type"] == "reject":
        return [{"type": "reject", "message": decision["message"]} for _ in requests]
    if len(requests) != 1:
        msg = "an edit decision needs exactly one pending tool call"
        raise ValueError(msg)
    original = requests[0].get("args", {})
    if unknown := set(decision["args"]) - set(original):
        msg = f"decision.args has fields the tool call does not take: {', '.join(sorted(unknown))}"
        raise ValueError(msg)
    return [
        {"type": "edit", "edited_action": {"name": gated_tools(pending)[0], "args": {**original, **decision["args"]}}}
    ]


@dataclass(frozen=True)
class PendingInterrupt:
    """An interrupt as `Run.pending_call` remembers it: its id and, per gated call, the tool name only."""

    id: str
    value: dict = field(default_factory=dict)


def await_decision(
    operation_id: str, *, timeout: float | None = None, poll: float = 0.5, pending: Sequence[Any] | None = None
) -> Command | None:
    """Wait for an operator's decision on the run and claim it: a `Command`, or None on timeout.

    For observed runs: the app then calls `observe(graph, command, config)`. An approval, rejection or edit is
    `Command(resume=...)`; a reopened false completion (spec §5 v1.3) is `Command(goto=<destination>,
    update={"messages": [note]})` (sidewisp_agent.reopening): the destination agent works on the task again from
    the checkpoint and observe verifies its outcome again. The
    decision is claimed atomically, so two callers never both get it. Pass the
    graph's own `pending` interrupts (`graph.get_state(config).interrupts`);
    without them the interrupts are rebuilt from `Run.pending_call` (names only),
    which answers an approval or a rejection, while an edit raises ValueError
    unclaimed (its other argument values are only in your checkpoint).

    The decision comes from the store (`store.Store.take_decision`): the server's database, or, for an app
    elsewhere (`sidewisp_agent.configure()`), the server's API with the source token; while the server does
    not answer there is simply no decision yet.

    The run is the local app's of that operation id: a remote source's operation ids live in its own namespace
    (issue 29 §4), so a source that posts the same id first has its own run and cannot block this wait.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        command = evidence.run_orm(_claim, operation_id, pending)
        if command is not None or (deadline is not None and time.monotonic() >= deadline):
            return command
        time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))


async def aawait_decision(
    operation_id: str, *, timeout: float | None = None, poll: float = 0.5, pending: Sequence[Any] | None = None
) -> Command | None:
    """`await_decision` for async apps (the ORM in a worker thread; polling sleeps on the loop)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        command = await evidence.arun_orm(_claim, operation_id, pending)
        if command is not None or (deadline is not None and time.monotonic() >= deadline):
            return command
        await asyncio.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))


def _claim(operation_id: str, pending: Sequence[Any] | None) -> Command | None:
    """The run's next decision as the command that applies it, claimed; None when there is none yet."""
    try:
        taken = store.current().take_decision(operation_id, has_pending=pending is not None)
    except RemoteUnavailable as exc:
        logger.warning("no decision from the Sidewisp server for now: %s", exc)
        return None
    if taken is None:
        return None
    if taken["type"] == DecisionKind.REOPEN:
        return reopen_command(**taken["reopen"])
    if pending is not None:
        interrupts = list(pending)
    else:
        interrupts = [PendingInterrupt(id=item["id"], value=item["value"]) for item in taken["interrupts"]]
    return Command(resume=resume_value(interrupts, taken["resume"]))
