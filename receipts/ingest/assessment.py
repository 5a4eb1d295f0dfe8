"""How a whole run is doing, from values: levels, named reasons and `assess` (pure, no Django).

The rules are described in receipts.ingest.health, which stores the result on the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypedDict

from sidewisp_agent.kinds import HELD_BEFORE, held_before  # noqa: F401 - the package defines the code; read here as assessment.X

from receipts.ingest.due import due_of_verdict, in_progress_words
from receipts.verdicts import bundle
from receipts.verdicts.rules import classify_run

FAILING = "failing"
ATTENTION = "attention"
WAITING = "waiting"
IN_PROGRESS = "in_progress"
HEALTHY = "healthy"
LEVELS = (FAILING, ATTENTION, WAITING, IN_PROGRESS, HEALTHY)  # worst first
# Levels that must never look fine: filters that claim health exclude them.
ALARMING = (FAILING, ATTENTION)

SETTLED_FALSE_COMPLETE = "FALSE_COMPLETE_SETTLED"
# The VerdictChange causes that settle a false completion (receipts.actions.SETTLEMENTS).
SETTLEMENT_CAUSES = ("task.accept", "task.resolve")

# Handoff verdict -> (level, words).
VERDICT_REASONS: dict[str, tuple[str, str]] = {
    "ROUTE_REJECTED": (FAILING, "Handoff route rejected"),
    "STALE_CONTROL": (FAILING, "Handoff stale control"),
    "OPEN_TOOL_PROTOCOL": (FAILING, "Handoff open tool protocol"),
    "CONTEXT_INCOMPLETE": (FAILING, "Handoff context incomplete"),
    "DESTINATION_NOT_STARTED": (FAILING, "Handoff destination not started"),
    "FALSE_COMPLETE": (FAILING, "Handoff false complete"),
    # A false completion an operator accepted as is or marked resolved (receipts.actions.settle): no
    # longer an open failure, never green either.
    SETTLED_FALSE_COMPLETE: (ATTENTION, "False completion settled by an operator"),
    "UNCERTAIN": (ATTENTION, "Handoff uncertain"),
    "WAITING_ON_APPROVAL": (WAITING, "Waiting on approval"),
}

# Middleware report kind -> (level, words); kinds not here are information only.
REPORT_REASONS: dict[str, tuple[str, str]] = {
    "model_failed": (FAILING, "Model failed"),
    "retry_exhausted": (FAILING, "Retries exhausted"),
    "call_limit": (ATTENTION, "Call limit hit"),
    "tool_error": (ATTENTION, "Tool error"),
    "evidence_dropped": (ATTENTION, "Evidence dropped"),
    "value_redacted": (ATTENTION, "Value redacted"),
}
ALARM_KINDS = tuple(REPORT_REASONS)
# A run that made no handoff is judged by its outcome (spec v1.3): "no handoff recorded" is a neutral fact.
RUN_FALSE_COMPLETE = "run_false_complete"

STATUS_REASONS: dict[str, tuple[str, str]] = {
    "failed": (FAILING, "Task failed"),
    "parked": (ATTENTION, "Task parked (auto-continue stopped)"),
    "waiting": (WAITING, "Task waiting"),
    "queued": (IN_PROGRESS, "Task queued"),
    "running": (IN_PROGRESS, "Task running"),
}


def _status_text(status: str, error: str) -> str:
    """Why the task stands as it does: a failure with its error class, a parked run by what really holds it."""
    text = STATUS_REASONS[status][1]
    if status == "parked" and error.startswith(HELD_BEFORE):
        nodes = error.removeprefix(HELD_BEFORE).replace(",", ", ")
        return f"Held before {nodes} (interrupt_before)"
    return f"{text} ({error})" if status == "failed" and error else text


# A run that failed (or needs attention) with no failing handoff: no handoff card gives a next move, so the
# run does, for its most telling reason (first here wins). A reason its handoffs explain gets none here.
RUN_NEXT_MOVES: dict[str, str] = {
    "model_failed": "check the model provider (status, key, quota), then start the run again; its handoffs were sound",
    "retry_exhausted": "check the failing model or tool's provider, then start the run again; its handoffs were sound",
    "run_false_complete": "reopen the task; do not trust the final message: the run made no handoff and its "
    "outcome is not proven by a passing verification",
    "unverified": "check the outcome in the system of record before relying on it; the verifier did not prove it",
    "status_failed": "inspect the last agent's reports below, fix the cause, then start the run again; "
    "no handoff was left half-done",
    "tool_error": "inspect the tool error below; the run went on, so check its result before relying on it",
    "call_limit": "check whether the call limit cut the work short; raise the limit in Limits if it was too low",
    "evidence_dropped": "the receipts lost a field (named below): check the run's outcome directly",
    "value_redacted": "an id or a name was stored redacted (named below): if it held a credential, rotate it and "
    "stop passing it as an id; the run's evidence is otherwise whole",
}


def run_next_move(reasons: Iterable[Mapping]) -> str:
    """The run's own safe next move from its stored health reasons, "" when a handoff explains the trouble."""
    codes = {str(r.get("code", "")) for r in reasons}
    if codes & {verdict.lower() for verdict in VERDICT_REASONS}:
        return ""  # a failing or waiting handoff's card carries the next move
    return next((move for code, move in RUN_NEXT_MOVES.items() if code in codes), "")


class Reason(TypedDict):
    level: str
    code: str
    text: str
    count: int


@dataclass(frozen=True)
class Health:
    level: str
    reasons: list[Reason] = field(default_factory=list)


def worst(levels: Iterable[str]) -> str:
    return min(levels, key=LEVELS.index, default=HEALTHY)


def _times(n: int) -> str:
    return f" ×{n}" if n > 1 else ""  # noqa: RUF001 - the multiplication sign is meant


def _reason(level: str, code: str, text: str, count: int = 1) -> Reason:
    return {"level": level, "code": code, "text": f"{text}{_times(count)}", "count": count}


def _report_names(kind: str, details: list[Mapping]) -> str:
    """What a grouped report is about, in names and counts: "(3 attempts)", "(check_inventory)"."""
    names = sorted({str(d.get("tool") or d.get("model") or "") for d in details} - {""})
    attempts = sorted({int(d["attempts"]) for d in details if isinstance(d.get("attempts"), int)})
    bits = []
    if names:
        bits.append(", ".join(names[:3]) + (", …" if len(names) > 3 else ""))
    if attempts and kind in ("model_failed", "retry_exhausted"):
        bits.append(f"{attempts[-1]} attempts")
    return f" ({', '.join(bits)})" if bits else ""


def assess(
    *,
    status: str,
    error: str = "",
    verdicts: Mapping[str, int] | None = None,
    reports: Iterable[tuple[str, Mapping | None, int]] = (),
    latest_verification: str | None = None,
    in_progress: Mapping[str, int] | None = None,
    run_outcome: str | None = None,
    run_verification: str | None = None,
) -> Health:
    """The run's health from its status and error, its handoffs' verdict counts, its middleware
    reports as (kind, detail, count) and, for a complete run, its latest verification result
    ("settled" when an operator settled the latest handoff's false completion).

    `in_progress` counts, per verdict, those of `verdicts` that are not final yet (`due_part`): each is a
    reason of the in_progress level, never a failure.

    A complete run with no handoff is judged by its outcome alone (spec v1.3): `run_outcome` is check 7 on the
    run (receipts.verdicts.classify_run) and `run_verification` its verification's result, if any: "HEALTHY"
    adds no reason; anything else, a missing verification included, is a false completion. Having no
    handoff is never a reason by itself."""
    pending = {v: n for v, n in (in_progress or {}).items() if n}
    verdicts = {v: left for v, n in (verdicts or {}).items() if (left := n - pending.get(v, 0)) > 0}
    reasons: list[Reason] = []
    if status in STATUS_REASONS:
        reasons.append(_reason(STATUS_REASONS[status][0], f"status_{status}", _status_text(status, error)))
    by_kind: dict[str, tuple[list[Mapping], int]] = {}
    for kind, detail, count in reports:
        if kind in REPORT_REASONS and count:
            details, total = by_kind.get(kind, ([], 0))
            by_kind[kind] = ([*details, detail or {}], total + count)
    if status == "complete" and not (verdicts or pending) and run_outcome != "HEALTHY":
        text = "False complete: no handoff, and the outcome " + (
            "verification did not pass" if run_verification else "is not verified"
        )
        reasons.append(_reason(FAILING, RUN_FALSE_COMPLETE, text))
    if status == "complete" and (verdicts or pending) and latest_verification not in ("pass", "settled"):
        text = "Outcome not verified" if latest_verification is None else "Outcome verification failed"
        reasons.append(_reason(FAILING, "unverified", text))
    for verdict, (level, text) in VERDICT_REASONS.items():
        if verdicts.get(verdict):
            reasons.append(_reason(level, verdict.lower(), text, verdicts[verdict]))
    for verdict, count in sorted(pending.items()):
        words = in_progress_words(due_of_verdict(verdict))
        reasons.append(_reason(IN_PROGRESS, f"in_progress_{verdict.lower()}", f"Handoff {words.lower()}", count))
    for kind, (level, text) in REPORT_REASONS.items():
        if kind in by_kind:
            details, total = by_kind[kind]
            reasons.append(_reason(level, kind, text + _report_names(kind, details), total))
    reasons.sort(key=lambda r: LEVELS.index(r["level"]))  # stable: worst first, in rule order
    return Health(worst(r["level"] for r in reasons), reasons)


def run_outcome(status: str, final_status: str | None, verification: Mapping | None) -> dict:
    """`assess`'s `run_outcome` and `run_verification` for a run with no handoff: check 7 on the run.

    The run's own status decides whether it claims completion (a run that ended complete does, whatever
    final status it stored); a verification that no longer parses counts as none (fail closed).
    """
    claim = "complete" if status == "complete" else (final_status or None)
    try:
        found = bundle.parse_part("verification", verification) if verification else None
    except bundle.BundleError:
        found = None
    verdict = classify_run(claim, found)
    return {
        "run_outcome": verdict.verdict if verdict else None,
        "run_verification": (verification or {}).get("result") if isinstance(verification, Mapping) else None,
    }
