"""Approval waits as the observer records them: the `wait` receipt, the run's pending call, and how a resume decided."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from langgraph.types import Interrupt

from . import bundle, evidence, store
from .outcomes import DECLINED, WaitPolicy

_RESOLUTIONS = {"approve": "approved", "edit": "edited", "reject": "rejected"}
UNREAD = object()  # a run's declined resolution not known yet: `verify` reads it
DECISION_ORDER = ("approve", "edit", "reject")


def resume_token_id(operation_id: str, interrupt_id: str) -> str:
    return f"rt-{evidence.digest(operation_id, interrupt_id)}"


def record_wait(
    operation_id: str, pending: Interrupt, wait_policies: Mapping[str, WaitPolicy], *, persisted: bool, resolved: bool
) -> None:
    policy = _policy_for(pending, wait_policies)
    deadline = None
    if policy.deadline_minutes:
        deadline = (datetime.now(UTC) + timedelta(minutes=policy.deadline_minutes)).isoformat()
    wait = {
        "owner": policy.owner or None,
        "reason": policy.reason or None,
        "deadline_utc": deadline,
        "resume_token_id": resume_token_id(operation_id, pending.id),
        "state_persisted": persisted,
        "resolved": resolved,
    }
    state = "resolved" if resolved else "open"
    evidence.submit_outcome(operation_id, "wait", wait, attempt=f"{state}-{evidence.digest(pending.id)}")


def gated_tools(pending: Interrupt) -> list[str]:
    value = pending.value if isinstance(pending.value, Mapping) else {}
    return [str(request.get("name")) for request in value.get("action_requests", [])]


def _policy_for(pending: Interrupt, wait_policies: Mapping[str, WaitPolicy]) -> WaitPolicy:
    for name in gated_tools(pending):
        if name in wait_policies:
            return wait_policies[name]
    return WaitPolicy(owner=None, reason=None, deadline_minutes=None)


def pending_call_of(
    operation_id: str, interrupts: Sequence[Interrupt], schemas: Mapping[str, Mapping] | None = None
) -> dict:
    """An approval wait as names only (never argument values), as `Run.pending_call` holds it.

    `arg_schema` is the gated tools' argument schema (`sidewisp_agent.arguments.arg_schemas`: types and declared
    ranges), what an edit is validated against for observed runs too.
    """
    tools: list[str] = []
    arg_types: dict[str, str] = {}
    arg_schema: dict[str, Mapping] = {}
    allowed: set[str] = set()
    entries = []
    for pending in interrupts:
        value = pending.value if isinstance(pending.value, Mapping) else {}
        requests = [r for r in value.get("action_requests", []) if isinstance(r, Mapping)]
        for request in requests:
            # The gated call's tool and argument names come from the model: a tool name is an identifier (kept,
            # or redacted when credential-shaped); an argument name that is not one is left out.
            name = str(request.get("name"))
            tools.append(bundle.identifier(name))
            arg_schema.update((schemas or {}).get(name) or {})
            args = request.get("args")
            for key, arg in args.items() if isinstance(args, Mapping) else ():
                if not bundle.identifier_problem(str(key)) and len(arg_types) < bundle.MAX_LIST_ENTRIES:
                    arg_types[str(key)] = type(arg).__name__
        for review in value.get("review_configs", []):
            allowed |= set(review.get("allowed_decisions", ())) if isinstance(review, Mapping) else set()
        entries.append({"id": pending.id, "calls": len(requests)})
    return {
        "tool": ", ".join(tools),
        "arg_types": arg_types,
        "arg_schema": {key: dict(value) for key, value in arg_schema.items() if key in arg_types},
        "allowed_decisions": [d for d in DECISION_ORDER if d in allowed],
        "resume_token_id": resume_token_id(operation_id, interrupts[0].id) if interrupts else None,
        "interrupts": entries,
    }


def resolution_of(resume: object) -> dict[str | None, str | None]:
    """How a HITL resume value decided: {interrupt id or None (all): approved/edited/rejected or None}."""
    if isinstance(resume, Mapping) and "decisions" not in resume:
        return {str(key): _resolution(value) for key, value in resume.items()}
    return {None: _resolution(resume)}


def _resolution(value: object) -> str | None:
    decisions = value.get("decisions") if isinstance(value, Mapping) else None
    kinds = {d.get("type") for d in decisions or () if isinstance(d, Mapping)}
    return _RESOLUTIONS.get(kinds.pop()) if len(kinds) == 1 else None


def declined_resolution(operation_id: str) -> str | None:
    """`rejected` or `expired` when the run's latest decided wait was declined, else None (read from the store:
    a store elsewhere keeps no waits, so there the decision this process resumed the run with decides)."""
    return store.current().declined_resolution(operation_id)


def declined_by(decided: Mapping[str | None, str | None]) -> str | None:
    """The resolution a resume gave every wait it answered, when that is a declining one."""
    resolutions = set(decided.values())
    resolution = resolutions.pop() if len(resolutions) == 1 else None
    return resolution if resolution in DECLINED else None
