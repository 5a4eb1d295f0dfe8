"""The names the recording side writes and the server stores: run statuses, report and decision kinds.

Defined once, here: the server's model choices (`receipts.models.Run.Status`, `MiddlewareReport.Kind`,
`Decision.Kind`) read these values, so a name the agent sends is a name the server knows.
"""

from __future__ import annotations

from collections.abc import Iterable

from .entries import EVIDENCE_DROPPED


class RunStatus:
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    COMPLETE = "complete"
    FAILED = "failed"
    PARKED = "parked"


class ReportKind:
    RETRY_EXHAUSTED = "retry_exhausted"
    TOOL_ERROR = "tool_error"
    CALL_LIMIT = "call_limit"
    SUMMARIZED = "summarized"
    CONTEXT_EDITED = "context_edited"
    MODEL_FAILED = "model_failed"
    EVIDENCE_DROPPED = EVIDENCE_DROPPED
    NO_HANDOFF = "no_handoff"
    UNOBSERVED_STREAM = "unobserved_stream"
    UNSEEN_WITHOUT_MIDDLEWARE = "unseen_without_middleware"
    NO_VERIFIER = "no_verifier"
    GRAPH_ERROR = "graph_error"
    VALUE_REDACTED = "value_redacted"
    TOOL_CALL = "tool_call"


class DecisionKind:
    APPROVE = "approve"
    REJECT = "reject"
    EDIT = "edit"
    REOPEN = "reopen"  # a false completion reopened (spec §5 v1.3): no answer to a wait


# A parked run's Run.error when the graph itself holds it (a destination held by `interrupt_before`), not a
# stopped auto-continue: "held_before:sales" (node names only).
HELD_BEFORE = "held_before:"


def held_before(nodes: Iterable[str]) -> str:
    """The Run.error of a run parked before `nodes` by the graph's interrupt_before: "held_before:sales"."""
    return f"{HELD_BEFORE}{','.join(nodes)}"[:200]
