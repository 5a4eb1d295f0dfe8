"""Run health: the one place that decides how a whole run is doing, and says why.

A run's health is the **worst** of three kinds of evidence, each turned into a
named reason:

- its handoffs' verdicts (a failed boundary fails the run; an uncertain wait needs
  attention; a valid wait is waiting);
- its task status: failed fails the run, parked needs attention, queued/running is
  in progress, waiting is waiting; a run that ended complete with no handoff, or whose
  latest outcome verification did not pass, fails (a tool-call limit of 0 ends runs
  exactly like that);
- what the other middleware reported: a dead model, exhausted retries and "no
  handoff recorded" fail the run; a call limit hit, a tool error or dropped evidence
  need attention; summaries and context edits are information only.

Levels, worst first: failing, attention, waiting, in_progress, healthy. A run is
healthy only when there is no reason at all, so nothing that failed is ever green.
`assess` is pure (values in, values out); `refresh` reads its inputs with a few
indexed queries, stores the result on the run and announces a change.

`refresh` also keeps the run's summary (`SUMMARY_FIELDS`: handoffs, problem handoffs,
open false completions, the latest handoff's verdict) from the same verdict counts, so
the runs list reads stored columns instead of counting every run's handoffs per request.

Settled verdicts (spec v1.2): a failing verdict that lacks a part still due is *in
progress*, not a problem, until its handoff is settled (`due_part`, the one rule every
page, count, alert and export reads; `due_condition` is the same rule in SQL). Such a
handoff is a reason of the in_progress level ("Handoff in progress — waiting for the
reduced receipt") and not counted among the run's problem handoffs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import TypedDict

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
    "no_handoff": (FAILING, "No handoff recorded"),
    "call_limit": (ATTENTION, "Call limit hit"),
    "tool_error": (ATTENTION, "Tool error"),
    "evidence_dropped": (ATTENTION, "Evidence dropped"),
}
ALARM_KINDS = tuple(REPORT_REASONS)

# A parked run's Run.error when the graph itself holds it (a destination held by `interrupt_before`), not a
# stopped auto-continue: "held_before:sales" (node names only).
HELD_BEFORE = "held_before:"


def held_before(nodes: Iterable[str]) -> str:
    """The Run.error of a run parked before `nodes` by the graph's interrupt_before: "held_before:sales"."""
    return f"{HELD_BEFORE}{','.join(nodes)}"[:200]


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
    "no_handoff": "check that every agent records its handoffs (wrapped by the middleware) before trusting this run",
    "unverified": "check the outcome in the system of record before relying on it; the verifier did not prove it",
    "status_failed": "inspect the last agent's reports below, fix the cause, then start the run again; "
    "no handoff was left half-done",
    "tool_error": "inspect the tool error below; the run went on, so check its result before relying on it",
    "call_limit": "check whether the call limit cut the work short; raise the limit in Limits if it was too low",
    "evidence_dropped": "the receipts lost a field (named below): check the run's outcome directly",
}


def run_next_move(reasons: Iterable[Mapping]) -> str:
    """The run's own safe next move from its stored health reasons, "" when a handoff explains the trouble."""
    codes = {str(r.get("code", "")) for r in reasons}
    if codes & {verdict.lower() for verdict in VERDICT_REASONS}:
        return ""  # a failing or waiting handoff's card carries the next move
    return next((move for code, move in RUN_NEXT_MOVES.items() if code in codes), "")


# --- settled verdicts (spec v1.2) ------------------------------------------------------

# A failing verdict whose boundary lacks this part is "not yet" while its handoff is unsettled: the spec's
# due parts (`reduced` by the end of the step that applied the update, `destination` by the end of the next).
DUE_PARTS: dict[str, str] = {"STALE_CONTROL": "reduced", "DESTINATION_NOT_STARTED": "destination"}
# After a wait was resolved, the claim "waiting" predates the decision: the resumed run's next final status
# is due, and UNCERTAIN ("final_status is waiting but no open wait receipt") is not yet a verdict.
AWAITED_STATUS = "final_status"
DUE_WORDS = {
    "reduced": "the reduced receipt",
    "destination": "the destination receipt",
    AWAITED_STATUS: "the final status",
}
# Run.latest_verdict of a latest handoff in progress: "STALE_CONTROL:reduced" (`latest_code`, `split_latest`).
_DUE_MARK = ":"


def due_part(handoff) -> str | None:
    """The part an unsettled handoff's failing verdict still waits for, or None when the verdict is final.

    "reduced" (STALE_CONTROL without a reduced receipt), "destination" (DESTINATION_NOT_STARTED without a
    destination receipt) or "final_status" (UNCERTAIN because the claim "waiting" outlived its resolved
    wait). A verdict on evidence that is present and wrong is final at once; a settled handoff's always is.
    """
    if handoff.settled_at is not None:
        return None
    part = DUE_PARTS.get(handoff.verdict)
    if part is not None:
        return part if getattr(handoff, f"{part}_part") is None else None
    resolved_wait = handoff.wait_part is not None and not handoff.wait_open
    if handoff.verdict == "UNCERTAIN" and handoff.final_status == "waiting" and resolved_wait:
        return AWAITED_STATUS
    return None


def due_condition():
    """`due_part(handoff) is not None` as a query condition (a Q on Handoff): the same rule, in SQL."""
    from django.db.models import Q

    missing = Q(verdict="STALE_CONTROL", reduced_part__isnull=True) | Q(
        verdict="DESTINATION_NOT_STARTED", destination_part__isnull=True
    )
    awaited = Q(verdict="UNCERTAIN", final_status="waiting", wait_part__isnull=False, wait_open=False)
    return Q(settled_at__isnull=True) & (missing | awaited)


def due_of_verdict(verdict: str) -> str:
    """The part an in-progress handoff of `verdict` waits for (what `due_part` gives for it)."""
    return DUE_PARTS.get(verdict, AWAITED_STATUS)


def in_progress_words(part: str) -> str:
    """What a page says of a handoff in progress: "In progress — waiting for the reduced receipt"."""
    return f"In progress — waiting for {DUE_WORDS.get(part, part)}"


def latest_code(verdict: str, due: str | None) -> str:
    """The value stored in Run.latest_verdict: the verdict, with the part it waits for while in progress."""
    return f"{verdict}{_DUE_MARK}{due}" if verdict and due else verdict


def split_latest(code: str) -> tuple[str, str]:
    """(verdict, due part or "") from a stored Run.latest_verdict."""
    verdict, _, due = code.partition(_DUE_MARK)
    return verdict, due


def _settles(handoffs) -> bool:
    # A data migration before 0016 passes a historical Handoff without settled_at: everything was final then.
    return any(f.name == "settled_at" for f in handoffs._meta.get_fields())


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
) -> Health:
    """The run's health from its status and error, its handoffs' verdict counts, its middleware
    reports as (kind, detail, count) and, for a complete run, its latest verification result
    ("settled" when an operator settled the latest handoff's false completion).

    `in_progress` counts, per verdict, those of `verdicts` that are not final yet (`due_part`): each is a
    reason of the in_progress level, never a failure."""
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
    if status == "complete" and not (verdicts or pending) and "no_handoff" not in by_kind:
        by_kind["no_handoff"] = ([{}], 1)
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
            count = 1 if kind == "no_handoff" else total
            reasons.append(_reason(level, kind, text + _report_names(kind, details), count))
    reasons.sort(key=lambda r: LEVELS.index(r["level"]))  # stable: worst first, in rule order
    return Health(worst(r["level"] for r in reasons), reasons)


# --- stored on the run ---------------------------------------------------------------


def inputs(run_id: int, status: str, error: str, *, handoffs, reports) -> dict:
    """`assess`'s keyword arguments for one run: three indexed queries at most.

    `handoffs` and `reports` are the Handoff and MiddlewareReport model classes (a
    migration passes its historical ones).
    """
    from django.db.models import Count, Value

    counted = handoffs.objects.filter(run_id=run_id).order_by().values_list("verdict")
    due = Count("pk", filter=due_condition()) if _settles(handoffs) else Value(0)
    rows = list(counted.annotate(n=Count("pk"), due=due))
    verdicts = {verdict: n for verdict, n, _ in rows}
    in_progress = {verdict: pending for verdict, _, pending in rows if pending}
    settled: set[int] = set()
    if verdicts.get("FALSE_COMPLETE"):
        settled = _settled(run_id, handoffs)
        verdicts["FALSE_COMPLETE"] -= len(settled)
        verdicts[SETTLED_FALSE_COMPLETE] = len(settled)
    latest = None
    if status == "complete" and verdicts:
        row = (
            handoffs.objects.filter(run_id=run_id)
            .order_by("-created_at", "-pk")
            .values_list("pk", "verification_part")
            .first()
        )
        latest = "settled" if row and row[0] in settled else ((row[1] if row else None) or {}).get("result")
    found = (
        reports.objects.filter(run_id=run_id, kind__in=ALARM_KINDS)
        .order_by()
        .values_list("kind", "detail")
        .annotate(n=Count("pk"))
    )
    return {
        "status": status,
        "error": error,
        "verdicts": verdicts,
        "reports": list(found),
        "latest_verification": latest,
        "in_progress": in_progress,
    }


SUMMARY_FIELDS = ("handoff_count", "problem_count", "open_false_count", "latest_verdict")
# Verdicts that are not a problem in the runs list's "n failing" (a settled false completion still is).
UNPROBLEMATIC = ("HEALTHY", "WAITING_ON_APPROVAL")


def summary(
    run_id: int, verdicts: Mapping[str, int], *, handoffs, in_progress: Mapping[str, int] | None = None
) -> dict:
    """The run's `SUMMARY_FIELDS` from its verdict counts as `inputs` gives them; one indexed query (the latest).

    A handoff in progress is no problem (yet); the latest one's stored verdict names the part it waits for.
    """
    from django.db.models import BooleanField, ExpressionWrapper, Value

    total = sum(verdicts.values())
    latest = None
    if total:
        due = ExpressionWrapper(due_condition(), BooleanField()) if _settles(handoffs) else Value(False)
        newest = handoffs.objects.filter(run_id=run_id).order_by("-updated_at", "-pk").annotate(due=due)
        latest = newest.values_list("verdict", "due").first()
    pending = sum((in_progress or {}).values())
    return {
        "handoff_count": total,
        "problem_count": total - sum(verdicts.get(v, 0) for v in UNPROBLEMATIC) - pending,
        "open_false_count": verdicts.get("FALSE_COMPLETE", 0),
        "latest_verdict": latest_code(latest[0], due_of_verdict(latest[0]) if latest[1] else None) if latest else "",
    }


def _settled(run_id: int, handoffs) -> set[int]:
    """The run's false-complete handoffs whose latest verdict change is an operator's settlement."""
    from django.db.models import OuterRef, Subquery

    changes = handoffs._meta.apps.get_model("receipts", "VerdictChange")
    latest = changes.objects.filter(handoff=OuterRef("pk")).order_by("-at", "-pk").values("cause")[:1]
    found = handoffs.objects.filter(run_id=run_id, verdict="FALSE_COMPLETE").annotate(cause=Subquery(latest))
    return set(found.filter(cause__in=SETTLEMENT_CAUSES).values_list("pk", flat=True))


def refresh(run, *, now: datetime | None = None, publish: bool = True) -> bool:
    """Recompute `run`'s health and summary, store them (`Run.health`, `Run.health_reasons`,
    `SUMMARY_FIELDS`) and, when the health changed, publish a `run.changed` event after commit
    (unless the caller announces the run itself).

    True when the health changed. Call it wherever its inputs change: a receipt recorded or
    reclassified, a status set, a middleware report added, a false completion settled.
    """
    from django.db import transaction
    from django.utils import timezone

    from receipts.models import Handoff, MiddlewareReport, Run

    stored = (
        Run.objects.filter(pk=run.pk).values("status", "error", "health", "health_reasons", *SUMMARY_FIELDS).first()
    )
    if stored is None:
        return False
    facts = inputs(run.pk, stored["status"], stored["error"], handoffs=Handoff, reports=MiddlewareReport)
    found = assess(**facts)
    kept = summary(run.pk, facts["verdicts"], handoffs=Handoff, in_progress=facts["in_progress"])
    run.health, run.health_reasons = found.level, found.reasons
    for name, value in kept.items():
        setattr(run, name, value)
    health_changed = (stored["health"], stored["health_reasons"]) != (found.level, found.reasons)
    if not health_changed and all(stored[name] == value for name, value in kept.items()):
        return False
    now = now or timezone.now()
    with transaction.atomic():
        Run.objects.filter(pk=run.pk).update(health=found.level, health_reasons=found.reasons, updated_at=now, **kept)
        if publish and health_changed:
            _announce(run, stored["status"], now)
    return health_changed


def _announce(run, status: str, now: datetime) -> None:
    from django.db import transaction

    from receipts.ingest import broadcast
    from receipts.ingest.recording import next_seq  # recording calls refresh: imported late

    event: broadcast.RunEvent = {
        "type": "run.changed",
        "run": run.pk,
        "operation_id": run.operation_id,
        "seq": next_seq(run),
        "status": status,
        "health": run.health,
        "dry_run": run.dry_run,
        "at": now.isoformat(),
    }
    transaction.on_commit(partial(broadcast.publish, event))


def fill_summaries(*, run_model, handoffs, reports) -> int:
    """Fill `SUMMARY_FIELDS` for every run (the data migration that added them); returns how many it filled."""
    filled = 0
    for pk, status, error in list(run_model.objects.order_by("pk").values_list("pk", "status", "error")):
        facts = inputs(pk, status, error, handoffs=handoffs, reports=reports)
        kept = summary(pk, facts["verdicts"], handoffs=handoffs, in_progress=facts["in_progress"])
        filled += run_model.objects.filter(pk=pk).update(**kept)
    return filled


def refresh_all(*, run_model, handoffs, reports) -> int:
    """Fill health for every run (the data migration and `refresh` for old rows); returns how many changed."""
    changed = 0
    rows = list(run_model.objects.order_by("pk").values_list("pk", "status", "error", "health", "health_reasons"))
    for pk, status, error, level, reasons in rows:
        found = assess(**inputs(pk, status, error, handoffs=handoffs, reports=reports))
        if (level, reasons) != (found.level, found.reasons):
            run_model.objects.filter(pk=pk).update(health=found.level, health_reasons=found.reasons)
            changed += 1
    return changed


def refresh_many(runs, *, now: datetime | None = None) -> None:
    """`refresh` for the runs one batch touched, without publishing, in the same few queries however many.

    The same inputs as `inputs` and `summary`, read for all the runs at once (grouped by run), judged by
    `assess`, and stored in one UPDATE for the runs whose health or summary changed.
    """
    from django.utils import timezone

    from receipts.ingest import sqlsets
    from receipts.models import Run

    runs = {run.pk: run for run in runs}
    if not runs:
        return
    now = now or timezone.now()
    rows = _stored_many(runs)
    counts = _verdict_counts(runs)
    settled = _settled_many([pk for pk, (verdicts, _) in counts.items() if verdicts.get("FALSE_COMPLETE")])
    reports = _reports_many(runs)
    changed = []
    for pk, row in rows.items():
        verdicts, in_progress = counts.get(pk, ({}, {}))
        facts = _facts(row, verdicts, in_progress, settled.get(pk, set()), reports.get(pk, []))
        found = assess(**facts)
        kept = _summary_of(row, facts["verdicts"], in_progress)
        run = runs[pk]
        run.health, run.health_reasons = found.level, found.reasons
        for name, value in kept.items():
            setattr(run, name, value)
        same = (row["health"], row["health_reasons"]) == (found.level, found.reasons)
        if not same or any(row[name] != value for name, value in kept.items()):
            run.updated_at = now
            changed.append(run)
    sqlsets.update_rows(Run, changed, ["health", "health_reasons", "updated_at", *SUMMARY_FIELDS])


def _facts(row: Mapping, verdicts: dict, in_progress: dict, settled: set[int], reports: list) -> dict:
    """`assess`'s keyword arguments for one run, as `inputs` gives them."""
    verdicts = dict(verdicts)
    if verdicts.get("FALSE_COMPLETE"):
        verdicts["FALSE_COMPLETE"] -= len(settled)
        verdicts[SETTLED_FALSE_COMPLETE] = len(settled)
    latest = None
    if row["status"] == "complete" and verdicts:
        latest = "settled" if row["latest_pk"] in settled else (row["latest_verification"] or {}).get("result")
    return {
        "status": row["status"],
        "error": row["error"],
        "verdicts": verdicts,
        "reports": reports,
        "latest_verification": latest,
        "in_progress": in_progress,
    }


def _summary_of(row: Mapping, verdicts: Mapping[str, int], in_progress: Mapping[str, int]) -> dict:
    """`summary` from verdict counts and the newest handoff read with the run."""
    total = sum(verdicts.values())
    newest = row["newest_verdict"]
    due = due_of_verdict(newest) if row["newest_due"] else None
    return {
        "handoff_count": total,
        "problem_count": total - sum(verdicts.get(v, 0) for v in UNPROBLEMATIC) - sum(in_progress.values()),
        "open_false_count": verdicts.get("FALSE_COMPLETE", 0),
        "latest_verdict": latest_code(newest, due) if total and newest else "",
    }


def _stored_many(runs: Iterable[int]) -> dict[int, dict]:
    """Each run's stored health and summary, with its newest (updated) and latest (created) handoff's facts."""
    from django.db.models import BooleanField, ExpressionWrapper, OuterRef, Subquery

    from receipts.models import Handoff, Run

    newest = Handoff.objects.filter(run_id=OuterRef("pk")).order_by("-updated_at", "-pk")
    latest = Handoff.objects.filter(run_id=OuterRef("pk")).order_by("-created_at", "-pk")
    due = ExpressionWrapper(due_condition(), BooleanField())
    rows = Run.objects.filter(pk__in=runs).values(
        "pk",
        "status",
        "error",
        "health",
        "health_reasons",
        *SUMMARY_FIELDS,
        newest_verdict=Subquery(newest.values("verdict")[:1]),
        newest_due=Subquery(newest.annotate(due=due).values("due")[:1]),
        latest_pk=Subquery(latest.values("pk")[:1]),
        latest_verification=Subquery(latest.values("verification_part")[:1]),
    )
    return {row["pk"]: row for row in rows}


def _verdict_counts(runs: Iterable[int]) -> dict[int, tuple[dict[str, int], dict[str, int]]]:
    """Per run: (handoffs per verdict, those of them in progress per verdict)."""
    from django.db.models import Count

    from receipts.models import Handoff

    counted = Handoff.objects.filter(run_id__in=runs).order_by().values_list("run_id", "verdict")
    found: dict[int, tuple[dict[str, int], dict[str, int]]] = {}
    for run_id, verdict, n, pending in counted.annotate(n=Count("pk"), due=Count("pk", filter=due_condition())):
        verdicts, in_progress = found.setdefault(run_id, ({}, {}))
        verdicts[verdict] = n
        if pending:
            in_progress[verdict] = pending
    return found


def _settled_many(run_ids: list[int]) -> dict[int, set[int]]:
    """`_settled` for several runs at once (one query, none when no run has a false completion)."""
    from django.db.models import OuterRef, Subquery

    from receipts.models import Handoff, VerdictChange

    if not run_ids:
        return {}
    latest = VerdictChange.objects.filter(handoff=OuterRef("pk")).order_by("-at", "-pk").values("cause")[:1]
    found = Handoff.objects.filter(run_id__in=run_ids, verdict="FALSE_COMPLETE").annotate(cause=Subquery(latest))
    settled: dict[int, set[int]] = {}
    for run_id, pk in found.filter(cause__in=SETTLEMENT_CAUSES).values_list("run_id", "pk"):
        settled.setdefault(run_id, set()).add(pk)
    return settled


def _reports_many(runs: Iterable[int]) -> dict[int, list[tuple[str, Mapping | None, int]]]:
    from django.db.models import Count

    from receipts.models import MiddlewareReport

    found = (
        MiddlewareReport.objects.filter(run_id__in=runs, kind__in=ALARM_KINDS)
        .order_by()
        .values_list("run_id", "kind", "detail")
        .annotate(n=Count("pk"))
    )
    reports: dict[int, list[tuple[str, Mapping | None, int]]] = {}
    for run_id, kind, detail, n in found:
        reports.setdefault(run_id, []).append((kind, detail, n))
    return reports
