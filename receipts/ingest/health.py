"""Run health: the one place that decides how a whole run is doing, and says why.

A run's health is the **worst** of three kinds of evidence, each turned into a
named reason:

- its handoffs' verdicts (a failed boundary fails the run; an uncertain wait needs
  attention; a valid wait is waiting);
- its task status: failed fails the run, parked needs attention, queued/running is
  in progress, waiting is waiting; a run whose latest outcome verification did not pass
  fails; a run that made no handoff is judged by its outcome alone (spec v1.3: check 7
  on the run, from the verification and final status it keeps), and having no handoff
  is never a reason by itself;
- what the other middleware reported: a dead model and exhausted retries fail the run;
  a call limit hit, a tool error or dropped evidence need attention; summaries, context
  edits and "no handoffs" are information only.

Levels, worst first: failing, attention, waiting, in_progress, healthy. A run is
healthy only when there is no reason at all, so nothing that failed is ever green.
`assess` is pure (values in, values out; receipts.ingest.assessment); `refresh` reads its
inputs with a few indexed queries, stores the result on the run and announces a change.

`refresh` also keeps the run's summary (`SUMMARY_FIELDS`: handoffs, problem handoffs,
open false completions, the latest handoff's verdict) from the same verdict counts, so
the runs list reads stored columns instead of counting every run's handoffs per request.

Settled verdicts (spec v1.2): a failing verdict that lacks a part still due is *in
progress*, not a problem, until its handoff is settled (`due_part`, the one rule every
page, count, alert and export reads; `due_condition` is the same rule in SQL). Such a
handoff is a reason of the in_progress level ("Handoff in progress — waiting for the
reduced receipt") and not counted among the run's problem handoffs. Those rules live in
receipts.ingest.due; this module re-exports them and the levels, so `health.X` reads as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from functools import partial

# The rules, re-exported: callers read them as `health.X`.
from receipts.ingest.assessment import (  # noqa: F401
    ALARM_KINDS,
    ALARMING,
    ATTENTION,
    FAILING,
    HEALTHY,
    HELD_BEFORE,
    IN_PROGRESS,
    LEVELS,
    REPORT_REASONS,
    RUN_NEXT_MOVES,
    SETTLED_FALSE_COMPLETE,
    SETTLEMENT_CAUSES,
    STATUS_REASONS,
    VERDICT_REASONS,
    WAITING,
    Health,
    Reason,
    assess,
    held_before,
    run_next_move,
    run_outcome,
    worst,
)
from receipts.ingest.due import (  # noqa: F401
    AWAITED_STATUS,
    DUE_PARTS,
    DUE_WORDS,
    due_condition,
    due_of_verdict,
    due_part,
    in_progress_words,
    latest_code,
    split_latest,
)


def inputs(
    run_id: int,
    status: str,
    error: str,
    *,
    handoffs,
    reports,
    final_status: str = "",
    verification: Mapping | None = None,
) -> dict:
    """`assess`'s keyword arguments for one run: three indexed queries at most.

    `handoffs` and `reports` are the Handoff and MiddlewareReport model classes (a
    migration passes its historical ones); `final_status` and `verification` are the run's
    own outcome (kept when it has no handoff).
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
        **(run_outcome(status, final_status, verification) if not verdicts else {}),
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
        Run.objects.filter(pk=run.pk)
        .values("status", "error", "health", "health_reasons", "final_status", "verification", *SUMMARY_FIELDS)
        .first()
    )
    if stored is None:
        return False
    outcome = {"final_status": stored["final_status"], "verification": stored["verification"]}
    facts = inputs(run.pk, stored["status"], stored["error"], handoffs=Handoff, reports=MiddlewareReport, **outcome)
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
    from receipts.ingest.sequence import next_seq

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


def _settles(handoffs) -> bool:
    # A data migration before 0016 passes a historical Handoff without settled_at: everything was final then.
    return any(f.name == "settled_at" for f in handoffs._meta.get_fields())
