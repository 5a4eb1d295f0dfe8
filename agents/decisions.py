"""Operator decisions in the shape LangGraph's human-in-the-loop middleware resumes with.

A resume value is persisted by LangGraph, so a malformed one would poison the
thread (every later resume replays it): decisions are validated here, before
anything reaches a graph, for hosted and observed runs alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents.observer import gated_tools

DECISION_TYPES = ("approve", "reject", "edit")
MAX_REJECT_MESSAGE = 1000


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
