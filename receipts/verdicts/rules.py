"""The classifier: turn a handoff's receipts into one verdict (spec §3).

Plain Python with no Django import and no clock: the caller passes `now`, so a
wait's deadline is judged at a known moment and a replay gives the same answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType

from receipts.verdicts.bundle import Bundle, Contracts, Verification, Wait

BOUNDARIES = ("route", "control", "tool_protocol", "context", "destination", "wait", "outcome")

NEXT_MOVES: dict[str, str] = {
    "HEALTHY": "nothing",
    "ROUTE_REJECTED": "block the transfer; restore the declared route",
    "STALE_CONTROL": "reconcile the persisted state before any retry",
    "OPEN_TOOL_PROTOCOL": "repair the history before another model call",
    "CONTEXT_INCOMPLETE": "rebuild the minimal transfer contract",
    "DESTINATION_NOT_STARTED": "inspect routing and node permissions",
    "WAITING_ON_APPROVAL": "notify the owner and keep the state",
    "UNCERTAIN": "find an owner, deadline or token",
    "FALSE_COMPLETE": "reopen the task; do not trust the final message",
}

VERDICT_BOUNDARY: dict[str, str | None] = {
    "HEALTHY": None,
    "ROUTE_REJECTED": "route",
    "STALE_CONTROL": "control",
    "OPEN_TOOL_PROTOCOL": "tool_protocol",
    "CONTEXT_INCOMPLETE": "context",
    "DESTINATION_NOT_STARTED": "destination",
    "WAITING_ON_APPROVAL": "wait",
    "UNCERTAIN": "wait",
    "FALSE_COMPLETE": "outcome",
}


@dataclass(frozen=True)
class Verdict:
    verdict: str
    boundary: str | None
    next_move: str
    # Every name in BOUNDARIES, in that order: "pass", "fail", "waiting",
    # "not_reached" (after the deciding boundary) or "not_applicable".
    boundaries: Mapping[str, str]
    # Plain English naming fields, never their values: safe for pages and logs.
    reason: str


@dataclass(frozen=True)
class _Finding:
    status: str
    verdict: str | None = None
    reason: str = ""


# The findings that decide nothing, made once (a finding is frozen: one serves every handoff).
_NOT_APPLICABLE, _PASS = _Finding("not_applicable"), _Finding("pass")


# Checks 1-5 each return why their boundary fails, or None when it passes.
# Each one stands on its own (a missing part fails it too) so none relies on an
# earlier check having run.


# Where the route version came from (created.route_version_source), as a reason says it.
_ORIGINS = {
    "middleware": " (given as SidewispMiddleware(route_version=...))",
    "observe": " (given as observe(route_version=...))",
    "default": " (the default: neither SidewispMiddleware nor observe was given a route_version)",
}


def _quoted(name: str | None) -> str:
    """A route version in a reason (an identifier, spec §1 v1.3), clipped so a reason fits a handoff row."""
    name = name or ""
    return f'"{name if len(name) <= 40 else name[:39] + "…"}"'


def _named(created) -> str:
    """The created receipt's route version as a reason names it, with where it came from."""
    return f"{_quoted(created.route_version)}{_ORIGINS.get(created.route_version_source, '')}"


def _route_problem(bundle: Bundle, contracts: Contracts) -> str | None:
    created = bundle.created
    if created is None:
        return "the created receipt is missing"
    for field in ("sender", "receiver", "route_version"):
        if not getattr(created, field):
            return f"created.{field} is missing"
    if created.route_version not in contracts.routes:
        return f"created.route_version {_named(created)} is not a known contract version"
    if contracts.required_keys(created.route_version, created.sender, created.receiver) is None:
        return f"created.receiver is not declared for created.sender in route version {_named(created)}"
    # A missing reduced receipt is stale control (check 2), not a rejected route.
    if bundle.reduced is not None and bundle.reduced.goto != created.receiver:
        return "reduced.goto does not equal created.receiver"
    return None


def _control_problem(bundle: Bundle, contracts: Contracts) -> str | None:
    created, reduced = bundle.created, bundle.reduced
    if reduced is None:
        return "the reduced receipt is missing"
    if created is None or reduced.active_agent_before != created.sender:
        return "reduced.active_agent_before does not equal created.sender"
    if reduced.active_agent_after != created.receiver:
        return "reduced.active_agent_after does not equal created.receiver"
    return None


def _tool_protocol_problem(bundle: Bundle, contracts: Contracts) -> str | None:
    created, reduced = bundle.created, bundle.reduced
    call_id = created.tool_call_id if created else None
    if not call_id:
        return "created.tool_call_id is missing"
    matches = reduced.tool_message_ids.count(call_id) if reduced else 0
    if matches == 0:
        return "no entry of reduced.tool_message_ids equals created.tool_call_id"
    if matches > 1:
        return "more than one entry of reduced.tool_message_ids equals created.tool_call_id"
    # v1.3 the whole turn: a destination handed an AI turn with an unanswered call gets a broken history.
    if not created.turn_tool_call_ids:
        return None  # not recorded, or no call but its own: nothing more to answer
    answers = reduced.tool_message_ids if reduced else ()
    others = [i for i in dict.fromkeys(created.turn_tool_call_ids) if i != call_id]
    unanswered = sum(1 for i in others if answers.count(i) == 0)
    if unanswered:
        return f"no entry of reduced.tool_message_ids answers {unanswered} other call(s) of created.turn_tool_call_ids"
    if any(answers.count(i) > 1 for i in others):
        return "more than one entry of reduced.tool_message_ids answers a call of created.turn_tool_call_ids"
    return None


def _context_problem(bundle: Bundle, contracts: Contracts) -> str | None:
    created, reduced = bundle.created, bundle.reduced
    # The contract's list wins over what created.required_context_keys claims.
    required = contracts.required_keys(created.route_version, created.sender, created.receiver) if created else None
    if required is None or reduced is None:
        return "the route contract's required keys cannot be checked"
    missing = len(set(required) - set(reduced.context_keys))
    if missing:
        return f"reduced.context_keys lacks {missing} of the keys the route contract requires"
    return None


def _destination_problem(bundle: Bundle, contracts: Contracts) -> str | None:
    created, destination = bundle.created, bundle.destination
    if destination is None:
        return "the destination receipt is missing"
    if created is None or not destination.node_id or destination.node_id != created.receiver:
        return "destination.node_id does not equal created.receiver"
    if destination.started_at is None:
        return "destination.started_at is missing"
    # A step of one agent is only reached when its model call got the step's tools (spec v1.2); fail closed.
    declared = contracts.step_tools(created.route_version, created.receiver)
    if declared is not None and sorted(destination.tools or ()) != sorted(declared):
        if destination.tools is None:
            return "destination.tools is missing for a step whose tools the contract declares"
        return "destination.tools does not equal the tools the contract declares for the step"
    return None


_HANDOFF_CHECKS: tuple[tuple[str, str, Callable[[Bundle, Contracts], str | None]], ...] = (
    ("route", "ROUTE_REJECTED", _route_problem),
    ("control", "STALE_CONTROL", _control_problem),
    ("tool_protocol", "OPEN_TOOL_PROTOCOL", _tool_protocol_problem),
    ("context", "CONTEXT_INCOMPLETE", _context_problem),
    ("destination", "DESTINATION_NOT_STARTED", _destination_problem),
)


def _invalid_wait_problem(wait: Wait, contracts: Contracts, now: datetime) -> str | None:
    """Which of the five facts of a valid wait is not proven, or None."""
    if not wait.owner:
        return "wait.owner is missing"
    if wait.reason not in contracts.wait_reasons:
        return "wait.reason is not a declared wait reason"
    if wait.deadline_utc is None:
        return "wait.deadline_utc is missing"
    if wait.deadline_utc <= now:
        return "wait.deadline_utc is not later than now"
    if not wait.resume_token_id:
        return "wait.resume_token_id is missing"
    if wait.state_persisted is not True:
        return "wait.state_persisted is not true"
    return None


def _judge_wait(bundle: Bundle, contracts: Contracts, now: datetime) -> _Finding:
    wait = bundle.wait
    # A wait nobody marked resolved is still open: silence is not a decision.
    if wait is not None and wait.resolved is not True:
        if bundle.final_status == "complete":
            # The outcome verifier settles a completion claim, not the final message.
            return _NOT_APPLICABLE
        problem = _invalid_wait_problem(wait, contracts, now)
        if problem is not None:
            return _Finding("fail", "UNCERTAIN", problem)
        return _Finding("waiting", "WAITING_ON_APPROVAL", "an open wait has an owner, reason, deadline and token")
    if bundle.final_status == "waiting":
        return _Finding("fail", "UNCERTAIN", "final_status is waiting but no open wait receipt exists")
    return _NOT_APPLICABLE


def _judge_outcome(bundle: Bundle, contracts: Contracts, now: datetime) -> _Finding:
    if bundle.final_status != "complete":
        return _NOT_APPLICABLE
    verification, destination = bundle.verification, bundle.destination
    if verification is None:
        return _Finding("fail", "FALSE_COMPLETE", "complete is claimed but the verification receipt is missing")
    if verification.result != "pass":
        return _Finding("fail", "FALSE_COMPLETE", "complete is claimed but verification.result is not pass")
    if verification.checked_at is None:
        return _Finding("fail", "FALSE_COMPLETE", "verification.checked_at is missing")
    started_at = destination.started_at if destination else None
    if started_at is None or verification.checked_at < started_at:
        return _Finding("fail", "FALSE_COMPLETE", "verification.checked_at is earlier than destination.started_at")
    return _PASS


# Checks 6-7 depend on the agent's own status claim and may not apply at all.
_STATUS_CHECKS: tuple[tuple[str, Callable[[Bundle, Contracts, datetime], _Finding]], ...] = (
    ("wait", _judge_wait),
    ("outcome", _judge_outcome),
)


def classify(bundle: Bundle, contracts: Contracts, now: datetime) -> Verdict:
    """The verdict for one handoff's receipts at the moment `now` (spec §3).

    Contract: boundaries are checked in BOUNDARIES order and the first that
    fails decides; every boundary after it is "not_reached", so an early
    failure can never be hidden by later evidence. Missing evidence fails its
    boundary. `now` must be timezone-aware (ValueError otherwise). Pure: the
    same arguments always give the same Verdict, and any parsed Bundle is
    accepted.
    """
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be a timezone-aware datetime")
    statuses: dict[str, str] = {}
    for boundary, verdict, find_problem in _HANDOFF_CHECKS:
        problem = find_problem(bundle, contracts)
        if problem is not None:
            statuses[boundary] = "fail"
            return _made(verdict, problem, statuses)
        statuses[boundary] = "pass"
    for boundary, judge in _STATUS_CHECKS:
        finding = judge(bundle, contracts, now)
        statuses[boundary] = finding.status
        if finding.verdict is not None:
            return _made(finding.verdict, finding.reason, statuses)
    return _made("HEALTHY", _HEALTHY_REASON, statuses)


_HEALTHY_REASON = "every boundary that applies is proven by a receipt"
# The verdicts made so far, by verdict, reason and their boundaries' statuses (filled in BOUNDARIES order up
# to the deciding one). A Verdict is frozen, so one is shared by every handoff that has it: a handoff is
# classified once per receipt recorded, and a few verdicts are most of them. A reason may name a route
# version: past `_MADE_AT_MOST` the verdicts are made anew.
_made_before: dict[tuple[str, str, tuple[str, ...]], Verdict] = {}
_MADE_AT_MOST = 1024


def _made(verdict: str, reason: str, statuses: dict[str, str]) -> Verdict:
    key = (verdict, reason, tuple(statuses.values()))
    found = _made_before.get(key)
    if found is None:
        found = _verdict(verdict, reason, statuses)
        if len(_made_before) < _MADE_AT_MOST:
            _made_before[key] = found
    return found


def classify_run(final_status: str | None, verification: Verification | None) -> Verdict | None:
    """Check 7 applied to a run that made no handoff (spec v1.3 "Runs with no handoff"); None when it does not apply.

    Such a run is judged by its outcome alone: a completion claim with a passing verification is HEALTHY,
    a completion claim without one is FALSE_COMPLETE. Anything but a completion claim is no verdict (the
    run's own status says how it stands). With no destination, the verification only needs its time.
    Every boundary but the outcome is "not_applicable": there was no handoff to check.
    """
    if final_status != "complete":
        return None
    statuses = dict.fromkeys(BOUNDARIES[:-1], "not_applicable")
    if verification is None:
        problem: str | None = "complete is claimed but the verification receipt is missing"
    elif verification.result != "pass":
        problem = "complete is claimed but verification.result is not pass"
    elif verification.checked_at is None:
        problem = "verification.checked_at is missing"
    else:
        problem = None
    statuses["outcome"] = "fail" if problem else "pass"
    if problem:
        return _verdict("FALSE_COMPLETE", problem, statuses)
    return _verdict("HEALTHY", "the run made no handoff; its completion is proven by a passing verification", statuses)


def _verdict(verdict: str, reason: str, statuses: Mapping[str, str]) -> Verdict:
    boundaries = {name: statuses.get(name, "not_reached") for name in BOUNDARIES}
    return Verdict(
        verdict=verdict,
        boundary=VERDICT_BOUNDARY[verdict],
        next_move=NEXT_MOVES[verdict],
        boundaries=MappingProxyType(boundaries),
        reason=reason,
    )
